"""Step 2 of the math verifier: clean an answer string and recognise its kind.

:func:`clean` removes presentation that carries no value (math delimiters,
``\\left``/``\\right``, spacing, ``\\dfrac``, degree signs, currency signs, words
naming the counted thing, a leading ``x =``), reads scale words and units as part of
the value (:mod:`.units`: ``5\\text{ million}`` is 5000000, ``25 cents`` is 0.25 dollars,
``12 \\text{ is not the answer}`` is no plain value) and rewrites what latex2sympy
misreads (``10{,}000``, ``1,000``, ``3e5``, ``0.\\overline{3}``, ``2 1/2``, unicode
such as ``2√3`` and ``½``).  :func:`clean_parts` also returns the unit, so that
two answers that both name one are compared after converting.  :func:`to_number` reads a cleaned answer as an exact number with
no sympy at all (the fast path); :func:`choice_letter` and :func:`as_text`
recognise multiple-choice and word answers.  Nothing here evaluates powers or
builds big integers, so adversarial inputs stay cheap.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

from rlvr.verifiers.math.units import exact_text, split_trailing, unicode_to_latex

__all__ = ["clean", "clean_parts", "to_number", "choice_letter", "as_text", "squash", "Number", "split_relation", "not_an_answer",
           "half_unit", "significant_digits", "is_approximate", "base_numeral"]

Number = tuple[Fraction, bool]
"""An exact value and whether it was written as a percentage."""

_MAX_EXP = 400  # larger decimal exponents go to the (sandboxed) symbolic path
MAX_NUMBER_CHARS = 2000
"""Longest plain number read exactly here (``6.9999999999999`` with 200 zeros after it is a
decimal of 214 significant digits, not 7: longer numbers once went to the symbolic path,
which rounds floats)."""

_DELIMS_RE = re.compile(r"\\displaystyle|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|(?<!\\)\\[,;:! ]|\\q?quad|~|\\\(|\\\)|\\\[|\\\]|\$")
_DFRAC_RE = re.compile(r"\\[dt]frac")
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\u00b0|\\degree|\s*\bdegrees?\b", re.IGNORECASE)
_THOUSANDS_BRACE_RE = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_THOUSANDS_RE = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*(\[[^\]{}]{1,10}\])?\s*([0-9a-zA-Z])")
_TEXT_CMD = r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*"
_LEADING_VAR_RE = re.compile(r"^\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?=[^=]+$)")
_CURRENCY_RE = re.compile(r"^\s*(?:\\\$|\$|USD|Rs\.?|\u20ac|\u00a3)\s*", re.IGNORECASE)
_SCI_RE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+))\s*(?:[eE]\s*([-+]?\d{1,4})|(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d{1,4})\s*\}?)$")
_REPEAT_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}$")
_FRAC_RE = re.compile(r"^([-+]?)\s*(\d+\s*)?\\frac\s*(?:\{\s*([-+]?\d+(?:\.\d+)?)\s*\}|(\d))\s*(?:\{\s*(\d+(?:\.\d+)?)\s*\}|(\d))$")
_SLASH_RE = re.compile(r"^([-+]?)\s*(?:(\d+)\s+)?(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)$")
_DECIMAL_RE = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)$")
_CHOICE_RE = re.compile(r"^\(?\s*([A-J])\s*\)?\s*(?:[.:)]|$)")
_WRAP_TEXT_RE = re.compile(_TEXT_CMD + r"\{([^{}]*)\}")
_GROUP_SPACE_RE = re.compile(r"(?<=\d),\s*(?:\\[,;:! ]\s*)+(?=\d{3}(?!\d))")
_SPACE_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_RELATION_SPLIT_RE = re.compile(r"\\approx|\\equiv(?![a-zA-Z])|(?<![<>!=\\])=(?!=)")
_MODULUS_RE = re.compile(r"\s*(?:\\pmod\s*\{\s*\d+\s*\}|\\pmod\s*\d+|\(\s*\\(?:bmod|mod)\s*\{?\s*\d+\s*\}?\s*\)"
                         r"|\\(?:bmod|mod)\s*\{?\s*\d+\s*\}?)\s*$")
_LITERAL_OP_RE = re.compile(
    r"[\d}]\s*\)?\s*(?:[-+*/^\u00d7\u00f7]|\\times|\\cdot|\\div|\*\*)\s*\(?\s*\{?\s*(?:\d|\\[dt]?frac)"
    r"|[-+]\s*\(\s*[-+]\s*\d"  # -(-42)
    r"|\\binom\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}|\d\s*!")  # \binom{42}{1}, 5!
_ARITH_CMD_RE = re.compile(r"\\(?:[dt]?frac|times|cdot|div|left|right|sqrt|binom)(?![a-zA-Z])")
_BRACED_LITERAL_RE = re.compile(r"(?<![a-zA-Z}\]])\{\s*([-+*/^]|\d+(?:\.\d+)?)\s*\}")
_WRAPPED_NUMBER_RE = re.compile(r"(?:" + _TEXT_CMD + r"\{\s*)?\(\s*([-+]?\d+(?:\.\d+)?)\s*\)(?:\s*\})?")
_PHANTOM_RE = re.compile(r"\\[hv]?phantom\s*\{[^{}]*\}")
_DECIMAL_LITERAL_RE = re.compile(r"\d\.\d|(?<![\d.])\.\d")


def squash(s: str) -> str:
    """``s`` without whitespace, for cheap string equality."""
    return re.sub(r"\s+", "", s)


Unit = tuple  # (dimension, factor to the base unit, power), see rlvr.verifiers.math.units


def clean(s: str) -> str:
    """Presentation-free LaTeX for one answer (see the module docstring); a unit is dropped,
    except a money unit other than the dollar (``25 cents`` -> ``0.25``)."""
    value, unit, _ = clean_parts(s)
    if unit is not None and unit[0] == "money" and unit[1] != 1:
        return scale(value, unit[1]) or value + " \\text{cents}"
    return value


def scale(value: str, factor: Fraction) -> str | None:
    """A cleaned plain number times ``factor``, written exactly (``2.5`` x 10^6 -> ``2500000``), or None."""
    n = to_number(value)
    if n is None or n[1]:
        return None
    return exact_text(n[0] * factor)


@lru_cache(maxsize=16384)
def clean_parts(s: str) -> tuple[str, Unit | None, str | None]:
    """``(value, unit, words)``: :func:`clean` without dropping the unit, which is returned
    (None when there is none); ``words`` are trailing words that make the answer no plain
    value (``is not the answer``, ``or more``), left in ``value``, else None."""
    unit: Unit | None = None
    words: str | None = None
    s = unicode_to_latex(s)
    s = s.strip().replace("\u2212", "-").replace("\\%", "%").replace("\\$", " ")
    s = s.replace("\u221e", "\\infty ").replace("\\varnothing", "\\emptyset")  # one spelling each
    s = _PHANTOM_RE.sub("", s)  # renders as nothing
    s = _GROUP_SPACE_RE.sub(",", s)  # "11,\\! 111" -> "11,111"
    s = _DELIMS_RE.sub(" ", s)
    s = _DFRAC_RE.sub(r"\\frac", s)
    s = _SQRT_SHORT_RE.sub(lambda m: "\\sqrt" + (m.group(1) or "") + "{" + m.group(2) + "}", s)
    s = _THOUSANDS_BRACE_RE.sub("", s)
    s = s.strip().rstrip(".;").strip()
    s = _DEGREE_RE.sub("", s).strip()
    s = _CURRENCY_RE.sub("", s).strip()
    s = _MODULUS_RE.sub("", s).strip()  # "24 \\equiv 3 \\pmod{7}": the residue is the answer
    trailing = split_trailing(s)  # "5 \text{cm}^2", "5\text{ million}", "3 ways", "12 \text{ is not it}"
    if trailing.kind in ("noun", "unit", "scale", "percent"):
        s = trailing.value
        if trailing.kind == "percent":
            s += "%"
        elif trailing.kind == "scale":
            s = scale(clean(s), trailing.factor) or trailing.value + " \\times " + str(trailing.factor)
            unit = trailing.unit
        elif trailing.kind == "unit":
            unit = trailing.unit
    elif trailing.kind == "other":
        words = trailing.words
    if s.startswith("{") and s.endswith("}") and "}" not in s[1:-1] and "{" not in s[1:-1]:
        s = s[1:-1].strip()
    m = _WRAPPED_NUMBER_RE.fullmatch(s)  # "\\textbf{(073)}", "(073)": one number in a wrapper
    if m:
        s = m.group(1)
    rest = _LEADING_VAR_RE.sub("", s)
    if rest != s and to_number(rest) is not None:  # "x = 5" -> "5" (equations keep their form)
        s = rest.strip()
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    if _SPACE_THOUSANDS_RE.fullmatch(s):  # "1 000"
        s = s.replace(" ", "")
    m = _SCI_RE.match(s)
    if m and m.group(2) and abs(int(m.group(2))) > _MAX_EXP:  # "1e1000": LaTeX would read 1 * e * 1000
        s = f"{m.group(1)} \\times 10^{{{int(m.group(2))}}}"
    return s, unit, words


def _top_level(s: str, sep: str) -> list[str]:
    """``s`` split at ``sep`` characters outside brackets and braces."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c in sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def split_relation(s: str) -> list[str]:
    """The sides of an ``=`` / ``\\approx`` / ``\\equiv`` chain (``x = 2+3 = 5`` -> ``[x, 2+3, 5]``)."""
    if len(s) > 2000:
        return [s]
    return [p.strip() for p in _RELATION_SPLIT_RE.split(s)]


def _unevaluated(s: str) -> bool:
    """Arithmetic on number literals only: ``17+25``, ``237 \\cdot 82``, ``2^{10}``, ``(9+1)``,
    ``{17}+{25}``, ``-(-42)``, ``\\sqrt{42^2}``, ``\\binom{42}{1}``, ``5!``, ``\\tfrac{1}{1} \\cdot 42``
    (radicals of a literal alone, ``\\sqrt[3]{8}``, are values)."""
    s = _BRACED_LITERAL_RE.sub(r"\1", s)  # "{17}+{25}", "17{+}25"
    return bool(_LITERAL_OP_RE.search(s)) and not re.search(r"[a-zA-Z]", _ARITH_CMD_RE.sub(" ", s))


_NAME_RE = re.compile(r"(?:\\[a-zA-Z]+|[A-Za-z]{1,12})\s*(?:_\s*\{?[\w\\]+\}?)?'*\s*(?:\([^()]*\))?")
_COMMAND_RE = re.compile(r"\\[a-zA-Z]+")


def _is_expression_in_variables(s: str) -> bool:
    """True for ``5x - 7y + 4``, ``2x``, ``x^2 - 1``; False for a name (``x``, ``x_1``,
    ``f(2)``, ``\\theta``, ``AB``) or an expression without variables."""
    t = s.strip()
    if not t or _NAME_RE.fullmatch(t):
        return False
    return bool(re.search(r"[A-Za-z]", _COMMAND_RE.sub(" ", t)))


def not_an_answer(gold: str, pred: str, require_value: bool | str, gold_is_list: bool) -> str | None:
    """Why a cleaned ``pred`` is not an answer to a question whose answer is ``gold``, or None.

    * a tautology: an ``=`` chain whose sides are all the same (``0=0``, ``x = x``);
    * several candidates (``3, 4``, ``3; 4``) when the reference is one number;
    * for a plain-number reference, an equation in standard form, ``expression = 0`` with
      variables on the left that are not just a name (``5x - 7y + 11z + 4 = 0``, ``2x+3=0``):
      an equation, whose 0 is no value (``x = 0``, ``f(2) = 0``, ``AB = 0`` still answer 0);
    * with ``require_value`` (``True``/``"auto"``) and a plain-number reference: an
      unevaluated restatement (the ``= ...`` side it ends with is arithmetic on number
      literals, or a fraction of integers for an integer reference); with ``True``
      also anything else that is not a plain number (``\\sqrt[3]{8}``).
    """
    sides = split_relation(pred)
    if len(sides) > 1 and len({squash(x) for x in sides}) == 1 and squash(sides[0]):
        return f"not an answer: tautology ({pred[:40]!r})"
    g = to_number(gold)
    if g is None:
        return None
    if not gold_is_list and len([x for x in _top_level(pred, ",;") if x]) > 1:
        return f"not an answer: several candidates ({pred[:40]!r})"
    if len(sides) == 2 and "=" not in gold and to_number(sides[1]) is not None and to_number(sides[1])[0] == 0 \
            and _is_expression_in_variables(sides[0]):
        return f"not an answer: an equation in standard form ({pred[:40]!r}), not a value"
    if require_value is False:
        return None
    final = sides[-1] if len(sides) > 1 and "=" not in gold else pred
    final = re.sub(r"^\(\s*(.*?)\s*\)$", r"\1", final.strip())
    value = to_number(final)
    if value is not None:
        frac = _FRAC_RE.match(final) or _SLASH_RE.match(final)
        if require_value is True and frac and g[0].denominator == 1 and value[0].denominator == 1 and not re.fullmatch(r"[-+]?\d+\s*/\s*1", final) \
                and "\\frac{" + "1}" not in final:
            return f"not an answer: unevaluated fraction ({final[:40]!r})"
        return None
    if _unevaluated(final) or (require_value is True and final):
        return f"not an answer: unevaluated expression ({final[:40]!r}) for a number"
    return None


def _dec(text: str) -> Fraction:
    return Fraction(text) if text not in ("", "+", "-") else Fraction(0)


def to_number(s: str) -> Number | None:
    """The exact value of a cleaned answer that is a plain number, else None.

    Integers, decimals, ``a/b``, ``\\frac{a}{b}``, mixed numbers (``2\\frac{1}{2}``,
    ``2 1/2``), repeating decimals (``0.\\overline{3}``), scientific notation
    (``3e5``, ``3 \\times 10^{5}``) and a trailing ``%`` (flagged, value kept).
    """
    t = s.strip()
    pct = t.endswith("%")
    if pct:
        t = t[:-1].strip()
    if len(t) > MAX_NUMBER_CHARS or not t:
        return None
    try:
        if _DECIMAL_RE.match(t):
            return Fraction(t), pct
        m = _SCI_RE.match(t)
        if m:
            exp = int(m.group(2) or m.group(3))
            return (Fraction(m.group(1)) * Fraction(10) ** exp, pct) if abs(exp) <= _MAX_EXP else None
        m = _REPEAT_RE.match(t)
        if m:
            sign, whole, fixed, rep = m.groups()
            base = _dec(f"{whole or 0}.{fixed}" if fixed else whole or "0")
            value = base + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
            return (-value if sign == "-" else value), pct
        m = _FRAC_RE.match(t) or _SLASH_RE.match(t)
        if m:
            if m.re is _FRAC_RE:
                sign, whole, num, den = m.group(1), m.group(2), m.group(3) or m.group(4), m.group(5) or m.group(6)
            else:
                sign, whole, num, den = m.groups()
            if Fraction(den) == 0:
                return None
            value = Fraction(num) / Fraction(den)
            if whole and whole.strip():
                if value < 0:
                    return None
                value += int(whole)
            return (-value if sign == "-" else value), pct
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def half_unit(s: str) -> Fraction | None:
    """Half a unit in the last digit of a cleaned decimal number (``2.50`` -> 0.005,
    ``1.2e-4`` -> 0.000005, ``12.5%`` -> 0.05 of a percent), or None when ``s`` is no
    decimal: an integer, a fraction, a repeating decimal (``0.\\overline{3}``) are exact.

    This is how precisely a decimal answer states its value: a decimal written for an
    exact reference must be that reference correctly rounded at this digit.
    """
    t = s.strip().rstrip("%").strip()
    if "." not in t or len(t) > MAX_NUMBER_CHARS:
        return None
    if _DECIMAL_RE.match(t):
        return Fraction(1, 2 * 10 ** len(t.split(".")[1]))
    m = _SCI_RE.match(t)
    if m and "." in m.group(1):
        exp = int(m.group(2) or m.group(3))
        if abs(exp) > _MAX_EXP:
            return None
        return Fraction(1, 2 * 10 ** len(m.group(1).split(".")[1])) * Fraction(10) ** exp
    return None


_BASE_RE = re.compile(r"([0-9][0-9A-Za-z]{0,40})\s*_\s*\{?\s*(\d{1,2})\s*\}?")


def base_numeral(s: str) -> tuple[str, int] | None:
    """``(digits, base)`` of a numeral written with its base as a subscript (``52_8``,
    ``4210_{5}``, ``2A_{11}``), digits upper-case without leading zeros; None otherwise."""
    m = _BASE_RE.fullmatch(s.strip())
    if not m:
        return None
    digits, base = m.group(1).upper(), int(m.group(2))
    if not 2 <= base <= 36:
        return None
    try:
        int(digits, base)
    except ValueError:
        return None
    return digits.lstrip("0") or "0", base


def significant_digits(s: str) -> int:
    """Significant digits written in a cleaned decimal number (``0.0833`` -> 3, ``3.10`` -> 3,
    ``1.20e-4`` -> 3); 0 when ``s`` is no decimal."""
    t = s.strip().rstrip("%").strip()
    m = _SCI_RE.match(t)
    mantissa = m.group(1) if m else t
    if not _DECIMAL_RE.match(mantissa):
        return 0
    return len(mantissa.lstrip("+-").replace(".", "").lstrip("0"))


def is_approximate(s: str) -> bool:
    """True when a cleaned reference is written with a decimal literal (``1.25``, ``0.5\\pi``):
    a rounded value, matched within the verifier's tolerance.  Integers, fractions,
    radicals, constants and repeating decimals are exact references."""
    return bool(_DECIMAL_LITERAL_RE.search(s)) and "\\overline" not in s


def choice_letter(s: str) -> str | None:
    """The option letter of a multiple-choice answer (``B``, ``(B)``, ``\\text{(B)}``, ``B) 12``)."""
    t = _WRAP_TEXT_RE.sub(r"\1", s).strip()
    m = _CHOICE_RE.match(t)
    return m.group(1) if m else None


def as_text(s: str) -> str | None:
    """A word answer (``\\text{Monday}``, ``east``) in lower case, or None if ``s`` looks like math."""
    t = s
    for _ in range(3):
        t = _WRAP_TEXT_RE.sub(r"\1", t)
    t = t.strip().strip(".").strip()
    if "\\" in t or any(c.isdigit() for c in t) or not re.search(r"[a-zA-Z]{2}", t):
        return None
    if re.search(r"[=+*/^<>_{}()\[\]]", t):
        return None
    return re.sub(r"\s+", " ", t).lower()
