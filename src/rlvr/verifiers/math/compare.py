"""Step 3 of the math verifier: decide whether two cleaned answers are equal.

:func:`quick_compare` settles the common cases in microseconds without sympy:
identical strings, multiple-choice letters, word answers, and plain numbers
(exact rationals, ``50%`` = ``0.5`` = ``50``).  It returns None when it cannot
tell, and :func:`symbolic_compare` takes over: both sides go through
math-verify's LaTeX parser (latex2sympy2_extended) and ``math_verify.verify``
(sets, intervals vs inequalities, equations, tuples, matrices, complex numbers,
symbolic simplification), with a numeric fallback.  ``symbolic_compare`` can run
arbitrarily long inside sympy, so the verifier calls it in a killable worker
process (:mod:`.sandbox`).

**When numbers are equal** (:func:`numbers_equal`, and the numeric checks of
:func:`symbolic_compare`).  A decimal is a rounded value; everything else (integer,
fraction, radical, ``\\pi``, repeating decimal) is exact:

* equal values are equal (``0.75`` = ``\\frac{3}{4}``, ``3.0`` = ``3``,
  ``0.\\overline{3}`` = ``\\frac{1}{3}``, ``1.25`` = ``\\frac{5}{4}``);
* a decimal and an exact value match only when the decimal is the exact value
  *correctly rounded* at its last written digit and is written to at least
  ``ceil(-log10(tolerance))`` significant digits (6 at the default 1e-6), whichever of
  the two is the reference: ``1.41421`` and ``1.41421356`` are ``\\sqrt{2}``, ``1.4142``
  is not; ``0.333333`` is ``\\frac{1}{3}``, ``0.333`` is not (nor, as a reference, is
  ``0.333`` matched by ``\\frac{1}{3}``: MATH-500 writes a decimal where the problem
  asks for a rounded one); ``2.9999999`` and ``3.0000001`` are not ``3`` (a value a hair
  away from an exact answer is a different value, and ``3`` rounds to ``3.0000000``);
* two decimals match within ``tolerance`` (relative): both are rounded values;
* two exact expressions are equal only when sympy proves it, or when their values
  agree to 30 significant digits and 30 decimal places, evaluated with as many
  digits as their magnitude needs (evidence of an identity sympy could not
  simplify, such as nested radicals; ``10^{1000}+1`` is not ``10^{1000}``), never by
  tolerance;
* a value that is not a finite number (``\\infty``, ``-\\infty``, ``e^{\\infty}``,
  ``\\frac{0}{0}``, ``\\infty-\\infty``, ``\\tan(\\pi/2)``, NaN) is never equal to a
  number, and magnitudes are compared without overflow or underflow
  (``10^{1000}`` and ``10^{-1000}`` are not infinity and zero).  Infinities still
  compare where the reference has them: intervals (``(-\\infty, 3]``), sets and
  limits go through math-verify's structural comparison.
"""

from __future__ import annotations

import logging
import re
from fractions import Fraction
from functools import lru_cache

from rlvr.verifiers.math.normalize import (Number, as_text, base_numeral, choice_letter, half_unit, is_approximate,
                                          significant_digits, squash, to_number)

__all__ = ["quick_compare", "symbolic_compare", "numbers_equal"]

IDENTITY_DIGITS = 30
"""Significant digits to which two exact values must agree in the numeric fallback."""
FLOAT_LITERAL_REL = 1e-12
"""Relative agreement an answer with decimal literals inside an expression needs
against an exact reference (the literals themselves carry ~15 digits)."""
MV_FLOAT_ROUNDING = 12
"""Decimal places math-verify rounds floats to before comparing them (its default, 6,
makes ``2.9999999`` equal to ``3``)."""

_CHOICE_LABEL_RE = re.compile(r"\(\s*([A-J])\s*\)|(?<![A-Za-z\\])([A-J])(?![A-Za-z])")
_CHOICE_GOLD_RE = re.compile(r"\(?[A-J]\)?|\\text(?:bf)?\{\(?[A-J]\)?\}")
# Fast paths for a plain-number reference (the symbolic path gives the same verdicts, slower):
_INFINITY_RE = re.compile(r"\\infty")
_BOUNDED_OP_RE = re.compile(r"\\(?:sum|int|iint|oint|lim|prod)")
_NAMED_SET_RE = re.compile(r"\\(?:mathbb|Bbb)\s*\{?\s*[RCZNQ]\b|\\emptyset|^\s*\\\{\s*\\\}\s*$")
_MAGNITUDE_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)\s*(?:\\times|\\cdot)\s*)?10\s*\^\s*\{\s*[-+]?(\d+)\s*\}"
                           r"|([-+]?(?:\d+\.?\d*|\.\d+))\s*[eE]\s*[-+]?(\d+)|-\s*10\s*\^\s*\{\s*[-+]?(\d+)\s*\}")
_PLAIN_MAGNITUDE_DIGITS = 400  # a plain-number reference (<= 200 characters) lies within 10^(+-200)


Decimal = tuple[Fraction, bool]
"""How a decimal is written: half a unit in its last digit, and whether it has enough
significant digits for the tolerance."""


def min_significant_digits(tolerance: float) -> int | None:
    """``ceil(-log10(tolerance))``: 6 for 1e-6 (None for 0: no decimal is fine enough)."""
    if tolerance <= 0:
        return None
    from decimal import Decimal as D

    t, d = D(repr(tolerance)), 0
    while D(10) ** -d > t:
        d += 1
    return d


def decimal_precision(text: str, tolerance: float) -> Decimal | None:
    """The precision of a cleaned plain decimal (None for an exact number)."""
    half = half_unit(text)
    if half is None:
        return None
    need = min_significant_digits(tolerance)
    return half, need is not None and significant_digits(text) >= need


_FRACTION_TEXT_RE = re.compile(r"\\frac|/")


def _values(n: Number, dec: Decimal | None, points: bool = True) -> list[tuple[Fraction, Decimal | None]]:
    """A number's candidate values with their precision: ``50%`` is 0.5, and 50 (the
    percent-point reading, for "what percent" answers) unless ``points`` is False."""
    value, pct = n
    if not pct:
        return [(value, dec)]
    fraction = (value / 100, None if dec is None else (dec[0] / 100, dec[1]))
    return [(value, dec), fraction] if points else [fraction]


def numbers_equal(gold: Fraction, pred: Fraction, tolerance: float, gold_decimal: Decimal | None = None,
                  pred_decimal: Decimal | None = None) -> bool:
    """Whether ``pred`` answers ``gold`` (see the module docstring).

    ``gold_decimal`` / ``pred_decimal``: the :func:`decimal_precision` of a side written
    as a decimal, None for an exact one.
    """
    if gold == pred:
        return True
    if gold_decimal is not None and pred_decimal is not None:  # two rounded values
        return abs(gold - pred) <= Fraction(tolerance) * max(abs(gold), abs(pred))
    dec = pred_decimal if pred_decimal is not None else gold_decimal
    if dec is None:  # two exact values
        return False
    half, fine = dec  # the decimal must be the exact value correctly rounded, finely enough
    return fine and abs(gold - pred) <= half


def _base_compare(gold: str, pred: str) -> tuple[bool, str] | None:
    """Numerals in another base (``52_8``).  For such a reference the answer must show the
    same digits (the subscript may be left out: the question names the base); a numeral
    with a base subscript answering a decimal reference is read as its value (``44_9``
    is 40, ``40_9`` is not)."""
    g = base_numeral(gold)
    p = base_numeral(pred)
    if g is not None:
        if p is None:
            digits = pred.strip().upper().lstrip("0") or "0"
            if not re.fullmatch(r"[0-9A-Z]{1,41}", pred.strip()):
                return None
            p = (digits, g[1])
        ok = p == g
        return ok, "match (base numeral)" if ok else f"mismatch: base-{g[1]} numeral {g[0]} expected"
    if p is not None:
        n = to_number(gold)
        if n is None or n[1]:
            return None
        ok = n[0] == int(p[0], p[1])
        return ok, "match (base numeral)" if ok else "mismatch (base numeral)"
    return None


def quick_compare(gold: str, pred: str, tolerance: float) -> tuple[bool, str] | None:
    """``(equal, reason)`` when cheap rules decide, else None (use :func:`symbolic_compare`)."""
    if squash(gold) == squash(pred):
        return True, "match (identical)"
    if _CHOICE_GOLD_RE.fullmatch(squash(gold)):
        letter = choice_letter(pred)
        if letter is None:
            return False, "mismatch: expected a choice letter"
        if len({m.group(1) or m.group(2) for m in _CHOICE_LABEL_RE.finditer(pred)}) > 1:  # "(C)(E)", "(C) or (E)"
            return False, f"hedged: several choices ({pred[:40]!r})"
        return letter == choice_letter(gold), "match (choice)" if letter == choice_letter(gold) else "mismatch (choice)"
    based = _base_compare(gold, pred)
    if based is not None:
        return based
    gold_text = as_text(gold)
    if gold_text is not None:
        pred_text = as_text(pred)
        key = lambda t: re.sub(r"[^a-z0-9]", "", t)  # noqa: E731
        if pred_text is not None and key(pred_text) == key(gold_text):
            return True, "match (text)"
        return False, "mismatch (text)"
    g, p = to_number(gold), to_number(pred)
    if g is not None and p is not None:
        # A fraction is a ratio, never a count of percent: 0.25% is 0.0025, not 1/4.
        g_points, p_points = not _FRACTION_TEXT_RE.search(pred), not _FRACTION_TEXT_RE.search(gold)
        ok = any(numbers_equal(a, b, tolerance, da, db)
                 for a, da in _values(g, decimal_precision(gold, tolerance), g_points)
                 for b, db in _values(p, decimal_precision(pred, tolerance), p_points))
        return ok, "match (numeric)" if ok else "mismatch (numeric)"
    if g is not None and as_text(pred) is not None:
        return False, "mismatch: words for a number"
    if g is not None:
        if _INFINITY_RE.search(pred) and not _BOUNDED_OP_RE.search(pred):
            return False, "mismatch: infinity for a number"
        if _NAMED_SET_RE.search(pred):
            return False, "mismatch: a set for a number"
        m = _MAGNITUDE_RE.fullmatch(pred.strip())
        if m:
            mantissa, digits = m.group(1) or m.group(3), m.group(2) or m.group(4) or m.group(5)
            nonzero = mantissa is None or any(c in "123456789" for c in mantissa)
            if nonzero and int(digits) > _PLAIN_MAGNITUDE_DIGITS:
                return False, "mismatch: magnitude out of range for the reference"
    return None


_INTEGER_RE = re.compile(r"-?\d{1,50}")


@lru_cache(maxsize=8192)
def _parse(answer: str) -> list:
    """math-verify's LaTeX parse of ``\\boxed{answer}`` (a plain integer without the parser:
    the same ``[Integer, text]`` in microseconds)."""
    if _INTEGER_RE.fullmatch(answer):
        from sympy import Integer

        return [Integer(int(answer)), answer]
    from math_verify import LatexExtractionConfig, parse

    # LaTeX extraction only: math-verify's expression fallback reads a number out of
    # LaTeX it cannot parse (``\\{x \\mid x > 0\\}`` became 0).
    return parse("\\boxed{" + answer + "}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)


def _finite_value(expr, digits: int = 2 * IDENTITY_DIGITS):
    """``expr`` evaluated to ``digits`` significant digits as ``(re, im)`` sympy Floats
    (any exponent: no overflow or underflow), or None when it is not a finite number
    (free symbols, sets, infinities, NaN, ``zoo``, values evalf cannot reach)."""
    from sympy import Basic, S

    nonfinite = (S.Infinity, S.NegativeInfinity, S.ComplexInfinity, S.NaN)
    if not isinstance(expr, Basic) or not expr.is_number or expr.free_symbols or expr.has(*nonfinite):
        return None
    value = expr.evalf(digits)
    if value.has(*nonfinite):
        return None
    re_, im_ = value.as_real_imag()
    if not (re_.is_Number and im_.is_Number) or re_.has(*nonfinite) or im_.has(*nonfinite):
        return None
    return re_, im_


def _float(x: Fraction):
    from sympy import Float

    return Float(x.numerator, 2 * IDENTITY_DIGITS) / x.denominator


def _decimal_for_exact(exact, decimal_text: str, tolerance: float) -> bool | None:
    """A plain decimal (``1.41421356``, ``33.33333%``) against an exact value (either may
    be the reference): True when the decimal is the value correctly rounded and has
    enough significant digits (module docstring).  None when the rule does not apply
    (the text is no plain decimal, the value no finite number).  Read from the text, so
    digits beyond a float's precision count."""
    from sympy import sqrt

    n, dec = to_number(decimal_text), decimal_precision(decimal_text, tolerance)
    if n is None or dec is None:
        return None
    a = _finite_value(exact)
    if a is None:
        return None
    for value, (half, fine) in _values(n, dec):
        diff = sqrt((a[0] - _float(value)) ** 2 + a[1] ** 2)
        if diff == 0 or (fine and diff <= _float(half)):
            return True
    return False


MAX_FALLBACK_DIGITS = 5000
"""Largest magnitude (in decimal digits) the numeric fallback evaluates exactly enough."""


def _numeric_fallback(gold, pred, tolerance: float, gold_text: str = "") -> bool:
    """Equal values that sympy could not prove equal, under the rules of the module docstring.

    Two exact values must agree to ``IDENTITY_DIGITS`` significant digits *and* decimal
    places, evaluated with as many digits as their magnitude needs (``10^{1000}+1`` is
    not ``10^{1000}``)."""
    import mpmath
    from sympy import Float, sqrt

    rough_a, rough_b = _finite_value(gold, 15), _finite_value(pred, 15)
    if rough_a is None or rough_b is None:
        return False
    size = Float(max(abs(rough_a[0]), abs(rough_a[1]), abs(rough_b[0]), abs(rough_b[1])))
    extra = int(mpmath.log10(size._to_mpmath(53))) + 1 if size > 1 else 0
    if extra > MAX_FALLBACK_DIGITS:
        return False
    digits = 2 * IDENTITY_DIGITS + extra
    a, b = _finite_value(gold, digits), _finite_value(pred, digits)
    if a is None or b is None:
        return False
    diff = sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2)
    size_a, size_b = sqrt(a[0] ** 2 + a[1] ** 2), sqrt(b[0] ** 2 + b[1] ** 2)
    if diff == 0:
        return True
    if is_approximate(gold_text):
        return bool(diff <= Float(tolerance) * max(size_a, size_b))
    if pred.has(Float):
        return bool(diff <= Float(FLOAT_LITERAL_REL) * max(size_a, size_b))
    eps = Float(10, digits) ** -IDENTITY_DIGITS
    return bool(diff <= eps * max(size_a, size_b) and diff <= eps)


def _settle_nonfinite(expr):
    """``expr`` with every number-valued part that involves infinity evaluated, or None.

    latex2sympy leaves ``\\infty^\\infty``, ``\\infty - \\infty``, ``0 \\cdot \\infty`` unevaluated,
    and sympy's ``simplify`` on such forms is unreliable (``simplify(14/3 - oo**oo)`` is 0
    under some hash seeds, so ``\\infty^\\infty`` "equalled" a random tenth of all
    references).  Every scalar part (the whole answer, a tuple or set element, an
    interval endpoint, a side of a relation) that contains ``oo``, ``zoo`` or ``nan`` must
    evaluate to ``oo`` or ``-oo`` and is replaced by it; anything else (NaN, complex
    infinity, a finite value of an indeterminate form such as ``\\infty^0``) is no value:
    None.  Sums, integrals, products and limits keep their bounds (``\\sum_{n=1}^\\infty``).
    """
    from sympy import Basic, Expr, Integral, Limit, MatrixBase, Product, S, Sum

    nonfinite = {S.Infinity, S.NegativeInfinity, S.ComplexInfinity, S.NaN}
    infinities = (S.Infinity, S.NegativeInfinity)
    opaque = (Sum, Integral, Product, Limit)

    def bare(e) -> bool:  # oo, zoo or nan outside the bounds of a sum, integral, product or limit
        if not isinstance(e, Basic) or isinstance(e, opaque):
            return False
        return e in nonfinite or any(bare(a) for a in e.args)

    if not isinstance(expr, Basic) or not bare(expr):
        return expr
    mapping = {}

    def visit(e) -> bool:
        if not bare(e):
            return True
        if isinstance(e, Expr) and not isinstance(e, MatrixBase):  # a number-valued part
            if e in infinities:
                return True
            if e.free_symbols:  # x + \infty, \infty x: no value
                return False
            value = e.doit()
            if value not in infinities:
                return False
            mapping[e] = value
            return True
        return all(visit(a) for a in e.args)  # sets, tuples, intervals, relations, matrices

    if not visit(expr):
        return None
    return expr.xreplace(mapping) if mapping else expr


def symbolic_compare(gold: str, pred: str, tolerance: float = 1e-6) -> tuple[bool, str]:
    """``(equal, reason)`` from math-verify on two cleaned answers (may be slow: sandbox it)."""
    from math_verify import verify
    from sympy import Expr, S, UnevaluatedExpr

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gp, pp = _parse(gold), _parse(pred)
    if not gp:
        return False, "unparseable reference"
    if not pp:
        return False, "unparseable answer"
    gp, pp = [_settle_nonfinite(x) for x in gp], [_settle_nonfinite(x) for x in pp]
    if gp[0] is None:
        return False, "unparseable reference: undefined value"
    if pp[0] is None:
        return False, "mismatch: undefined or indeterminate value (infinity arithmetic, 0/0, NaN)"
    infinities = (S.Infinity, S.NegativeInfinity)
    if isinstance(gp[0], Expr) and isinstance(pp[0], Expr) and (gp[0] in infinities or pp[0] in infinities):
        return (True, "match (identical infinity)") if gp[0] == pp[0] else (False, "mismatch: infinity vs a value")
    decided = None
    if not is_approximate(gold):  # an exact reference, a plain decimal answer
        decided = _decimal_for_exact(gp[0], pred, tolerance)
    elif not is_approximate(pred) and isinstance(pp[0], Expr):  # a plain decimal reference, an exact answer
        decided = _decimal_for_exact(pp[0], gold, tolerance)
    if decided is not None:
        return (True, "match (decimal, symbolic)") if decided else (False, "mismatch (decimal, symbolic)")
    if _finite_value(gp[0], 15) is not None and _finite_value(pp[0], 15) is not None \
            and not (gp[0].has(UnevaluatedExpr) or pp[0].has(UnevaluatedExpr)):  # two numbers (no percent)
        # Decided by value alone: math-verify's simplify and its absolute ``chop`` (which makes
        # 10^{-50} equal to 2 \cdot 10^{-50}) are not needed to compare two numbers.
        if _numeric_fallback(gp[0], pp[0], tolerance, gold):
            return True, "match (numeric, symbolic)"
        return False, "mismatch (symbolic)"
    if verify(gp, pp, float_rounding=MV_FLOAT_ROUNDING, timeout_seconds=None, allow_set_relation_comp=True):
        return True, "match (symbolic)"
    try:
        if _numeric_fallback(gp[0], pp[0], tolerance, gold):
            return True, "match (numeric, symbolic)"
    except Exception:  # noqa: BLE001 - evalf of odd objects
        pass
    return False, "mismatch (symbolic)"
