"""The ``math`` verifier: is the final answer of a completion equal to a reference?

Three layers, like HF Math-Verify, each a small module:

* :mod:`.extract` finds the answer (last ``\\boxed{}``, "final answer is",
  ``####``, "the answer is", last number) and rejects hedged or retracted ones;
* :mod:`.normalize` cleans it (units, ``\\text{}``, degrees, thousands separators,
  repeating decimals, mixed numbers, scientific notation, ``x = 3``...);
* :mod:`.compare` decides equality: cheap exact rules first, then math-verify /
  latex2sympy2_extended / sympy, run in a killable worker (:mod:`.sandbox`) so
  that no input can overrun the time limit.

``get_verifier("math", strictness=..., tolerance=..., timeout=...)`` builds one;
the callable never raises and never blocks longer than about ``timeout`` seconds
(plus worker start-up on the first symbolic check).
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.math.compare import quick_compare, symbolic_compare
from rlvr.verifiers.math.extract import STRICTNESS, Extraction, extract_answer, find_hedge, find_retraction
from rlvr.verifiers.math.normalize import clean
from rlvr.verifiers.math.sandbox import Sandbox

__all__ = ["math_verifier", "extract_answer", "Extraction", "STRICTNESS", "get_sandbox"]

MAX_ANSWER_CHARS = 2000
_SANDBOX: Sandbox | None = None
_TOP_COMMA_RE = re.compile(r",|\\text\s*\{\s*(?:or|and)\s*\}|\b(?:or|and)\b")


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
    if "\\boxed" in reference or "\\fbox" in reference:
        ex = extract_answer(reference, "strict")
        if ex.answer:
            return ex.answer
    return reference.strip()


def _list_like(s: str) -> bool:
    return bool(_TOP_COMMA_RE.search(s))


@register_verifier("math")
def math_verifier(strictness: str = "lenient", tolerance: float = 1e-6, timeout: float = 5.0,
                  max_chars: int = 200_000, isolate: bool = True) -> Verifier:
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

    Reasons start with ``match``, ``mismatch``, ``no answer found``, ``hedged``,
    ``answer retracted``, ``timeout``, ``bad input`` or ``verifier error``.
    """
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}; choose one of {', '.join(STRICTNESS)}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise ValueError(f"timeout must be seconds in (0, 3600], got {timeout!r}")

    # Symbolic results per (gold, answer) pair: many samples of one problem share an answer,
    # and re-scoring stored samples repeats pairs.  Timeouts and errors are never cached.
    symbolic_cache: dict[tuple[str, str], tuple[bool, str]] = {}

    def compare(g: str, p: str) -> tuple[bool, str]:
        quick = quick_compare(g, p, float(tolerance))
        if quick is not None:
            return quick
        hit = symbolic_cache.get((g, p))
        if hit is not None:
            return hit
        if not isolate:
            return symbolic_compare(g, p, float(tolerance))
        status, value = get_sandbox().call(symbolic_compare, (g, p, float(tolerance)), float(timeout))
        if status == "timeout":
            return False, f"timeout: symbolic check over {timeout:g}s"
        if status == "error":
            return False, f"verifier error: {_short(value, 200)}"
        if len(symbolic_cache) < 100_000:
            symbolic_cache[(g, p)] = value
        return value

    def check(completion: Any, reference: Any) -> Verdict:
        gold = _reference_answer(reference)
        if gold is None:
            return Verdict(0.0, None, f"bad input: empty or non-string reference ({type(reference).__name__})")
        if not isinstance(completion, str):
            return Verdict(0.0, None, f"bad input: completion is {type(completion).__name__}, not str")
        if len(completion) > max_chars:
            return Verdict(0.0, None, f"bad input: completion too long ({len(completion)} > {max_chars} chars)")
        ex = extract_answer(completion, strictness)
        if ex.answer is None:
            return Verdict(0.0, None, "no answer found")
        answer = ex.answer
        if ex.problem:
            return Verdict(0.0, answer, ex.problem)
        retracted = find_retraction(completion, ex.end)
        if retracted:
            return Verdict(0.0, answer, retracted)
        if len(answer) > MAX_ANSWER_CHARS:
            return Verdict(0.0, _short(answer), f"bad input: answer too long ({len(answer)} chars)")
        if not _list_like(gold):
            hedge = find_hedge(answer)
            if hedge:
                return Verdict(0.0, answer, hedge)
        g = clean(gold)
        ok, why = compare(g, clean(answer))
        for other in ex.others[:4]:  # several boxed answers: all must be right, else it is a hedge
            if ok and not compare(g, clean(other))[0]:
                return Verdict(0.0, answer, f"hedged: different boxed answers ({_short(other, 30)!r}, {_short(answer, 30)!r})")
        if ok:
            return Verdict(1.0, answer, why)
        if why.startswith(("timeout", "verifier error")):
            return Verdict(0.0, answer, why)
        return Verdict(0.0, answer, f"{why}: {_short(answer)} != {_short(gold)}")

    def math_verify_fn(completion: Any, reference: Any) -> Verdict:
        try:
            return check(completion, reference)
        except Exception as e:  # noqa: BLE001 - a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {_short(e, 200)}")

    math_verify_fn.strictness = strictness  # type: ignore[attr-defined]
    math_verify_fn.timeout = timeout  # type: ignore[attr-defined]
    return math_verify_fn
