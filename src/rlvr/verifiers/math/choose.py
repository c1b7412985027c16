"""Step 1b of the math verifier: which of a response's answers is *the* final answer.

:mod:`.extract` finds where answers are written; this layer decides what the response
answers, as specified in ``docs/rewards.md`` ("How a response's final answer is chosen"):

1. **Reading region.**  Thought blocks of every family are blanked (:func:`.extract.answer_region`);
   one left open leaves nothing (the response was cut off while thinking).
2. **Statements.**  The response's stated answers, in order: its boxes, then any answer
   sentence written after the last box ("the correct answer is 8", "Answer: 8", ``#### 8``);
   or, when an explicit "Final Answer" sentence follows the last box, that sentence alone;
   without a box, its answer sentences ("final answer is", ``####``, "the answer is",
   "Answer:").  Without any of those (``standard``/``lenient``), the last math span or (``lenient``)
   bare number, and only from a *finished* response (4).
3. **Attempts.**  A correction marker ("wait", "actually", "I misread", "let me recheck"...)
   between two statements starts a new attempt.  The response is judged on its final
   attempt when its answer changes at most once (one correction: ``\\boxed{7} ... wait, I
   misread ... the correct answer is 8`` is judged on 8); more changes (``\\boxed{3} Wait,
   \\boxed{4} Wait, \\boxed{5}``, 50 boxes joined by "Wait,") are a list of guesses: a hedge.
4. **Alternatives.**  Every value the final attempt offers: each of its statements, a
   statement split at "or" (``\\frac{1}{2} \\text{ or } 0.5``), and, for a sentence offering
   alternatives ("or", "either", "one of", "maybe", "could be", a list with an ellipsis), every
   value in that sentence.  The verifier pays only when all of them equal the reference
   (one value written several ways), or, for a reference with several values (a list,
   ``\\pm``), when together they are that list.  So several different candidate values earn
   nothing against any of them.
5. **Truncation.**  The verifier is given only the text (no finish reason), so a response
   whose last non-blank character does not end a sentence or a formula (``.``, ``!``, ``?``,
   ``$``, a closing bracket or tag) is taken to be cut off at the token limit: no last span
   or trailing number is taken from it (a box or an answer sentence still counts).
6. **Retraction.**  A retraction after the last statement ("... that's wrong", "I misread")
   with no answer after it leaves nothing.

Linear in the response length: every pass is one regex scan or one loop over matches, and
at most :data:`MAX_ALTERNATIVES` values are ever compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlvr.verifiers.math.extract import (
    _ASY_RE, _BOX_OPEN_RE, _CORRECTION_RE, _FINAL_RE, _GSM8K_RE, _NUMBER_RE, STRICTNESS, THOUGHT_BLOCKS,
    _from_sentence, _is_name, _is_phantom_or_empty, _last_candidate, _masked, _rest_of_line, _span_answer,
    answer_region, boxed_spans, find_retraction, is_prose, latex_spans, open_block, outermost,
)
from rlvr.verifiers.math.normalize import split_relation

__all__ = ["Statement", "Choice", "choose_answer", "split_alternatives", "MAX_ALTERNATIVES", "is_finished",
           "has_variables"]

MAX_ALTERNATIVES = 8
"""More different values than this in one attempt, or more changes of answer than this, are a
hedge without any comparison (the bound that keeps a 20,000-box response cheap)."""

# Answer sentences without a box ("the answer is", "the correct answer is", "Answer:").
_ANSWER_RE = re.compile(
    r"\bthe\s+(?:(?:correct|right|actual|real|true|corrected|new|final)\s+)?answer\s+"
    r"(?:is|should\s+be|must\s+be|would\s+be|will\s+be)\b\s*:?|\banswer\s*:\s*",
    re.IGNORECASE,
)
# An answer stated again after the last box (a correction, or the same answer in words): "the (correct)
# answer is", "Answer:" opening a line.
_RESTATE_RE = re.compile(
    r"\bthe\s+(?:(?:correct|right|actual|real|true|corrected|new|final)\s+)?answer\s+"
    r"(?:is|should\s+be|must\s+be|would\s+be|will\s+be)\b\s*:?|^[\s*#>_]*(?:(?:correct|corrected|new)\s+)?answer\s*:\s*",
    re.IGNORECASE | re.MULTILINE,
)
# A sentence that offers alternatives (checked outside math spans)...
_PROSE_HEDGE_RE = re.compile(
    r"\b(?:or|either|one\s+of|any\s+of|maybe|perhaps|possibly|could\s+be|might\s+be|may\s+be)\b"
    r"|,\s*(?:\.\.\.|\u2026)", re.IGNORECASE)  # an ellipsis in a list ("0, 1, ..., 1000"), not a pause
# ...or inside them.
_MATH_HEDGE_RE = re.compile(r"\\text\s*\{\s*(?:or|either)\s*\}|,\s*(?:\\[lc]?dots[cbmio]?(?![a-zA-Z])|\u2026)")
# "or" between alternatives of one answer: "\text{ or }", "\quad\text{or}\quad", a bare "or".
_OR_RE = re.compile(r"(?:\\q?quad\s*)?\\(?:text|textrm|mbox|mathrm)\s*\{\s*or\s*\}(?:\s*\\q?quad)?|(?<![A-Za-z\\])or(?![A-Za-z])")
_EITHER_RE = re.compile(r"^\s*(?:\\(?:text|textrm|mbox|mathrm)\s*\{\s*either\s*\}|either\b)\s*", re.IGNORECASE)
_FINISHED_RE = re.compile(r"(?:[.!?)\]}$*\"'`>|]|\\\)|\\\]|\\end\s*\{[^{}]{0,40}\})\s*$")
# A clause ends at a sentence end (a period inside a closing "$" too), a blank line, or a display formula.
_CLAUSE_END_RE = re.compile(r"[.!?](?:\$|\\\)|\\\])?(?=\s|$)|\n\s*\n|\\\]|\\end\s*\{[^{}]{0,40}\}|\$\$")
_END_OF_TURN_RE = re.compile(r"<\|(?:im_end|im_start|endoftext|eot_id|end_of_text|return)\|>|</s>|<\uff5cend\u2581of\u2581sentence\uff5c>")
_LAST_CLOSE_RE = re.compile(r"[.!?)\]}$*\"'`>|]|\\\)|\\\]")
SHORT_RESPONSE = 200
"""A response of at most this many characters is an answer line, never one cut off at the token limit."""
_JUDGEMENT_RE = re.compile(r"\W*(?:correct|right|wrong|incorrect|confirmed|verified|consistent|valid|invalid|true|false|"
                           r"indeed|yes|no|not|the\s+same|unchanged|as\s+(?:above|before|stated))\b", re.IGNORECASE)
_COMMAND_RE = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{[^{}]*\}|\\[a-zA-Z]+")


@dataclass(frozen=True)
class Statement:
    """One stated answer."""

    text: str
    """As written (LaTeX or plain)."""
    start: int
    end: int
    source: str
    """boxed, final_answer, answer_is, gsm8k, latex, last_number or whole."""
    alternatives: tuple[str, ...]
    """The values it offers (one, or several when it offers alternatives)."""
    prose: bool = False
    """The alternatives were read from a sentence offering them ("It could be 11, or 12")."""


@dataclass(frozen=True)
class Choice:
    """What :func:`choose_answer` decided."""

    answer: str | None
    """The final statement's text, or None when the response states no answer."""
    source: str
    problem: str | None = None
    """Why the response earns nothing whatever the reference (retracted, unfinished), else None."""
    attempts: tuple[tuple[Statement, ...], ...] = ()
    """The statements grouped into attempts (split at correction markers); the last is judged."""

    @property
    def final(self) -> tuple[Statement, ...]:
        return self.attempts[-1] if self.attempts else ()

    def alternatives(self, formulas: bool = True) -> list[str]:
        """Every value the final attempt offers, deduplicated as written (order kept).  ``formulas=False``:
        without the expressions in variables a sentence offers beside a plain value (``$\\sqrt{DF^2 - EF^2},$
        or $\\sqrt{51}$`` offers one value), for a reference that is itself a plain value."""
        written = dict.fromkeys(a for st in self.final for a in st.alternatives  # exact duplicates first: cheap
                                if formulas or not st.prose or not has_variables(a)
                                or all(has_variables(x) for x in st.alternatives))
        seen: dict[str, str] = {}
        for a in written:
            seen.setdefault(_key(a), a)
        return list(seen.values())


def _key(s: str) -> str:
    """``s`` without what never changes a value (spacing, ``\\left``, ``$``, ``\\dfrac``, a final period)."""
    return re.sub(r"\s+|\\[,;:! ]|\\left|\\right|\$|\\[dt](?=frac)", "", s).rstrip(".,;")


def _top_level_or(s: str) -> list[str]:
    """``s`` split at "or" outside brackets and braces (``\\text{ or }`` counts as outside)."""
    cuts = [(m.start(), m.end()) for m in _OR_RE.finditer(s)]
    if not cuts:
        return [s]
    parts, depth, j, last = [], 0, 0, 0
    for i, c in enumerate(s):
        while j < len(cuts) and cuts[j][0] < i:
            j += 1
        if j < len(cuts) and cuts[j][0] == i and depth == 0 and i >= last:
            parts.append(s[last:i])
            last = cuts[j][1]
        if i < last:
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
    parts.append(s[last:])
    return parts


def split_alternatives(answer: str) -> list[str]:
    """The alternatives one answer offers: ``3 \\text{ or } 4`` -> ``[3, 4]``, ``either 2 or 3``
    -> ``[2, 3]``; one answer -> ``[answer]``."""
    if "or" not in answer:
        return [answer]
    parts = [p.strip().strip(",;").strip() for p in _top_level_or(_EITHER_RE.sub("", answer))]
    parts = [p for p in parts if p]
    return parts if len(parts) > 1 else [answer]


def is_finished(text: str) -> int | None:
    """Where the finished part of ``text`` ends (see the module docstring, 5), or None when the
    response was cut off mid-statement.  Finished: it ends a sentence or a formula, it holds an
    end-of-turn token, it is at most :data:`SHORT_RESPONSE` characters, or all that follows its
    last sentence is one word without a number of its own (a unit, ``percent``, a signature)."""
    body = text.rstrip()
    if not body:
        return None
    if len(body.strip()) <= SHORT_RESPONSE or _FINISHED_RE.search(body[-200:]) or _END_OF_TURN_RE.search(text):
        return len(body)
    tail_start = max(0, len(body) - 40)
    last = None
    for last in _LAST_CLOSE_RE.finditer(body, tail_start):
        pass
    if last is None:
        return None
    tail = body[last.end():].strip()
    if tail and not re.search(r"\s", tail) and not re.search(r"(?<![A-Za-z\d])[-+]?\d", tail):
        return last.end()
    return None


def _clause_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The clause of ``text`` around ``[start, end)`` (at most 600 characters each way)."""
    a = max(0, start - 600)
    s = a
    for m in _CLAUSE_END_RE.finditer(text, a, max(a, start - 1)):
        s = m.end()
    m = _CLAUSE_END_RE.search(text, end, end + 600)
    return s, (m.end() if m else min(len(text), end + 600))


def has_variables(v: str) -> bool:
    """True when ``v`` has a letter outside LaTeX commands and ``\\text{}`` (``p - q``, ``DF^2``; not ``2\\pi``)."""
    return bool(re.search(r"[A-Za-z]", _COMMAND_RE.sub(" ", v)))


def _value_of(v: str) -> str:
    """The value a piece of math states: the last side of ``x = ... = 5``."""
    sides = split_relation(v)
    return sides[-1] if len(sides) > 1 and sides[-1] else v


def _sentence_values(text: str, masked: str, a: int, b: int) -> list[str] | None:
    """The values a clause ``text[a:b]`` offers when it offers alternatives ("or", "one of",
    a list with an ellipsis...), else None.  A piece of math counts by the value it ends with (``x = 3`` is 3)."""
    raw, prose = text[a:b], masked[a:b]
    if not (_PROSE_HEDGE_RE.search(prose) or _MATH_HEDGE_RE.search(raw)):
        return None
    values: list[tuple[int, str]] = []
    for s, e, cs, ce in latex_spans(raw):
        content = raw[cs:ce].strip().rstrip(".,;").strip()
        if content and not _is_name(content) and not _is_phantom_or_empty(_BOX_OPEN_RE.sub("", content)):
            values += [(s, _value_of(v)) for v in split_alternatives(content)]
    for m in _NUMBER_RE.finditer(prose):
        values.append((m.start(), m.group()))
    values.sort()
    out: dict[str, str] = {}
    for _, v in values:
        out.setdefault(_key(v), v)
        if len(out) > MAX_ALTERNATIVES:
            break
    return list(out.values()) if len(out) > 1 else None


def _piece_statement(text: str, masked: str, m: re.Match[str], source: str) -> Statement | None:
    """The answer sentence after marker ``m`` as a statement (None when it states nothing)."""
    piece, end = _rest_of_line(text, m.end())
    if source == "gsm8k":
        found = (piece, end) if piece else None
    else:
        found = _from_sentence(piece, m.end())
    if not found or not found[0]:
        return None
    answer, end = found[0], max(end, found[1])
    a = text.find(piece, m.end(), m.end() + 310 + len(piece)) if piece else m.end()
    a = a if a >= 0 else m.end()
    b = a + len(piece)
    if piece:
        clause_end = _CLAUSE_END_RE.search(text, a, b)
        b = clause_end.end() if clause_end else b
    values = _sentence_values(text, masked, a, b) if piece else None
    return Statement(answer, m.start(), end, source, tuple(values) if values else tuple(split_alternatives(answer)),
                     bool(values))


def _attempts(text: str, statements: list[Statement]) -> tuple[tuple[Statement, ...], ...]:
    """``statements`` grouped into attempts: a correction marker between two starts a new one."""
    if len(statements) == 1 or len({st.text for st in statements}) == 1:  # one answer however often stated
        return (tuple(statements),)
    markers = [m.start() for m in _CORRECTION_RE.finditer(text, statements[0].end, statements[-1].start)]
    groups: list[list[Statement]] = [[statements[0]]]
    k = 0
    for prev, st in zip(statements, statements[1:]):
        while k < len(markers) and markers[k] < prev.end:
            k += 1
        if k < len(markers) and markers[k] < st.start:
            groups.append([st])
        else:
            groups[-1].append(st)
    return tuple(tuple(g) for g in groups)


def choose_answer(text: str, strictness: str = "lenient", blocks=THOUGHT_BLOCKS) -> Choice:
    """The response's final answer, its attempts and alternatives (see the module docstring)."""
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}; choose one of {', '.join(STRICTNESS)}")
    if not isinstance(text, str) or not text.strip():
        return Choice(None, "none")
    region = answer_region(text, blocks)
    if region is None:
        return Choice(None, "none", f"no answer found: unfinished {open_block(text, blocks)} block (cut off while thinking)")
    closed = region[1] < len(text.rstrip())  # an </answer> tag ends the region: the response is finished
    original = text
    if region != (0, len(text)):  # blank the reasoning (same length: offsets stay valid)
        a, b = region
        text = " " * a + text[a:b] + " " * (len(text) - b)
        if not text.strip():
            return Choice(None, "none")
    if "[asy]" in text:  # drawing code is no answer
        text = _ASY_RE.sub(lambda m: " " * (m.end() - m.start()), text)

    boxes = outermost([(s, e) for s, e in boxed_spans(text) if not _is_phantom_or_empty(text[s:e])])
    finals = list(_FINAL_RE.finditer(text, boxes[-1][1] if boxes else 0))
    masked: str | None = None
    statements: list[Statement] = []
    if finals or not boxes:
        markers = [(m, "final_answer") for m in finals]
        if not boxes:
            markers += [(m, "gsm8k") for m in _GSM8K_RE.finditer(text)]
            if strictness != "strict":
                markers += [(m, "answer_is") for m in _ANSWER_RE.finditer(text)]
        markers.sort(key=lambda x: x[0].start())
        if markers:
            masked = _masked(text)
        for m, source in _dedupe(markers):
            st = _piece_statement(text, masked, m, source)
            if st is not None and not _JUDGEMENT_RE.match(st.text):
                statements.append(st)
        # "the answer is not obvious yet": a sentence in words before the last one states no answer
        statements = [st for st in statements[:-1] if not is_prose(st.text)] + statements[-1:]
    else:
        for s, e in boxes:
            content = text[s:e].strip()
            statements.append(Statement(content, s, e + 1, "boxed", tuple(split_alternatives(content))))
        after = boxes[-1][1] + 1
        restates = [(m, "answer_is") for m in _RESTATE_RE.finditer(text, after)]
        restates += [(m, "gsm8k") for m in _GSM8K_RE.finditer(text, after)]
        if restates:
            masked = _masked(text)
            for m, source in _dedupe(sorted(restates, key=lambda x: x[0].start())):
                st = _piece_statement(text, masked, m, source)
                if st is not None and st.start >= after and not _JUDGEMENT_RE.match(st.text):  # not "... is correct"
                    statements.append(st)

    if not statements and strictness != "strict":
        st = _fallback(text, original, strictness, closed)
        if isinstance(st, str):
            return Choice(None, "none", st)
        if st is not None:
            statements.append(st)
    if not statements:
        return Choice(None, "none")
    last = statements[-1]
    retracted = find_retraction(text, last.end)
    attempts = _attempts(text, statements)
    return Choice(last.text, last.source, retracted, attempts)


def _dedupe(markers: list) -> list:
    """Markers in order, dropping one that starts inside the previous one's match."""
    out, end = [], -1
    for m, source in markers:
        if m.start() >= end:
            out.append((m, source))
            end = m.end()
    return out


def _fallback(text: str, original: str, strictness: str, closed: bool) -> Statement | str | None:
    """The last math span or bare number of the finished part of a response (``standard``: span only)."""
    whole = text.strip()
    if len(whole) <= 300 and "\n" not in whole and "$" not in whole and not is_prose(whole) \
            and not latex_spans(whole):  # the response is nothing but an answer: "\\frac{10}{9}", "(2,4)"
        answer = whole.rstrip(".")
        start = text.index(whole[0])
        return Statement(answer, start, len(text), "whole", tuple(split_alternatives(answer)))
    cut = len(text) if closed else is_finished(original)
    if cut is None:
        if _last_candidate(text) is None:
            return None
        return "no answer found: the response ends mid-statement (cut off at the token limit?)"
    text = text[:cut]
    found = _last_candidate(text, new_sentence=True)
    if found is not None and found[2] == "last_number" and strictness != "lenient":
        spans = [sp for sp in latex_spans(text) if not _is_name(text[sp[2]:sp[3]])]
        found = (_span_answer(text, spans[-1]), spans[-1][1], "latex") if spans else None
    if found is None:
        return None
    answer, end, source = found
    start = max(0, end - len(answer))
    if source == "latex":
        start = max(0, text.rfind(answer, 0, end))
    a, b = _clause_bounds(text, start, end)
    values = _sentence_values(text, _masked(text[:b]) + text[b:], a, b)
    return Statement(answer, start, end, source, tuple(values) if values else tuple(split_alternatives(answer)),
                     bool(values))
