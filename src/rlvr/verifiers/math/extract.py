"""Step 1 of the math verifier: find the final answer in a free-form completion.

:func:`extract_answer` looks, in order, for

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed);
2. "final answer is X" / "Final Answer: X";
3. a GSM8K ``#### X`` line;
4. "the answer is X" / "Answer: X"                     (``standard`` and ``lenient``);
5. the last number in the text                         (``lenient`` only).

``strict`` accepts only 1-3.  It also rejects answers that are *hedged* (two
boxed answers that are not all equal, "3 or 4") or *retracted* later in the text ("... wait,
that's wrong").  Every regular expression here is linear-time (no nested
unbounded quantifiers), so megabyte inputs cannot make extraction hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STRICTNESS", "Extraction", "boxed_spans", "extract_answer", "find_hedge", "find_retraction"]

STRICTNESS = ("strict", "standard", "lenient")
"""Extraction levels, from fewest to most accepted answer markers."""

_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FINAL_RE = re.compile(r"final\s+answer\s*(?:is|:|=)\s*:?", re.IGNORECASE)
_GSM8K_RE = re.compile(r"^\s*####\s*", re.MULTILINE)
_ANSWER_RE = re.compile(r"\b(?:the\s+answer\s+is|answer\s*:)\s*:?", re.IGNORECASE)
_NUMBER_RE = re.compile(
    r"(?<![\w.])[-\u2212]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?%?"
    r"|(?<![\w.])[-\u2212]?\.\d+"
)
# Words that hedge between alternatives inside one answer ("3 or 4", "either 2 ...").
_HEDGE_RE = re.compile(r"(?:\\text\s*\{\s*|\b)(?:or|either|maybe|possibly|perhaps)\b", re.IGNORECASE)
# Phrases that take back an answer given earlier.
_RETRACT_RE = re.compile(
    r"\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct))"
    r"|\b(?:wait|hold\s+on|hmm|oops)\b[ ,.!:;-]{0,4}(?:no\b|that\b[^.\n]{0,30}\b(?:wrong|incorrect|mistake))"
    r"|\bi\s+made\s+an?\s+(?:mistake|error)"
    r"|\bscratch\s+that\b|\bnever\s?mind\b"
    r"|\bis\s+not\s+(?:the|my)\s+(?:final\s+)?answer",
    re.IGNORECASE,
)
_LINE_END_RE = re.compile(r"\n|(?<=[^\d\s])\.\s|\.\s*$|\.\s+[A-Z]")


@dataclass(frozen=True)
class Extraction:
    """What :func:`extract_answer` found."""

    answer: str | None
    """The raw answer text (LaTeX or plain), or None when nothing usable was found."""
    source: str
    """Which marker produced it: boxed, final_answer, gsm8k, answer_is, last_number or none."""
    problem: str | None = None
    """Why the answer must be rejected even if it is right (hedged, retracted), else None."""
    end: int = 0
    """Offset in the completion just past the answer (where a retraction would start)."""
    others: tuple[str, ...] = ()
    """Earlier boxed answers that differ from ``answer`` as strings; the verifier
    requires all of them to be equal to the reference (else the answer is hedged)."""


def boxed_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the content of every closed ``\\boxed{}``/``\\fbox{}``, in order.

    One linear pass over the braces; escaped braces (``\\{``) are skipped.
    """
    opens = {m.end() - 1 for m in _BOX_OPEN_RE.finditer(text)}
    if not opens:
        return []
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    i, n = min(opens), len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            start = stack.pop()
            if start in opens:
                spans.append((start + 1, i))
        i += 1
    spans.sort()
    return spans


def _rest_of_line(text: str, start: int, limit: int = 300) -> tuple[str, int]:
    """The answer text after a marker: up to the end of the line or sentence."""
    chunk = text[start:start + limit]
    m = _LINE_END_RE.search(chunk)
    piece = chunk[: m.start()] if m else chunk
    return piece.strip().strip("*:").strip(), start + len(piece)


def _last_match(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in regex.finditer(text):
        pass
    return last


def _squash(s: str) -> str:
    return re.sub(r"\s+|\\[,;:! ]|\\left|\\right|\$", "", s)


def find_hedge(answer: str) -> str | None:
    """Why ``answer`` hedges between alternatives ("3 or 4"), or None."""
    m = _HEDGE_RE.search(answer)
    if not m:
        return None
    word = m.group().split("{")[-1].strip()
    return f"hedged answer ({word!r} in {answer[:60]!r})"


def find_retraction(text: str, start: int) -> str | None:
    """A phrase after ``start`` that takes the answer back ("that's wrong"), or None."""
    m = _RETRACT_RE.search(text, start)
    return f"answer retracted later ({m.group()!r})" if m else None


def extract_answer(text: str, strictness: str = "lenient") -> Extraction:
    """The final answer of ``text`` at the given strictness (see the module docstring).

    A non-string or empty ``text`` gives ``Extraction(None, "none")``.  Two boxed
    answers that differ (after removing spaces) mark the result as hedged.
    """
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}; choose one of {', '.join(STRICTNESS)}")
    if not isinstance(text, str) or not text.strip():
        return Extraction(None, "none")

    spans = [(s, e) for s, e in boxed_spans(text) if text[s:e].strip()]
    if spans:
        # Keep only outermost boxes (a box inside a box is part of the answer).
        outer = [sp for sp in spans if not any(o[0] < sp[0] and sp[1] < o[1] for o in spans)]
        # An earlier box taken back before the next one ("\\boxed{3} wait, no ... \\boxed{4}") is no hedge.
        kept = [(s, e) for i, (s, e) in enumerate(outer[:-1]) if not _RETRACT_RE.search(text, e, outer[i + 1][0])]
        last = text[outer[-1][0]:outer[-1][1]].strip()
        others = tuple(dict.fromkeys(a for a in (text[s:e].strip() for s, e in kept) if _squash(a) != _squash(last)))
        return Extraction(last, "boxed", None, outer[-1][1] + 1, others)

    markers = [(_FINAL_RE, "final_answer"), (_GSM8K_RE, "gsm8k")]
    if strictness != "strict":
        markers.append((_ANSWER_RE, "answer_is"))
    for regex, source in markers:
        m = _last_match(regex, text)
        if m:
            answer, end = _rest_of_line(text, m.end())
            if answer:
                return Extraction(answer, source, None, end)

    if strictness == "lenient":
        m = _last_match(_NUMBER_RE, text)
        if m:
            return Extraction(m.group(), "last_number", None, m.end())
    return Extraction(None, "none")
