"""The ``math`` verifier: is the final answer of a completion equal to a reference?

Three layers, like HF Math-Verify, each a small module:

* :mod:`.extract` finds the answer (last ``\\boxed{}``, "final answer is",
  ``####``, "the answer is", last number) after any ``<think>`` block (never in it),
  judges a self-correction on its final attempt and rejects hedged or retracted
  answers (the rules are in its docstring);
* :mod:`.normalize` cleans it (units, ``\\text{}``, degrees, thousands separators,
  repeating decimals, mixed numbers, scientific notation, ``x = 3``...);
* :mod:`.compare` decides equality: cheap exact rules first, then math-verify /
  latex2sympy2_extended / sympy, run in a killable worker (:mod:`.sandbox`) so
  that no input can overrun the time limit.  Infinity, NaN and overflow never equal
  a number, and an exact reference is not matched by a nearby decimal (the rules are
  in its docstring).

The property behind all three: no response earns reward against a gold it is not
equal to (``tests/verifiers/test_math_universal.py`` checks it over every gold the
package ships; ``benchmarks/gold_crossmatch.py`` compares the golds with each other).

``get_verifier("math", strictness=..., tolerance=..., timeout=...)`` builds one;
the callable never raises and never blocks longer than about ``timeout`` seconds
(plus worker start-up on the first symbolic check).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.math.compare import quick_compare, symbolic_compare
from rlvr.verifiers.math.extract import (
    STRICTNESS,
    boxed_spans,
    Extraction,
    extract_answer,
    find_hedge,
    find_retraction,
    is_prose,
    latex_spans,
)
from rlvr.verifiers.math.normalize import clean, not_an_answer, split_relation
from rlvr.verifiers.math.sandbox import Sandbox

__all__ = ["math_verifier", "extract_answer", "Extraction", "STRICTNESS", "get_sandbox"]

MAX_ANSWER_CHARS = 2000
_SANDBOX: Sandbox | None = None
_TOP_COMMA_RE = re.compile(r",|;|\\text\s*\{\s*(?:or|and)\s*\}|\b(?:or|and)\b")
_CONNECTIVES_RE = re.compile(r"[\s,;.]*(?:(?:\b(?:or|and)\b|[,;])[\s,;.]*)*", re.IGNORECASE)
_DECIMAL_COMMA_RE = re.compile(r"[-+]?(\d+),(\d+)")
_THOUSANDS_OK_RE = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+")
REQUIRE_VALUE = (True, False, "auto")
_BETWEEN_JUNK_RE = re.compile(r"\$|\\[()\[\]]|\\q?quad|\\[,;:! ]|\\text\s*\{|\}|\s")
_DOUBLED_CMD_RE = re.compile(r"\\\\(?=(?:boxed|fbox|text|frac|dfrac|le|leq|ge|geq|sqrt|cdot|times|pi|infty)\b|(?:boxed|fbox)\{)")
_LIST_WORD_RE = re.compile(r",|;|\band\b", re.IGNORECASE)


def get_sandbox() -> Sandbox:
    """The process-wide worker used for symbolic checks (created on first use)."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox(warmup=(symbolic_compare, ("(x+1)^2", "x^2+2x+1", 1e-6)))
    return _SANDBOX


def _short(s: Any, limit: int = 60) -> str:
    s = str(s).strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _reference_answer(reference: Any) -> str | None:
    """The reference as an answer string (numbers allowed; a boxed reference is unboxed)."""
    if isinstance(reference, bool) or reference is None:
        return None
    if isinstance(reference, (int, float)):
        if isinstance(reference, float) and not math.isfinite(reference):
            return None
        reference = str(int(reference)) if float(reference).is_integer() else repr(reference)
    if not isinstance(reference, str) or not reference.strip():
        return None
    s = unescape_commands(reference.strip())
    if "\\boxed" in s or "\\fbox" in s:
        ex = extract_answer(s, "strict")
        if ex.answer:  # several boxes spell out a list: "\\boxed{1} and \\boxed{2}" -> "1, 2"
            if len(ex.boxes) > 1 and _boxes_form_a_list(s):
                return ", ".join(ex.boxes)
            return ex.answer
    spans = latex_spans(s)
    if spans:  # delimiters are presentation: "$x \\le 2$" -> "x \\le 2"; "$21,16$ or $11$" -> "21,16, 11"
        rest = s
        for a, b, _, _ in reversed(spans):
            rest = rest[:a] + " " + rest[b:]
        if _CONNECTIVES_RE.fullmatch(rest):
            return ", ".join(s[c:d].strip() for _, _, c, d in spans)
    if is_prose(s):  # a whole reference solution: its final answer
        ex = extract_answer(s, "lenient")
        if ex.answer:
            return ", ".join(ex.boxes) if len(ex.boxes) > 1 else ex.answer
    return s


def unescape_commands(s: str) -> str:
    """``\\\\boxed`` -> ``\\boxed``: a doubled backslash before a command name, as left by
    string escaping (``"\\\\boxed{4}"`` in source code), outside matrices and aligned rows."""
    if "\\\\" not in s or "\\begin" in s:
        return s
    return _DOUBLED_CMD_RE.sub(r"\\", s)


def _boxes_form_a_list(s: str) -> bool:
    """Several boxes in a reference read as one list answer when only delimiters or a
    list word stand between them (``\\boxed{1}\\boxed{2}``, ``\\(\\boxed{1}\\) and \\(\\boxed{-2}\\)``)."""
    spans = boxed_spans(s)
    outer = [sp for sp in spans if not any(o[0] < sp[0] and sp[1] < o[1] for o in spans)]
    for (_, e), (b, _) in zip(outer, outer[1:]):
        between = s[e + 1:b].rsplit("\\", 1)[0] if "\\" in s[e + 1:b] else s[e + 1:b]
        between = between if not s[e + 1:b].rstrip().endswith(("boxed", "fbox")) else s[e + 1:b][:s[e + 1:b].rfind("\\")]
        if _BETWEEN_JUNK_RE.sub("", between) and not _LIST_WORD_RE.search(between):
            return False
    return True


def _list_like(s: str) -> bool:
    return bool(_TOP_COMMA_RE.search(s))


def _decimal_commas(g: str, p: str) -> tuple[str, str]:
    """``1,22`` is 1.22 where that is unambiguous: the other side is a decimal number and
    the comma cannot be a thousands separator (``1000,99``, ``0,111``, ``2,74``)."""
    out = []
    for a, b in ((g, p), (p, g)):
        m = _DECIMAL_COMMA_RE.fullmatch(a.strip())
        if m and "." in b and not _THOUSANDS_OK_RE.fullmatch(a.strip()) and "," not in b:
            a = a.strip().replace(",", ".")
        out.append(a)
    return out[0], out[1]


@register_verifier("math")
def math_verifier(strictness: str = "lenient", tolerance: float = 1e-6, timeout: float = 5.0,
                  max_chars: int = 200_000, isolate: bool = True,
                  require_value: bool | str = "auto") -> Verifier:
    """A verifier scoring 1.0 when the completion's final answer equals the reference.

    Args:
        strictness: which answer markers count: ``"strict"`` (boxed, "final answer
            is", ``####``), ``"standard"`` (+ "the answer is"/"Answer:") or
            ``"lenient"`` (+ the last number in the text).
        tolerance: relative tolerance for numeric answers (exact rationals match exactly).
        timeout: hard limit in seconds for one symbolic check (a killed worker).
        max_chars: longer completions are rejected without being read.
        isolate: run symbolic checks in the worker process (False: in-process,
            no hard time limit; for debugging only).
        require_value: answers must be answers.  A tautology (``0=0``, ``x=x``) is
            always rejected, and so is a list of candidates when the reference is a
            single value.  ``"auto"`` (default): when the reference is a plain number,
            an unevaluated arithmetic expression of number literals (``17+25``,
            ``237 \\cdot 82``, ``2^{10}``, ``\\frac{84}{2}`` for an integer) is wrong, while
            radicals, constants and functions (``\\sqrt[3]{8}``, ``2\\pi``) are still
            compared by value, as MATH-style answers need.  ``True``: when the
            reference is a plain number the answer must be a plain number too
            (integer, decimal, fraction, percent, scientific notation).  ``False``:
            only the tautology and list checks.  Whatever the setting, answers whose
            reference is an expression (``x^2+1``, ``2\\sqrt{2}``) are compared
            symbolically.

    Reasons start with ``match``, ``mismatch``, ``no answer found``, ``hedged``,
    ``answer retracted``, ``timeout``, ``bad input`` or ``verifier error``.
    """
    _check_options(strictness, tolerance, timeout, require_value)
    compare = _symbolic_comparer(float(tolerance), float(timeout), isolate)

    def math_verify_fn(completion: Any, reference: Any) -> Verdict:
        try:
            return _score(completion, reference, compare, strictness, max_chars, require_value)
        except Exception as e:  # noqa: BLE001 - a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {_short(e, 200)}")

    math_verify_fn.strictness = strictness  # type: ignore[attr-defined]
    math_verify_fn.timeout = timeout  # type: ignore[attr-defined]
    return math_verify_fn


def _check_options(strictness: str, tolerance: float, timeout: float, require_value: bool | str) -> None:
    """:func:`math_verifier`'s options, each refused with its valid range."""
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}; choose one of {', '.join(STRICTNESS)}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise ValueError(f"timeout must be seconds in (0, 3600], got {timeout!r}")
    if require_value not in REQUIRE_VALUE or isinstance(require_value, int) and not isinstance(require_value, bool):
        raise ValueError(f"require_value must be True, False or 'auto', got {require_value!r}")


def _symbolic_comparer(tolerance: float, timeout: float, isolate: bool) -> Callable[[str, str], tuple[bool, str]]:
    """``compare(gold, answer) -> (equal, reason)``: the quick comparison, then the symbolic one (in the sandbox's
    worker with a hard ``timeout`` unless ``isolate`` is False)."""
    # Symbolic results per (gold, answer) pair: many samples of one problem share an answer,
    # and re-scoring stored samples repeats pairs.  Timeouts and errors are never cached.
    symbolic_cache: dict[tuple[str, str], tuple[bool, str]] = {}

    def compare(g: str, p: str) -> tuple[bool, str]:
        g, p = _decimal_commas(g, p)
        quick = quick_compare(g, p, tolerance)
        if quick is not None:
            return quick
        hit = symbolic_cache.get((g, p))
        if hit is not None:
            return hit
        if not isolate:
            return symbolic_compare(g, p, tolerance)
        status, value = get_sandbox().call(symbolic_compare, (g, p, tolerance), timeout)
        if status == "timeout":
            return False, f"timeout: symbolic check over {timeout:g}s"
        if status == "error":
            return False, f"verifier error: {_short(value, 200)}"
        if len(symbolic_cache) < 100_000:
            symbolic_cache[(g, p)] = value
        return value

    return compare


def _score(completion: Any, reference: Any, compare: Callable[[str, str], tuple[bool, str]], strictness: str,
           max_chars: int, require_value: bool | str) -> Verdict:
    """One completion's verdict against ``reference`` (see :func:`math_verifier`)."""
    gold = _reference_answer(reference)
    if gold is None:
        return Verdict(0.0, None, f"bad input: empty or non-string reference ({type(reference).__name__})")
    if not isinstance(completion, str):
        return Verdict(0.0, None, f"bad input: completion is {type(completion).__name__}, not str")
    if len(completion) > max_chars:
        return Verdict(0.0, None, f"bad input: completion too long ({len(completion)} > {max_chars} chars)")
    text = unescape_commands(completion)
    ex = extract_answer(text, strictness)
    if ex.answer is None:
        return Verdict(0.0, None, ex.problem or "no answer found")
    answer = ex.answer
    if ex.problem:
        return Verdict(0.0, answer, ex.problem)
    retracted = find_retraction(text, ex.end)
    if retracted:
        return Verdict(0.0, answer, retracted)
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict(0.0, _short(answer), f"bad input: answer too long ({len(answer)} chars)")
    g = clean(gold)
    gold_is_list = _list_like(gold)
    if not gold_is_list:
        hedge = find_hedge(answer)
        if hedge:
            return Verdict(0.0, answer, hedge)
    if len(ex.boxes) > 1 and gold_is_list:  # "\\boxed{2} and \\boxed{3}" for the list "2, 3"
        joined = ", ".join(ex.boxes[-8:])
        ok, why = compare(g, clean(joined))
        if ok:
            return Verdict(1.0, joined, why + ", boxes together")
    g, p = _decimal_commas(g, clean(answer))
    problem = not_an_answer(g, p, require_value, gold_is_list)
    if problem:
        return Verdict(0.0, answer, problem)
    ok, why = compare(g, p)
    if not ok and not why.startswith(("timeout", "verifier error")) and "=" not in g and "\\approx" not in g:
        sides = split_relation(p)  # "x = 5+5+1 = 1/3": the value it ends with
        if len(sides) > 1 and sides[-1]:
            last_ok, last_why = compare(g, sides[-1])
            if last_ok:
                ok, why = last_ok, last_why
    for other in ex.others[:4]:  # several boxed answers: all must be right, else it is a hedge
        if ok and not compare(g, clean(other))[0]:
            return Verdict(0.0, answer, f"hedged: different boxed answers ({_short(other, 30)!r}, {_short(answer, 30)!r})")
    if ok:
        return Verdict(1.0, answer, why)
    if why.startswith(("timeout", "verifier error")):
        return Verdict(0.0, answer, why)
    return Verdict(0.0, answer, f"{why}: {_short(answer)} != {_short(gold)}")
