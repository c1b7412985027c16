"""Scale words, units and unicode in an answer: what they mean, never dropped silently.

* :func:`unicode_to_latex` spells unicode mathematics as LaTeX (``2√3`` -> ``2\\sqrt{3}``,
  ``x²`` -> ``x^{2}``, ``½`` -> ``\\frac{1}{2}``, ``π`` -> ``\\pi``, an en-dash or a
  full-width minus used as a sign -> ``-``), for the response and the reference alike.
* :func:`split_trailing` reads what follows a value (``5\\text{ million}``, ``25 cents``,
  ``3 \\text{cm}^2``, ``12 \\text{ is not the answer}``) as one of

  - a **scale word** (``hundred``, ``thousand``, ``million``, ``billion``, ``trillion``,
    ``dozen``, ``percent``): part of the value, ``5\\text{ million}`` is 5000000;
  - a **unit** (lengths, areas, volumes, masses, times, money): the value is the number
    in that unit (``25 cents`` is 0.25 dollars, ``5 cm`` is 0.05 m); a unit is dropped
    only when the other side names none (``5\\text{ cm}`` for the reference ``5``: the
    question named the unit), and two sides that both name one are compared after
    converting (``500 cm`` = ``5 m``; ``5 cm`` is not ``5 m``, ``25 cents`` not ``25``
    dollars);
  - **words** that only name the counted thing (``5 apples``, ``3 \\text{ ways}``): dropped;
  - anything else (a negation, a hedge, a comparison, a sentence:
    ``12 \\text{ is not the answer}``, ``5 \\text{ or more}``): kept, so the answer is no
    plain value and does not match a number.

Every regular expression here is linear-time.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["unicode_to_latex", "split_trailing", "Trailing", "SCALE_WORDS", "UNITS", "convert", "exact_text"]

# ----------------------------------------------------------------------------- unicode

_SUPERSCRIPTS = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b\u207f",
                              "0123456789+-n")
_SUBSCRIPTS = str.maketrans("\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089", "0123456789")
_SUPER_RUN_RE = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u2079\u207a\u207b\u207f]+")
_SUB_RUN_RE = re.compile("[\u2080-\u2089]+")
_VULGAR = {"\u00bd": (1, 2), "\u2153": (1, 3), "\u2154": (2, 3), "\u00bc": (1, 4), "\u00be": (3, 4), "\u2155": (1, 5),
           "\u2156": (2, 5), "\u2157": (3, 5), "\u2158": (4, 5), "\u2159": (1, 6), "\u215a": (5, 6), "\u2150": (1, 7),
           "\u215b": (1, 8), "\u215c": (3, 8), "\u215d": (5, 8), "\u215e": (7, 8), "\u2151": (1, 9), "\u2152": (1, 10)}
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
_ROOT_RE = re.compile(r"([\u221a\u221b\u221c])\s*(?:\(([^()]{0,200})\)|\{([^{}]{0,200})\}|(\d+(?:\.\d+)?|[A-Za-z]|\\pi))")
_SIGN_DASH_RE = re.compile(r"(?<![\w)\]}.])[\u2012\u2013\u2014\ufe63\uff0d](?=\s*[\d.\\(])")
_SYMBOLS = {"\u2212": "-", "\u03c0": "\\pi ", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u22c5": "\\cdot ",
            "\u00b7": "\\cdot ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne ", "\u00b1": "\\pm ",
            "\u2213": "\\mp ", "\u221e": "\\infty ", "\u2248": "\\approx ", "\u2032": "'", "\u2009": " ", "\u00a0": " ",
            "\u202f": " "}
_SYMBOLS_RE = re.compile("[" + "".join(_SYMBOLS) + "]")
_ANY_UNICODE_MATH_RE = re.compile("[\u00a0-\uffff]")


def unicode_to_latex(s: str) -> str:
    """``s`` with unicode mathematics spelled as LaTeX (see the module docstring); ASCII is returned as is."""
    if not isinstance(s, str) or not _ANY_UNICODE_MATH_RE.search(s):
        return s
    s = _SIGN_DASH_RE.sub("-", s)
    s = _SYMBOLS_RE.sub(lambda m: _SYMBOLS[m.group()], s)
    s = _VULGAR_RE.sub(lambda m: "\\frac{%d}{%d}" % _VULGAR[m.group()], s)
    s = _ROOT_RE.sub(_root, s)
    s = _SUPER_RUN_RE.sub(lambda m: "^{" + m.group().translate(_SUPERSCRIPTS) + "}", s)
    s = _SUB_RUN_RE.sub(lambda m: "_{" + m.group().translate(_SUBSCRIPTS) + "}", s)
    return s


def _root(m: re.Match[str]) -> str:
    index = {"\u221a": "", "\u221b": "[3]", "\u221c": "[4]"}[m.group(1)]
    body = next(g for g in m.groups()[1:] if g is not None)
    return f"\\sqrt{index}{{{body}}}"


# ----------------------------------------------------------------------------- scale words and units

SCALE_WORDS: dict[str, Fraction] = {
    "hundred": Fraction(100), "hundreds": Fraction(100), "thousand": Fraction(10**3), "thousands": Fraction(10**3),
    "million": Fraction(10**6), "millions": Fraction(10**6), "billion": Fraction(10**9), "billions": Fraction(10**9),
    "trillion": Fraction(10**12), "trillions": Fraction(10**12), "dozen": Fraction(12), "dozens": Fraction(12),
}
"""Words that multiply the number before them (``percent`` is read as ``%``)."""

# unit -> (dimension, factor to the dimension's base unit)
_LENGTH = {"mm": Fraction(1, 1000), "millimeter": Fraction(1, 1000), "millimetre": Fraction(1, 1000),
           "cm": Fraction(1, 100), "centimeter": Fraction(1, 100), "centimetre": Fraction(1, 100),
           "m": Fraction(1), "meter": Fraction(1), "metre": Fraction(1), "km": Fraction(1000),
           "kilometer": Fraction(1000), "kilometre": Fraction(1000), "in": Fraction(254, 10000),
           "inch": Fraction(254, 10000), "inches": Fraction(254, 10000), "ft": Fraction(3048, 10000),
           "foot": Fraction(3048, 10000), "feet": Fraction(3048, 10000), "yd": Fraction(9144, 10000),
           "yard": Fraction(9144, 10000), "mi": Fraction(1609344, 1000), "mile": Fraction(1609344, 1000)}
_MASS = {"mg": Fraction(1, 1000), "milligram": Fraction(1, 1000), "g": Fraction(1), "gram": Fraction(1),
         "kg": Fraction(1000), "kilogram": Fraction(1000), "lb": Fraction(45359237, 100000),
         "lbs": Fraction(45359237, 100000), "pound": Fraction(45359237, 100000),
         "oz": Fraction(45359237, 1600000), "ounce": Fraction(45359237, 1600000),
         "ton": Fraction(907184740, 1000), "tonne": Fraction(10**6)}
_TIME = {"s": Fraction(1), "sec": Fraction(1), "second": Fraction(1), "min": Fraction(60), "minute": Fraction(60),
         "h": Fraction(3600), "hr": Fraction(3600), "hour": Fraction(3600), "day": Fraction(86400),
         "week": Fraction(604800)}
_VOLUME = {"ml": Fraction(1, 1000), "milliliter": Fraction(1, 1000), "millilitre": Fraction(1, 1000),
           "l": Fraction(1), "liter": Fraction(1), "litre": Fraction(1)}
_MONEY = {"dollar": Fraction(1), "cent": Fraction(1, 100), "\u00a2": Fraction(1, 100)}

UNITS: dict[str, tuple[str, Fraction]] = {}
"""Known units: name (singular, lower case; plurals in ``s`` are read too) -> (dimension, factor)."""
for _dim, _table in (("length", _LENGTH), ("mass", _MASS), ("time", _TIME), ("volume", _VOLUME), ("money", _MONEY)):
    for _name, _factor in _table.items():
        UNITS[_name] = (_dim, _factor)

# Words after a value that make it no plain value (kept, never dropped as a unit).
_NOT_A_UNIT = frozenset("""
not no never none neither nor isn't isnt aren't wasn't cannot can't won't don't doesn't without except excluding
or either maybe perhaps possibly probably likely approximately approx about around roughly nearly almost
than more less fewer least most over under above below at is are was were be been being equals equal
answer answers wrong incorrect correct right true false guess if unless but and plus minus times divided by
cent percent
""".split())
# "per" and "percent" are handled before the stop list; "per" inside a unit ("miles per hour") is allowed.

_TEXT_CMD = r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*"
_TRAILING_TEXT_RE = re.compile(r"(?:" + _TEXT_CMD + r"\{([^{}]*)\}(\s*\^\s*\{?\s*[23]\s*\}?)?\s*)+$")
_TEXT_PIECE_RE = re.compile(_TEXT_CMD + r"\{([^{}]*)\}(\s*\^\s*\{?\s*[23]\s*\}?)?")
_TRAILING_WORDS_RE = re.compile(r"(?<=[\d}%])\s+((?:[A-Za-z\u00a2][A-Za-z'.\-/]*(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*){1,6})$")
_GLUED_UNIT_RE = re.compile(r"(?<=\d)(mm|cm|km|mg|kg|ml|ft|yd|mi|lbs?|oz|hr|sec|min|\u00a2)(?:\^\s*\{?\s*([23])\s*\}?)?$")


class Trailing:
    """What follows the value of an answer (see :func:`split_trailing`)."""

    __slots__ = ("value", "words", "kind", "factor", "unit")

    def __init__(self, value: str, words: str, kind: str, factor: Fraction = Fraction(1), unit: tuple | None = None):
        self.value = value
        """The answer without the trailing words."""
        self.words = words
        """The trailing words as written (lower case, single spaces)."""
        self.kind = kind
        """``none``, ``scale``, ``percent``, ``unit``, ``noun`` (dropped) or ``other`` (kept: no plain value)."""
        self.factor = factor
        """The scale word's multiplier (``scale``)."""
        self.unit = unit
        """``(dimension, factor to the base unit, power)`` for ``unit``."""

    def __repr__(self) -> str:
        return f"Trailing({self.value!r}, {self.words!r}, {self.kind!r})"


def _singular(w: str) -> str:
    if w in UNITS or w in SCALE_WORDS:
        return w
    if w.endswith("es") and w[:-2] in UNITS and w[:-2] not in ("m", "s", "h", "l", "g"):
        return w[:-2]
    if w.endswith("s") and w[:-1] in UNITS and len(w) > 2:
        return w[:-1]
    return w


def _unit_of(words: list[str], power: int) -> tuple | None:
    """``(dimension, factor, power)`` of a unit phrase (``cm``, ``square feet``, ``cubic meters``, ``cm^2``)."""
    if words and words[0] in ("square", "sq", "sq.") and len(words) == 2:
        words, power = words[1:], 2
    elif words and words[0] in ("cubic", "cu", "cu.") and len(words) == 2:
        words, power = words[1:], 3
    if len(words) != 1:
        return None
    u = _singular(words[0].rstrip("."))
    if u not in UNITS:
        return None
    dim, factor = UNITS[u]
    if power != 1 and dim != "length":
        return None
    return dim, factor ** power, power


def split_trailing(s: str) -> Trailing:
    """Read the words after the value of ``s`` (a cleaned answer; see the module docstring)."""
    t = s.strip()
    m = _TRAILING_TEXT_RE.search(t)
    power = 1
    if m and m.start() > 0:
        value = t[:m.start()].strip()
        pieces = list(_TEXT_PIECE_RE.finditer(t, m.start()))
        words_raw = " ".join(p.group(1) for p in pieces)
        sup = pieces[-1].group(2) if pieces else None
        if sup:
            power = int(re.sub(r"\D", "", sup))
    else:
        m = _TRAILING_WORDS_RE.search(t) or _GLUED_UNIT_RE.search(t)
        if not m or m.start() == 0:
            return Trailing(t, "", "none")
        value = t[:m.start()].strip()
        words_raw = m.group(0)
        sup = re.search(r"\^\s*\{?\s*([23])\s*\}?\s*$", words_raw)
        if sup:
            power = int(sup.group(1))
            words_raw = words_raw[:sup.start()]
    if not value:
        return Trailing(t, "", "none")
    words_raw = re.sub(r"\^\s*\{?\s*[23]\s*\}?", " ", words_raw)
    words = [w for w in re.split(r"[\s~]+", words_raw.strip().lower().replace("\\,", " ").replace("\\ ", " ")) if w]
    text = " ".join(words)
    if not words:
        return Trailing(value, "", "none")
    if text in ("percent", "per cent", "%"):
        return Trailing(value, text, "percent")
    if len(words) == 1 and words[0] in SCALE_WORDS:
        return Trailing(value, text, "scale", SCALE_WORDS[words[0]])
    if words[0] in SCALE_WORDS:  # "5 million dollars": the scale word stays part of the value
        rest = split_trailing(value + " \\text{" + " ".join(words[1:]) + "}")
        if rest.kind in ("unit", "noun"):
            return Trailing(value, text, "scale", SCALE_WORDS[words[0]], rest.unit)
        return Trailing(value, text, "other")
    unit = _unit_of(words, power)
    if unit is not None:
        return Trailing(value, text, "unit", unit=unit)
    if "per" in words:  # "miles per hour", "dollars per pound": a rate unit, dropped like a noun
        if all(w not in _NOT_A_UNIT or w == "per" for w in words) and words[0] != "per" and words[-1] != "per":
            return Trailing(value, text, "noun")
        return Trailing(value, text, "other")
    if len(words) <= 4 and not any(w.strip(".,") in _NOT_A_UNIT or w.strip(".,") in SCALE_WORDS for w in words) \
            and all(re.fullmatch(r"[a-z\u00a2][a-z'.\-/]*", w) for w in words):
        return Trailing(value, text, "noun")
    return Trailing(value, text, "other")


def exact_text(x: Fraction) -> str:
    """``x`` written exactly: an integer, a terminating decimal, else ``p/q``."""
    if x.denominator == 1:
        return str(x.numerator)
    d = x.denominator
    twos = fives = 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    if d == 1:  # a terminating decimal
        places = max(twos, fives)
        n = abs(x.numerator) * 10 ** places // x.denominator
        digits = str(n).rjust(places + 1, "0")
        return ("-" if x < 0 else "") + digits[:-places] + "." + digits[-places:]
    return f"{x.numerator}/{x.denominator}"


def convert(value: Fraction, unit_from: tuple, unit_to: tuple) -> Fraction | None:
    """``value`` in ``unit_from`` expressed in ``unit_to`` (None when the dimensions differ)."""
    if unit_from[0] != unit_to[0] or unit_from[2] != unit_to[2]:
        return None
    return value * unit_from[1] / unit_to[1]
