"""Step 3 of the math verifier: decide whether two cleaned answers are equal.

:func:`quick_compare` settles the common cases in microseconds without sympy:
identical strings, multiple-choice letters, word answers, and plain numbers
(exact rationals, a relative tolerance, ``50%`` = ``0.5`` = ``50``).  It
returns None when it cannot tell, and :func:`symbolic_compare` takes over:
both sides go through math-verify's LaTeX parser (latex2sympy2_extended) and
``math_verify.verify`` (sets, intervals vs inequalities, equations, tuples,
matrices, complex numbers, symbolic simplification), with a numeric tolerance
fallback.  ``symbolic_compare`` can run arbitrarily long inside sympy, so the
verifier calls it in a killable worker process (:mod:`.sandbox`).
"""

from __future__ import annotations

import cmath
import logging
import re
from fractions import Fraction
from functools import lru_cache

from rlvr.verifiers.math.normalize import Number, as_text, choice_letter, squash, to_number

__all__ = ["quick_compare", "symbolic_compare", "numbers_close"]

_CHOICE_GOLD_RE = re.compile(r"\(?[A-J]\)?|\\text(?:bf)?\{\(?[A-J]\)?\}")


def _values(n: Number) -> list[Fraction]:
    value, pct = n
    return [value, value / 100] if pct else [value]


def numbers_close(a: Fraction, b: Fraction, tolerance: float) -> bool:
    """``a == b`` exactly, or within ``tolerance`` relative to the larger magnitude."""
    return a == b or abs(a - b) <= Fraction(tolerance) * max(abs(a), abs(b))


def quick_compare(gold: str, pred: str, tolerance: float) -> tuple[bool, str] | None:
    """``(equal, reason)`` when cheap rules decide, else None (use :func:`symbolic_compare`)."""
    if squash(gold) == squash(pred):
        return True, "match (identical)"
    if _CHOICE_GOLD_RE.fullmatch(squash(gold)):
        letter = choice_letter(pred)
        if letter is None:
            return False, "mismatch: expected a choice letter"
        return letter == choice_letter(gold), "match (choice)" if letter == choice_letter(gold) else "mismatch (choice)"
    gold_text = as_text(gold)
    if gold_text is not None:
        pred_text = as_text(pred)
        key = lambda t: re.sub(r"[^a-z0-9]", "", t)  # noqa: E731
        if pred_text is not None and key(pred_text) == key(gold_text):
            return True, "match (text)"
        return False, "mismatch (text)"
    g, p = to_number(gold), to_number(pred)
    if g is not None and p is not None:
        rounded = "." in gold or "." in pred  # a decimal on either side: also equal to 6 places, as math-verify
        ok = any(numbers_close(a, b, tolerance) or (rounded and round(a, 6) == round(b, 6))
                 for a in _values(g) for b in _values(p))
        return ok, "match (numeric)" if ok else "mismatch (numeric)"
    if g is not None and as_text(pred) is not None:
        return False, "mismatch: words for a number"
    return None


@lru_cache(maxsize=256)
def _parse(answer: str) -> list:
    from math_verify import parse

    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


def _numeric_fallback(gold, pred, tolerance: float) -> bool:
    from sympy import Basic

    if not (isinstance(gold, Basic) and isinstance(pred, Basic)):
        return False
    if not (gold.is_number and pred.is_number) or gold.free_symbols or pred.free_symbols:
        return False
    a, b = complex(gold.evalf(30)), complex(pred.evalf(30))
    if not (cmath.isfinite(a) and cmath.isfinite(b)):  # |inf - x| <= tol * inf holds for every x: \infty matched all
        return a == b
    return abs(a - b) <= tolerance * max(abs(a), abs(b)) or a == b


def symbolic_compare(gold: str, pred: str, tolerance: float = 1e-6) -> tuple[bool, str]:
    """``(equal, reason)`` from math-verify on two cleaned answers (may be slow: sandbox it)."""
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gp, pp = _parse(gold), _parse(pred)
    if not gp:
        return False, "unparseable reference"
    if not pp:
        return False, "unparseable answer"
    if verify(gp, pp, timeout_seconds=None, allow_set_relation_comp=True):
        return True, "match (symbolic)"
    try:
        if _numeric_fallback(gp[0], pp[0], tolerance):
            return True, "match (numeric, symbolic)"
    except Exception:  # noqa: BLE001 - evalf of odd objects
        pass
    return False, "mismatch (symbolic)"
