"""Generated pairs for the ``math`` verifier: values that sympy proves equal match in any
of their LaTeX spellings, different values never do, and a decimal matches an exact
value only when it is that value correctly rounded to at least 6 significant digits."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal, getcontext
from fractions import Fraction

import pytest

pytest.importorskip("math_verify")
pytest.importorskip("hypothesis")

import sympy  # noqa: E402
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.verifiers import get_verifier  # noqa: E402

PROPERTY = settings(max_examples=80, derandomize=True, deadline=None, database=None)
SQUAREFREE = [2, 3, 5, 6, 7, 10, 11, 13, 14, 15]
getcontext().prec = 60


def _verify():
    return get_verifier("math")


def boxed(s: str) -> str:
    return f"So the final answer is $\\boxed{{{s}}}$."


# ----------------------------------------------------------------------------- values and spellings

def _frac(p: int, q: int, cmd: str = "\\frac") -> str:
    return f"-{cmd}{{{-p}}}{{{q}}}" if p < 0 else f"{cmd}{{{p}}}{{{q}}}"


def rational_spellings(p: int, q: int) -> list[str]:
    """Ways to write the reduced fraction p/q (q > 0)."""
    if q == 1:
        out = [str(p), f"{p}.0", f"\\frac{{{2 * p}}}{{2}}", f"{p}.00"]
        return out
    out = [_frac(p, q), _frac(p, q, "\\dfrac"), _frac(p, q, "\\tfrac"), f"{p}/{q}", _frac(3 * p, 3 * q),
           f"\\frac{{{p}}}{{{q}}}", f"\\left(\\frac{{{p}}}{{{q}}}\\right)"]
    d = q
    for prime in (2, 5):
        while d % prime == 0:
            d //= prime
    if d == 1:  # terminating decimal
        out.append(str(Decimal(p) / Decimal(q)))
    if p > q:
        whole, rest = divmod(p, q)
        if rest:
            out.append(f"{whole}\\frac{{{rest}}}{{{q}}}")
    return out


@st.composite
def rationals(draw):
    q = draw(st.integers(1, 12))
    p = draw(st.integers(-60, 60))
    f = Fraction(p, q)
    return sympy.Rational(f.numerator, f.denominator), rational_spellings(f.numerator, f.denominator)


@st.composite
def radicals(draw):
    a, b, c = draw(st.integers(1, 9)), draw(st.sampled_from(SQUAREFREE)), draw(st.integers(1, 7))
    g = math.gcd(a, c)
    a, c = a // g, c // g
    value = sympy.Rational(a, c) * sympy.sqrt(b)
    coeff = "" if a == 1 else str(a)
    if c == 1:
        out = [f"{coeff}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}", f"\\sqrt{{{b}}}\\cdot {a}" if a > 1 else f"{b}^{{1/2}}",
               f"\\frac{{{a * b}}}{{\\sqrt{{{b}}}}}"]
        if a == 1:
            out += [f"\\sqrt{b}" if b < 10 else f"\\sqrt{{{b}}}", f"\\sqrt[2]{{{b}}}"]
    else:
        out = [f"\\frac{{{coeff}\\sqrt{{{b}}}}}{{{c}}}", f"\\frac{{{a}}}{{{c}}}\\sqrt{{{b}}}", f"\\frac{{\\sqrt{{{a * a * b}}}}}{{{c}}}",
               f"\\frac{{{a * b}}}{{{c}\\sqrt{{{b}}}}}"]
    return value, out


@st.composite
def pi_multiples(draw):
    p, q = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    f = Fraction(p, q)
    p, q = f.numerator, f.denominator
    value = sympy.Rational(p, q) * sympy.pi
    if q == 1:
        out = [f"{p}\\pi" if p > 1 else "\\pi", f"\\pi \\cdot {p}" if p > 1 else "1\\pi", f"\\frac{{{2 * p}\\pi}}{{2}}"]
    else:
        num = "" if p == 1 else str(p)
        out = [f"\\frac{{{num}\\pi}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}\\pi", f"\\pi\\cdot\\frac{{{p}}}{{{q}}}",
               f"\\dfrac{{{num}\\pi}}{{{q}}}", f"\\frac{{{p}\\pi}}{{{q}}}"]
    return value, out


VALUES = st.one_of(rationals(), radicals(), pi_multiples())


def test_spellings_have_the_value_they_claim():
    """The generators' own oracle: each spelling parses (latex2sympy) to the value."""
    from latex2sympy2_extended import latex2sympy

    for value, spellings in ((sympy.Rational(7, 3), rational_spellings(7, 3)), (sympy.Rational(-5, 4), rational_spellings(-5, 4)),
                             (sympy.Rational(6), rational_spellings(6, 1))):
        for s in spellings:
            assert sympy.simplify(latex2sympy(s.replace("\\left", "").replace("\\right", "")) - value) == 0, s


@PROPERTY
@given(pair=VALUES.flatmap(lambda vs: st.tuples(st.just(vs[0]), st.sampled_from(vs[1]), st.sampled_from(vs[1]))))
def test_equal_values_match_in_any_spelling(pair):
    value, gold, answer = pair
    v = _verify()(boxed(answer), gold)
    assert v.correct, (value, gold, answer, v)


@PROPERTY
@given(a=VALUES, b=VALUES, pick=st.tuples(st.integers(0, 20), st.integers(0, 20)))
def test_different_values_never_match(a, b, pick):
    (va, sa), (vb, sb) = a, b
    assume(sympy.simplify(va - vb) != 0)
    gold, answer = sa[pick[0] % len(sa)], sb[pick[1] % len(sb)]
    v = _verify()(boxed(answer), gold)
    assert not v.correct, (va, vb, gold, answer, v)


# ----------------------------------------------------------------------------- decimals for exact golds

def _decimal(value, places: int) -> str:
    """``value`` correctly rounded (half-even) at ``places`` decimals."""
    d = Decimal(str(sympy.N(value, 50)))
    return str(d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN))


def _places_needed(value, digits: int = 6) -> int:
    """Decimal places that give ``digits`` significant digits for ``value``."""
    return max(0, digits - 1 - math.floor(math.log10(abs(float(value)))))


def _nonterminating(r) -> bool:
    q = sympy.Rational(r).q
    for prime in (2, 5):
        while q % prime == 0:
            q //= prime
    return q != 1


EXACT = st.one_of(rationals().filter(lambda v: v[0] != 0 and _nonterminating(v[0])), radicals(), pi_multiples())


@PROPERTY
@given(exact=EXACT, extra=st.integers(0, 8), shift=st.sampled_from([-1, 1]))
def test_a_decimal_matches_an_exact_value_when_correctly_rounded_to_6_digits(exact, extra, shift):
    value, spellings = exact
    places = _places_needed(value) + extra
    right = _decimal(value, places)
    near = str(Decimal(right) + shift * Decimal(1).scaleb(-places))  # one unit off in the last digit
    coarse = _decimal(value, _places_needed(value, 5))  # right digits, 5 significant: not enough
    verify = _verify()
    for gold in spellings[:2]:  # the exact value as the reference
        assert verify(boxed(right), gold).correct, (gold, right)
        assert not verify(boxed(near), gold).correct, (gold, near)
        assert not verify(boxed(coarse), gold).correct, (gold, coarse)
    answer = spellings[-1]  # and the decimal as the reference
    assert verify(boxed(answer), right).correct, (right, answer)
    assert not verify(boxed(answer), near).correct, (near, answer)
    assert not verify(boxed(answer), coarse).correct, (coarse, answer)


@PROPERTY
@given(n=st.integers(-1000, 1000), k=st.integers(1, 15), sign=st.sampled_from([-1, 1]))
def test_integer_gold_is_not_matched_by_a_float_a_hair_away(n, k, sign):
    near = Decimal(n) + sign * Decimal(1).scaleb(-k)
    v = _verify()(boxed(str(near)), str(n))
    assert not v.correct, (n, str(near), v)
    assert _verify()(boxed(f"{n}.{'0' * k}"), str(n)).correct


@PROPERTY
@given(cents=st.integers(1, 99_999), rel=st.sampled_from([1e-9, 4e-7, 3e-6, 1e-4]), sign=st.sampled_from([-1, 1]))
def test_decimal_gold_takes_values_within_the_tolerance(cents, rel, sign):
    gold = f"{Decimal(cents) / 100:.2f}"
    answer = str(Decimal(gold) * (1 + sign * Decimal(str(rel))))
    v = _verify()(boxed(answer), gold)
    assert v.correct == (rel < 1e-6), (gold, answer, v)


@pytest.mark.parametrize("answer, gold, ok", [
    ("2.9999999", "3", False), ("3.0000001", "3", False), ("3.0", "3", True), ("3.000000", "3", True),
    ("0.0000001", "0", False), ("0.333333", "\\frac{1}{3}", True), ("0.33333", "\\frac{1}{3}", False),
    ("0.333", "\\frac{1}{3}", False), ("0.75", "\\frac{3}{4}", True), ("0.\\overline{3}", "\\frac{1}{3}", True),
    ("\\frac{1}{3}", "0.333", False), ("\\frac{1}{3}", "0.333333", True), ("\\frac{5}{4}", "1.25", True),
    ("2.50000001", "2.5", True), ("3.2058", "3.21", False), ("\\sqrt{2}", "1.41421", True), ("\\sqrt{2}", "1.4142", False),
    ("1.41421356", "\\sqrt{2}", True), ("1.41421357", "\\sqrt{2}", False), ("1.4142", "\\sqrt{2}", False),
    ("3.1415927", "\\pi", True), ("3.1415926", "\\pi", False), ("3.14", "\\pi", False), ("3.14159", "\\pi", True),
    ("(2.9999999, 4)", "(3,4)", False), ("0.0833333333333333", "\\frac{1}{12}", True), ("50\\%", "0.5", True),
    ("33.3333\\%", "\\frac{1}{3}", True), ("33.3\\%", "\\frac{1}{3}", False),
])
def test_precision_rule(answer, gold, ok):
    v = _verify()(boxed(answer), gold)
    assert v.correct == ok, (answer, gold, v)
