"""The ``math`` verifier: is the final answer of a completion equal to a reference?

Layers, like HF Math-Verify, each a small module:

* :mod:`.extract` finds where answers are written (``\\boxed{}``, "final answer is",
  ``####``, "the answer is", math spans, numbers) after any thought block of any model
  family (never in it);
* :mod:`.choose` decides which of them is the response's final answer: attempts split
  by corrections (one correction is honoured, a list of guesses is a hedge), the
  alternatives an answer offers (several different values earn nothing), a retraction,
  a response cut off at the token limit (the rules are in its docstring and in
  ``docs/rewards.md``, "How a response's final answer is chosen");
* :mod:`.normalize` and :mod:`.units` clean it (``\\text{}``, degrees, thousands
  separators, repeating decimals, mixed numbers, scientific notation, ``x = 3``,
  unicode; scale words and units are part of the value, never dropped silently);
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
(plus worker start-up on the first symbolic check): extraction is linear in the
response length, and a response longer than :data:`INLINE_CHARS` is read and checked
whole inside the worker, under the same hard limit.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any, Callable

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.math.choose import MAX_ALTERNATIVES, Choice, choose_answer, has_variables
from rlvr.verifiers.math.compare import _CHOICE_GOLD_RE, quick_compare, symbolic_compare
from rlvr.verifiers.math.extract import (
    STRICTNESS,
    THOUGHT_BLOCKS,
    Extraction,
    boxed_spans,
    extract_answer,
    find_hedge,
    is_prose,
    latex_spans,
    outermost,
    thought_blocks,
)
from rlvr.verifiers.math.normalize import (clean, clean_parts, not_an_answer, scale, split_relation, squash,
                                          to_number)
from rlvr.verifiers.math.sandbox import Sandbox
from rlvr.verifiers.math.units import convert, exact_text

__all__ = ["math_verifier", "extract_answer", "choose_answer", "Choice", "Extraction", "STRICTNESS", "THOUGHT_BLOCKS",
           "get_sandbox", "INLINE_CHARS"]

MAX_ANSWER_CHARS = 2000
INLINE_CHARS = 50_000
"""Responses longer than this are read and checked inside the sandbox worker, so that their
extraction counts against the hard ``timeout`` too (shorter ones take milliseconds in-process)."""
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
    if isinstance(reference, str):
        return _reference_text(reference)
    if isinstance(reference, bool) or reference is None:
        return None
    if isinstance(reference, (int, float)):
        if isinstance(reference, float) and not math.isfinite(reference):
            return None
        reference = str(int(reference)) if float(reference).is_integer() else repr(reference)
    if not isinstance(reference, str):
        return None
    return _reference_text(reference)


@lru_cache(maxsize=4096)
def _reference_text(reference: str) -> str | None:
    """:func:`_reference_answer` of a string (a group's samples share their reference: read once)."""
    if not reference.strip():
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
    outer = outermost(boxed_spans(s))
    for (_, e), (b, _) in zip(outer, outer[1:]):
        between = s[e + 1:b].rsplit("\\", 1)[0] if "\\" in s[e + 1:b] else s[e + 1:b]
        between = between if not s[e + 1:b].rstrip().endswith(("boxed", "fbox")) else s[e + 1:b][:s[e + 1:b].rfind("\\")]
        if _BETWEEN_JUNK_RE.sub("", between) and not _LIST_WORD_RE.search(between):
            return False
    return True


def _list_like(s: str) -> bool:
    return bool(_TOP_COMMA_RE.search(s))


_PM_RE = re.compile(r"\\pm(?![a-zA-Z])")


def _expand_pm(s: str) -> list[str]:
    """``a \\pm b`` -> ``[a + b, a - b]``, ``\\pm 3`` -> ``[3, -3]`` (one top-level ``\\pm``), else ``[s]``."""
    hits = list(_PM_RE.finditer(s))
    if len(hits) != 1:
        return [s]
    a, b = s[:hits[0].start()].strip(), s[hits[0].end():].strip()
    if not b:
        return [s]
    lead = re.match(r"^(.*?=)\s*$", a)  # "x = \pm 3"
    if not a or lead:
        prefix = lead.group(1) + " " if lead else ""
        return [prefix + b, prefix + "-" + (b if re.fullmatch(r"[\w.\\{}^]+", b) else "(" + b + ")")]
    return [f"{a} + {b}", f"{a} - ({b})"]


def _values_of(s: str) -> list[str]:
    """The values a multi-valued answer lists: top-level ``,``/``;``/or/and parts, each ``\\pm`` expanded."""
    from rlvr.verifiers.math.choose import split_alternatives
    from rlvr.verifiers.math.normalize import _top_level

    out: list[str] = []
    for part in _top_level(s, ",;"):
        for alt in split_alternatives(part):
            for x in re.split(r"\\text\s*\{\s*and\s*\}|(?<![A-Za-z\\])and(?![A-Za-z])", alt):
                out += [v for v in _expand_pm(x.strip()) if v]
    return out


_CHOICE_PREFIX_RE = re.compile(r"^\s*(?:\\(?:textbf|text|mathrm|mathbf|textrm)\s*\{\s*\(\s*[A-J]\s*\)\s*\}"
                               r"|\(\s*[A-J]\s*\))\s*(?=\S)")


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
                  require_value: bool | str = "auto", thought_blocks: Any = THOUGHT_BLOCKS) -> Verifier:
    """A verifier scoring 1.0 when the completion's final answer equals the reference.

    Args:
        strictness: which answer markers count: ``"strict"`` (boxed, "final answer
            is", ``####``), ``"standard"`` (+ "the answer is"/"Answer:" and the last math
            span) or ``"lenient"`` (+ the last number in the text).
        tolerance: relative tolerance for numeric answers (exact rationals match exactly).
        timeout: hard limit in seconds for one symbolic check (a killed worker), and for
            reading and checking a response longer than :data:`INLINE_CHARS`.
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
        thought_blocks: the delimiters of thought blocks, which are never the answer: a
            list of ``[open, close]`` pairs (``[open, close, "paired"]`` when a closing
            tag counts only after its opening tag); default :data:`THOUGHT_BLOCKS`
            (``<think>``, ``<thinking>``, ``<reasoning>``, ``<|begin_of_thought|>``,
            ``\u25c1think\u25b7``, ``<Thought>``, harmony's analysis channel).

    How the final answer is chosen (corrections, hedges, truncation) is :mod:`.choose`'s
    docstring.  Reasons start with ``match``, ``mismatch``, ``no answer found``,
    ``hedged``, ``answer retracted``, ``not an answer``, ``timeout``, ``bad input`` or
    ``verifier error``.
    """
    _check_options(strictness, tolerance, timeout, require_value)
    blocks = THOUGHT_BLOCKS if thought_blocks is THOUGHT_BLOCKS else _blocks_option(thought_blocks)
    compare = _symbolic_comparer(float(tolerance), float(timeout), isolate)
    options = (strictness, max_chars, require_value, float(tolerance), float(timeout), blocks)

    def math_verify_fn(completion: Any, reference: Any) -> Verdict:
        try:
            if isolate and isinstance(completion, str) and INLINE_CHARS < len(completion) <= max_chars:
                return _score_in_worker(completion, reference, options)
            return _score(completion, reference, compare, strictness, max_chars, require_value, blocks)
        except Exception as e:  # noqa: BLE001 - a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {_short(e, 200)}")

    math_verify_fn.strictness = strictness  # type: ignore[attr-defined]
    math_verify_fn.timeout = timeout  # type: ignore[attr-defined]
    return math_verify_fn


def _blocks_option(value: Any) -> tuple:
    """``thought_blocks`` checked, as a hashable tuple of tuples (sent to the worker as is)."""
    checked = thought_blocks(value)  # raises ValueError naming the bad entry
    return tuple((o, c, "paired") if paired else (o, c) for o, c, paired in checked)


def _score_in_worker(completion: str, reference: Any, options: tuple) -> Verdict:
    """A long response read and checked whole in the sandbox worker, under the hard ``timeout``."""
    timeout = options[4]
    status, value = get_sandbox().call(_score_here, (completion, reference, options), timeout)
    if status == "timeout":
        return Verdict(0.0, None, f"timeout: reading and checking a {len(completion)}-character response took over "
                                  f"{timeout:g}s")
    if status == "error":
        return Verdict(0.0, None, f"verifier error: {_short(value, 200)}")
    return value


_WORKER_COMPARERS: dict[float, Callable[[str, str], tuple[bool, str]]] = {}


def _score_here(completion: str, reference: Any, options: tuple) -> Verdict:
    """:func:`_score` with in-process symbolic checks (run inside the worker; module-level so it pickles)."""
    strictness, max_chars, require_value, tolerance, timeout, blocks = options
    compare = _WORKER_COMPARERS.get(tolerance)
    if compare is None:
        compare = _WORKER_COMPARERS[tolerance] = _symbolic_comparer(tolerance, timeout, False)
    try:
        return _score(completion, reference, compare, strictness, max_chars, require_value, blocks)
    except Exception as e:  # noqa: BLE001
        return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {_short(e, 200)}")


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
           max_chars: int, require_value: bool | str, blocks: Any = THOUGHT_BLOCKS) -> Verdict:
    """One completion's verdict against ``reference`` (see :func:`math_verifier`)."""
    gold = _reference_answer(reference)
    if gold is None:
        return Verdict(0.0, None, f"bad input: empty or non-string reference ({type(reference).__name__})")
    if not isinstance(completion, str):
        return Verdict(0.0, None, f"bad input: completion is {type(completion).__name__}, not str")
    if len(completion) > max_chars:
        return Verdict(0.0, None, f"bad input: completion too long ({len(completion)} > {max_chars} chars)")
    text = unescape_commands(completion)  # unicode is read in each answer (normalize.clean), not in the prose
    choice = choose_answer(text, strictness, blocks)
    if choice.answer is None:
        return Verdict(0.0, None, choice.problem or "no answer found")
    answer = choice.answer
    if choice.problem:
        return Verdict(0.0, answer, choice.problem)
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict(0.0, _short(answer), f"bad input: answer too long ({len(answer)} chars)")
    return _Judge(gold, compare, require_value).verdict(choice)


@lru_cache(maxsize=4096)
def _gold_facts(gold: str) -> tuple[str, tuple | None, bool, bool, bool]:
    """``(cleaned, unit, several values, a choice letter, has variables)`` of a reference answer."""
    g, unit, _ = clean_parts(gold)
    return g, unit, _list_like(gold) or bool(_PM_RE.search(g)), bool(_CHOICE_GOLD_RE.fullmatch(squash(g))), \
        has_variables(g)


class _Judge:
    """The verdicts of one response's answers against one reference (each answer checked once)."""

    def __init__(self, gold: str, compare: Callable[[str, str], tuple[bool, str]], require_value: bool | str):
        self.gold = gold
        self.g, self.g_unit, self.multi, self.choice_gold, self.g_vars = _gold_facts(gold)
        self.compare = compare
        self.require_value = require_value
        self.cache: dict[str, tuple[bool, str]] = {}

    def verdict(self, choice: Choice) -> Verdict:
        answer = choice.answer or ""
        if len(choice.attempts) > 1:
            changes = self.changes(choice.attempts)
            if changes is None or changes > 1:
                n = f"more than {MAX_ALTERNATIVES}" if changes is None else str(changes)
                return Verdict(0.0, answer, f"hedged: the answer changes {n} times (a list of guesses, "
                                                    f"not one correction)")
        alts = choice.alternatives(formulas=self.g_vars)
        if len(alts) > MAX_ALTERNATIVES:
            return Verdict(0.0, answer, f"hedged: {len(alts)} different answers offered")
        if len(alts) == 1:
            ok, why = self.check(alts[0])
            return self._verdict(ok, why, alts[0])
        if self.multi:  # several values for a reference with several: together they must be it
            joined = ", ".join(alts)
            ok, why = self.check(joined)
            if ok:
                return Verdict(1.0, joined, why + ", alternatives together")
            if self.same_values(alts):
                return Verdict(1.0, joined, "match (the alternatives are the reference's values)")
            return Verdict(0.0, joined, f"mismatch: {_short(joined)} != {_short(self.gold)}")
        results = [self.check(a) for a in alts]
        if all(ok for ok, _ in results):
            return Verdict(1.0, answer, results[-1][1] + f", all {len(alts)} alternatives equal")
        for ok, why in results:
            if why.startswith(("timeout", "verifier error")):
                return Verdict(0.0, answer, why)
        shown = ", ".join(repr(_short(a, 20)) for a in alts[:4])
        return Verdict(0.0, answer, f"hedged: different answers offered ({shown})")

    def _verdict(self, ok: bool, why: str, answer: str) -> Verdict:
        if ok:
            return Verdict(1.0, answer, why)
        if why.startswith(("timeout", "verifier error", "hedged", "not an answer", "bad input")):
            return Verdict(0.0, answer, why)
        return Verdict(0.0, answer, f"{why}: {_short(answer)} != {_short(self.gold)}")

    def changes(self, attempts: tuple) -> int | None:
        """How many times the answer changes from one attempt to the next (None: more than
        :data:`MAX_ALTERNATIVES`, counted without comparing)."""
        keys = [frozenset(squash(a) for st in att for a in st.alternatives) for att in attempts]
        seq = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
        if len(seq) - 1 > MAX_ALTERNATIVES:
            return None
        return sum(not self.same_attempt(attempts[a], attempts[b]) for a, b in zip(seq, seq[1:]))

    def same_attempt(self, a: tuple, b: tuple) -> bool:
        """Two attempts state the same answer: equal after cleaning, equal numbers, or all equal to the reference."""
        xs = [x for st in a for x in st.alternatives]
        ys = [y for st in b for y in st.alternatives]
        if {squash(clean(x)) for x in xs} == {squash(clean(y)) for y in ys}:
            return True
        if len(xs) == len(ys) == 1:
            nx, ny = to_number(clean(xs[0])), to_number(clean(ys[0]))
            if nx is not None and ny is not None and nx == ny:
                return True
        if len(xs) + len(ys) <= 2 * MAX_ALTERNATIVES:
            return all(self.check(x)[0] for x in xs + ys)
        return False

    def same_values(self, alts: list[str]) -> bool:
        """The alternatives, each ``\\pm`` expanded, are the reference's values (each one matched both ways)."""
        golds = _values_of(self.g)
        preds = [v for a in alts for v in _expand_pm(clean(a))]
        if not 1 < len(golds) <= MAX_ALTERNATIVES or not 1 < len(preds) <= MAX_ALTERNATIVES:
            return False
        hits = [[self.compare(*_decimal_commas(clean(g), clean(p)))[0] for p in preds] for g in golds]
        return all(any(row) for row in hits) and all(any(col) for col in zip(*hits))

    def check(self, answer: str) -> tuple[bool, str]:
        """``(equal, reason)`` for one value against the reference."""
        key = squash(answer)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._check(answer)
        return hit

    def _check(self, answer: str) -> tuple[bool, str]:
        if len(answer) > MAX_ANSWER_CHARS:
            return False, f"bad input: answer too long ({len(answer)} chars)"
        p, p_unit, words = clean_parts(answer)
        g = self.g
        if words and squash(p) != squash(g):
            return False, f"not an answer: {words!r} after the value"
        g, p, problem = self._units(g, p, p_unit)
        if problem:
            return False, problem
        if not self.multi:
            hedge = find_hedge(answer)
            if hedge:
                return False, hedge
        if not self.choice_gold:  # "\\textbf{(C)}\\ 27" for 27: the value after the option label
            p = _CHOICE_PREFIX_RE.sub("", p, count=1)
        g, p = _decimal_commas(g, p)
        problem = not_an_answer(g, p, self.require_value, self.multi)
        if problem:
            return False, problem
        ok, why = self.compare(g, p)
        if not ok and not why.startswith(("timeout", "verifier error")) and "=" not in g and "\\approx" not in g:
            sides = split_relation(p)  # "x = 5+5+1 = 1/3": the value it ends with
            if len(sides) > 1 and sides[-1]:
                last_ok, last_why = self.compare(g, sides[-1])
                if last_ok:
                    ok, why = last_ok, last_why
        return ok, why

    def _units(self, g: str, p: str, p_unit: tuple | None) -> tuple[str, str, str | None]:
        """Both sides in one unit (see :mod:`.units`): converted when both name one, the unit
        dropped when only one side names it, except money (a reference without a unit is
        in dollars: ``25 cents`` is 0.25)."""
        g_unit = self.g_unit
        if g_unit is not None and p_unit is not None:
            if g_unit == p_unit:
                return g, p, None
            n = to_number(p)
            value = convert(n[0], p_unit, g_unit) if n is not None and not n[1] else None
            if value is None:
                return g, p, "mismatch: a value in other units" if n is not None else \
                    "mismatch: an answer in other units that is no plain number"
            return g, exact_text(value), None
        if p_unit is not None and p_unit[0] == "money" and p_unit[1] != 1:
            return g, scale(p, p_unit[1]) or p + " \\text{cents}", None
        if g_unit is not None and g_unit[0] == "money" and g_unit[1] != 1:
            return scale(g, g_unit[1]) or g + " \\text{cents}", p, None
        return g, p, None
