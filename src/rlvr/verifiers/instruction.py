"""IFEval-style instruction-following checks with the constraints given as the reference.

No maintained library fitted: the IFEval reference code (google-research, also
vendored by ``lm-eval`` and ``if-verifiable``) needs ``nltk`` with its ``punkt``
data (a download at run time, impossible offline), ``langdetect`` and, for
``if-verifiable``, ``datasets``.  This module implements a focused, dependency-free
subset with the same semantics as the IFEval instruction of the same idea.

The reference is JSON: a list of constraints (or ``{"constraints": [...]}``), each
``{"type": ..., **arguments}``:

=====================  ==================================================  =========================
type                   passes when                                         IFEval counterpart
=====================  ==================================================  =========================
``words``              ``min <= #words <= max`` (either bound optional)    length_constraints:number_words
``sentences``          ``min <= #sentences <= max``                        length_constraints:number_sentences
``include_keywords``   every keyword in ``keywords`` occurs (case-insens.)  keywords:existence
``exclude_keywords``   no keyword in ``keywords`` occurs                   keywords:forbidden_words
``keyword_frequency``  ``keyword`` occurs ``min..max`` times (whole words)  keywords:frequency
``json``               the response (optionally in a ``` fence) is JSON    detectable_format:json_format
``lowercase``          no uppercase letter                                 change_case:english_lowercase
``uppercase``          no lowercase letter                                 change_case:english_capital
``sections``           >= ``count`` sections marked ``<splitter> N``       detectable_format:multiple_sections
``bullets``            exactly ``count`` markdown bullets (``*``/``-``)     detectable_format:number_bullet_lists
``no_commas``          no comma                                            punctuation:no_comma
``ends_with``          the response ends with ``phrase``                   startend:end_checker
=====================  ==================================================  =========================

Score 1.0 when all constraints hold (``partial=True``: the fraction that hold); the
reason names the failures.  Never raises; a bad constraint is a failed verdict.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier

__all__ = ["CHECKS", "check_constraint", "instruction_verifier"]

_WORD_RE = re.compile(r"\b\w+\b")
_SENTENCE_END_RE = re.compile(r"[.!?]+(?=\s|$)")
_BULLET_RE = re.compile(r"^\s*[*-]\s", re.M)
_FENCE_RE = re.compile(r"^```(?:json|JSON|Json)?\s*\n?(.*?)\n?```\s*$", re.S)


def _bounds(n: int, c: dict) -> tuple[bool, str]:
    lo, hi = c.get("min"), c.get("max")
    if lo is None and hi is None:
        raise ValueError("needs min and/or max")
    ok = (lo is None or n >= int(lo)) and (hi is None or n <= int(hi))
    return ok, f"{n} (want {lo if lo is not None else ''}..{hi if hi is not None else ''})"


def _words(text: str, c: dict) -> tuple[bool, str]:
    return _bounds(len(_WORD_RE.findall(text)), c)


def _sentences(text: str, c: dict) -> tuple[bool, str]:
    stripped = text.strip()
    n = len(_SENTENCE_END_RE.findall(stripped))
    if stripped and not _SENTENCE_END_RE.search(stripped[-3:] + " "):
        n += 1  # a final sentence without a period still counts
    return _bounds(n, c)


def _keywords(c: dict) -> list[str]:
    kws = c.get("keywords")
    if not isinstance(kws, list) or not kws or not all(isinstance(k, str) and k for k in kws):
        raise ValueError("needs a non-empty list of keywords")
    return kws


def _include(text: str, c: dict) -> tuple[bool, str]:
    missing = [k for k in _keywords(c) if k.lower() not in text.lower()]
    return not missing, f"missing {missing}" if missing else "all present"


def _exclude(text: str, c: dict) -> tuple[bool, str]:
    found = [k for k in _keywords(c) if re.search(r"\b" + re.escape(k) + r"\b", text, re.I)]
    return not found, f"forbidden {found}" if found else "none present"


def _frequency(text: str, c: dict) -> tuple[bool, str]:
    kw = c.get("keyword")
    if not isinstance(kw, str) or not kw:
        raise ValueError("needs a keyword")
    return _bounds(len(re.findall(r"\b" + re.escape(kw) + r"\b", text, re.I)), c)


def _json(text: str, c: dict) -> tuple[bool, str]:
    t = text.strip()
    m = _FENCE_RE.match(t)
    if m:
        t = m.group(1).strip()
    try:
        json.loads(t)
        return True, "valid JSON"
    except ValueError as e:
        return False, f"invalid JSON ({str(e)[:80]})"


def _lower(text: str, c: dict) -> tuple[bool, str]:
    return text == text.lower() and any(ch.isalpha() for ch in text), "case"


def _upper(text: str, c: dict) -> tuple[bool, str]:
    return text == text.upper() and any(ch.isalpha() for ch in text), "case"


def _sections(text: str, c: dict) -> tuple[bool, str]:
    splitter = str(c.get("splitter", "Section")).strip()
    count = int(c["count"])
    n = len(re.findall(r"\s?" + re.escape(splitter) + r"\s?\d+\s?", text))
    return n >= count, f"{n} sections (want >= {count})"


def _bullets(text: str, c: dict) -> tuple[bool, str]:
    count = int(c["count"])
    n = len(_BULLET_RE.findall(text))
    return n == count, f"{n} bullets (want {count})"


def _no_commas(text: str, c: dict) -> tuple[bool, str]:
    return "," not in text, "commas"


def _ends_with(text: str, c: dict) -> tuple[bool, str]:
    phrase = c.get("phrase")
    if not isinstance(phrase, str) or not phrase:
        raise ValueError("needs a phrase")
    return text.strip().lower().endswith(phrase.strip().lower()), f"ending {text.strip()[-40:]!r}"


CHECKS: dict[str, Callable[[str, dict], tuple[bool, str]]] = {
    "words": _words, "sentences": _sentences, "include_keywords": _include, "exclude_keywords": _exclude,
    "keyword_frequency": _frequency, "json": _json, "lowercase": _lower, "uppercase": _upper,
    "sections": _sections, "bullets": _bullets, "no_commas": _no_commas, "ends_with": _ends_with,
}
"""Constraint type -> ``check(text, constraint) -> (passed, detail)``."""


def check_constraint(text: str, constraint: dict) -> tuple[bool, str]:
    """``(passed, detail)`` for one constraint dict; an invalid constraint raises ValueError."""
    if not isinstance(constraint, dict) or constraint.get("type") not in CHECKS:
        kind = constraint.get("type") if isinstance(constraint, dict) else constraint
        raise ValueError(f"unknown constraint {kind!r}; known: {', '.join(sorted(CHECKS))}")
    try:
        return CHECKS[constraint["type"]](text, constraint)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"bad {constraint['type']} constraint: {e}") from e


def _parse(reference: Any) -> list[dict]:
    ref = json.loads(reference) if isinstance(reference, str) else reference
    if isinstance(ref, dict):
        ref = ref.get("constraints")
    if not isinstance(ref, list) or not ref:
        raise ValueError("reference must be a non-empty JSON list of constraints")
    return ref


@register_verifier("instruction")
def instruction_verifier(partial: bool = False, max_chars: int = 200_000) -> Verifier:
    """A verifier checking a response against JSON constraints (see the module doc).

    Args:
        partial: score is the fraction of constraints met (default: all or nothing).
        max_chars: longer completions fail without being checked.
    """

    def verify(completion: str, reference: str) -> Verdict:
        try:
            if not isinstance(completion, str):
                return Verdict(0.0, None, f"completion is not a string ({type(completion).__name__})")
            if not completion.strip():
                return Verdict(0.0, None, "empty completion")
            if len(completion) > max_chars:
                return Verdict(0.0, None, f"completion too long ({len(completion)} chars > {max_chars})")
            try:
                constraints = _parse(reference)
                results = [(c.get("type"), *check_constraint(completion, c)) for c in constraints]
            except (ValueError, TypeError, AttributeError) as e:
                return Verdict(0.0, None, f"bad reference: {str(e)[:200]}")
            failed = [f"{t}: {d}" for t, ok, d in results if not ok]
            passed = len(results) - len(failed)
            score = passed / len(results) if partial else float(not failed)
            reason = f"{passed}/{len(results)} constraints met" + (f"; failed {'; '.join(failed)}" if failed else "")
            return Verdict(score, None, reason[:500])
        except Exception as e:  # noqa: BLE001
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {str(e)[:200]}")

    return verify
