"""A minimal numeric answer check: pull the final answer out of a completion and
compare it with the reference as a number.

* :func:`extract_final_answer` takes the content of the last ``\\boxed{...}``
  (nested braces allowed) or, in ``"boxed_or_last_number"`` mode, falls back to
  the last number in the text (``-3``, ``2.5``, ``1,234``, ``3/4``, ``\\frac{3}{4}``).
* :func:`parse_number` turns an answer string into a float (``"$1,234"``,
  ``"\\frac{3}{4}"``, ``"50%"`` -> 50.0, ``"x = 5."`` -> 5.0), or None.
* :func:`numeric_verifier` (registered as ``"numeric"``) combines the two with a
  relative tolerance.

This is the check for the arithmetic task and GSM8K-style integer answers; it does
no symbolic math.  Nothing here raises on junk input (None, non-strings, huge
strings), and every regular expression runs in linear time.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier

__all__ = ["MODES", "extract_final_answer", "parse_number", "numeric_verifier"]

MODES = ("boxed", "boxed_or_last_number")
"""Extraction modes: only ``\\boxed{}`` content, or that with a last-number fallback."""

_BOXED_RE = re.compile(r"\\boxed\s*\{")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")  # escaped braces (\{ \}) are matched and ignored

# One number as it appears in prose.  Not preceded by a digit or a point (so "5-3"
# yields 5 and 3, not -3); thousands groups must be exactly three digits.
_NUMBER_RE = re.compile(
    r"(?<![\d.])[-\u2212]?"
    r"(?:\\[dt]?frac\{\d+(?:\.\d+)?\}\{\d+(?:\.\d+)?\}"
    r"|(?:\d{1,3}(?:,\d{3}(?!\d))+|\d+)(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
    r"|\.\d+)"
)

_PLAIN_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FRAC_RE = re.compile(r"([+-]?)\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_DIGITS_RE = re.compile(r"([+-]?)\\[dt]?frac(\d)(\d)")
_SLASH_RE = re.compile(r"([^/]+)/([^/]+)")
_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_DEGREE_RE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\u00b0")


def _last_boxed(text: str) -> str | None:
    """Content of the last non-empty, closed ``\\boxed{...}``; None if there is none."""
    opens = [m.end() - 1 for m in _BOXED_RE.finditer(text)]  # positions of the "{"
    if not opens:
        return None
    wanted = set(opens)
    closing: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text, opens[0]):
        tok = m.group()
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            start = stack.pop()
            if start in wanted:
                closing[start] = m.start()
    for start in reversed(opens):
        end = closing.get(start)
        if end is not None:
            content = text[start + 1:end].strip()
            if content:
                return content
    return None


def _last_number(text: str) -> str | None:
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return last.group() if last is not None else None


def extract_final_answer(text: Any, mode: str = "boxed_or_last_number") -> str | None:
    """The final answer in ``text``, as a string, or None when there is none.

    The content of the last ``\\boxed{...}`` wins (nested braces are handled;
    unclosed or empty boxes are ignored).  Without one, ``"boxed_or_last_number"``
    returns the last number in the text and ``"boxed"`` returns None.  Non-string
    input gives None.
    """
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; choose one of {', '.join(MODES)}")
    if not isinstance(text, str) or not text:
        return None
    boxed = _last_boxed(text)
    if boxed is not None or mode == "boxed":
        return boxed
    return _last_number(text)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _plain(s: str) -> float | None:
    s = s.strip()
    if _PLAIN_RE.fullmatch(s):
        return _finite(float(s))
    if _THOUSANDS_RE.fullmatch(s):
        return _finite(float(s.replace(",", "")))
    return None


def _ratio(num: str, den: str, sign: str = "") -> float | None:
    a, b = _plain(num.strip()), _plain(den.strip())
    if a is None or b is None or b == 0:
        return None
    value = a / b
    return _finite(-value if sign == "-" else value)


def parse_number(s: Any) -> float | None:
    """The value of an answer string as a float, or None if it is not a plain number.

    Handles signs, decimals, thousands separators (``"1,234"``), currency and math
    dollars (``"$5"``, ``"\\$5"``), a trailing period, ``a/b`` and
    ``\\frac{a}{b}`` fractions, ``\\text{...}`` wrappers, degree signs, and a
    percent sign (``"50%"`` -> 50.0: the number is kept, not divided by 100).
    With an ``=`` the part after the last one is used (``"x = 5"`` -> 5.0).
    Ints and floats are returned as floats; anything else gives None.
    """
    if isinstance(s, bool):
        return None
    if isinstance(s, (int, float)):
        try:
            return _finite(float(s))
        except OverflowError:
            return None
    if not isinstance(s, str):
        return None
    t = s.replace("\u2212", "-")
    for junk in ("\\$", "$", "\\!", "\\,", "\\;", "\\left", "\\right"):
        t = t.replace(junk, "")
    t = t.replace("{,}", ",")
    t = _TEXT_RE.sub(r"\1", t)
    if "=" in t:
        t = t.rsplit("=", 1)[1]
    t = _DEGREE_RE.sub("", t)
    t = t.strip().rstrip(".").strip()
    if t.endswith("\\%"):
        t = t[:-2]
    elif t.endswith("%"):
        t = t[:-1]
    t = t.strip()
    if t.startswith("{") and t.endswith("}"):  # {5} or {{5}}: drop the wrapping braces
        k = min(len(t) - len(t.lstrip("{")), len(t) - len(t.rstrip("}")), len(t) // 2)
        t = t[k:len(t) - k].strip()
    if not t:
        return None

    value = _plain(t)
    if value is not None:
        return value
    m = _FRAC_RE.fullmatch(t) or _FRAC_DIGITS_RE.fullmatch(t)
    if m:
        return _ratio(m.group(2), m.group(3), m.group(1))
    m = _SLASH_RE.fullmatch(t)
    if m:
        num = m.group(1).strip()
        sign = ""
        if num[:1] in "+-" and num[1:2] == "(" and num.endswith(")"):
            sign, num = num[0], num[2:-1]
        return _ratio(num, m.group(2).strip(), sign)
    return None


def _short(s: Any, limit: int = 60) -> str:
    s = str(s).strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _tautology(answer: str) -> bool:
    """``0=0``, ``42 = 42 = 42``: an ``=`` chain whose sides are all the same."""
    if "=" not in answer:
        return False
    sides = {re.sub(r"\s+|\$", "", x) for x in answer.split("=")}
    return len(sides) == 1 and "" not in sides


@register_verifier("numeric")
def numeric_verifier(tolerance: float = 1e-6, mode: str = "boxed_or_last_number",
                     require_value: bool = True) -> Verifier:
    """A verifier scoring 1.0 when the extracted answer equals the reference as a number.

    Equal means ``|pred - ref| <= tolerance * max(1, |ref|)``.  The verdict's
    ``reason`` is ``"match"``, ``"no answer found"``, ``"unparseable answer: ..."``,
    ``"unparseable reference: ..."``, ``"not an answer: tautology ..."`` or
    ``"mismatch: <answer> != <reference>"``.  The returned callable never raises.

    ``require_value`` (default on): answers must be answers.  Only plain numbers
    parse here, so an unevaluated restatement (``\\boxed{17+25}``) or a list of
    candidates (``\\boxed{41, 42}``) is already unparseable; with the option on, a
    tautology whose sides are all the same (``\\boxed{0=0}``, ``\\boxed{42=42}``) is
    rejected too instead of being read as its last side.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or not math.isfinite(tolerance):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; choose one of {', '.join(MODES)}")
    tol = float(tolerance)

    def numeric_verify(completion: str, reference: str) -> Verdict:
        try:
            ref = parse_number(reference)
            extracted = extract_final_answer(completion, mode)
            if extracted is None:
                return Verdict(0.0, None, "no answer found")
            if ref is None:
                return Verdict(0.0, extracted, f"unparseable reference: {_short(reference)}")
            if require_value and _tautology(extracted):
                return Verdict(0.0, extracted, f"not an answer: tautology ({_short(extracted, 40)})")
            pred = parse_number(extracted)
            if pred is None:
                return Verdict(0.0, extracted, f"unparseable answer: {_short(extracted)}")
            if abs(pred - ref) <= tol * max(1.0, abs(ref)):
                return Verdict(1.0, extracted, "match")
            return Verdict(0.0, extracted, f"mismatch: {_short(extracted)} != {_short(reference)}")
        except Exception as e:  # noqa: BLE001 - defensive: a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {_short(e, 200)}")

    numeric_verify.tolerance = tol  # type: ignore[attr-defined]
    numeric_verify.mode = mode  # type: ignore[attr-defined]
    numeric_verify.require_value = bool(require_value)  # type: ignore[attr-defined]
    return numeric_verify
