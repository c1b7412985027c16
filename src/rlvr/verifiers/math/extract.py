"""Step 1 of the math verifier: find the final answer in a free-form completion.

**Reasoning is never the answer.**  Everything up to the end of the last thought
block is blanked before anything is read: a boxed guess inside the reasoning neither
counts nor hedges.  The blocks of every model family are recognised
(:data:`THOUGHT_BLOCKS`: ``<think>``, ``<thinking>``, ``<reasoning>``,
``<|begin_of_thought|>``, ``\u25c1think\u25b7``, ``<Thought>`` and the harmony ``analysis``
channel); chat templates that open the block in the prompt leave only the closing
tag, which ends the block all the same (not for harmony, whose ``<|end|>`` also ends
ordinary messages).  A thought block that is opened and never closed leaves no
answer (the response was cut off while thinking).  When what follows holds an
``<answer>...</answer>`` element, only the last one is read.

:func:`extract_answer` then looks, in order, for

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed; empty and
   ``\\phantom`` boxes are not answers), unless a "Final Answer:" sentence follows it;
2. "final answer is X" / "Final Answer: X";
3. a GSM8K ``#### X`` line;
4. "the answer is X" / "Answer: X"                     (``standard`` and ``lenient``);
5. the last LaTeX span (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) taken
   whole, skipping spans that only name something (``$n$``)  (``standard`` and ``lenient``);
6. a bare number written after that span, or the last one (``lenient`` only), never
   from inside a LaTeX span or between ``$`` signs.

In a final-answer sentence (2-4) the whole sentence is the answer when it is math;
when it is prose ("The largest $n$ is 34") its last span or number is.

**Self-correction or hedge.**  (What the verifier pays for is decided by :mod:`.choose`, which
adds to the rules below that the answer may change only once, that answer sentences after
the last box are statements too, that alternatives and truncated responses earn nothing;
:func:`extract_answer` keeps the rules below and serves references and callers that only
want the answer text.)  Several boxed answers are read as attempts:

* a *correction marker* between two boxes ("wait", "actually", "correction", "on
  second thought", "let me recheck", "hmm", "that's wrong", "I made a mistake"...)
  ends an attempt: every box before the last marker that precedes the last box is
  discarded, and the response is judged on its *final attempt* only;
* within the final attempt, several boxes are one answer offered several ways:
  they must all be right (``\\boxed{15\\frac{39}{40}}``, or ``\\boxed{\\frac{639}{40}}``),
  else the response is a *hedge* and is refused (``\\boxed{3} or \\boxed{4}``; two
  boxes with no marker between them), unless the reference is a list they spell
  out together (``\\boxed{2}`` and ``\\boxed{3}`` for ``2, 3``);
* an explicit *retraction* after the last answer ("... wait, that's wrong", "I made
  a mistake", "scratch that", "is not the answer") with no answer after it leaves
  nothing: refused.

So a list of guesses separated by "wait" is judged on its last guess alone and
earns exactly what that one guess earns; a list without markers is a hedge.  A
hedge word inside one answer ("3 or 4") is refused by the verifier.  Every regular
expression here is linear-time (no nested unbounded quantifiers), so megabyte
inputs cannot make extraction hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STRICTNESS", "Extraction", "boxed_spans", "latex_spans", "is_prose", "extract_answer", "find_hedge",
           "find_retraction", "answer_region", "outermost", "THOUGHT_BLOCKS", "thought_blocks", "open_block"]

STRICTNESS = ("strict", "standard", "lenient")
"""Extraction levels, from fewest to most accepted answer markers."""

_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FINAL_RE = re.compile(r"final\s+answer\s*(?:is|:|=)\s*:?", re.IGNORECASE)
_GSM8K_RE = re.compile(r"^\s*####\s*", re.MULTILINE)
_ANSWER_RE = re.compile(r"\b(?:the\s+answer\s+is|answer\s*:)\s*:?", re.IGNORECASE)
_NUMBER_RE = re.compile(
    r"(?<![\w.])[-\u2212\u2013]?(?:\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\d,])(?:\d+,\d{2}|0,\d+)(?![\d,])|\d+)"
    r"(?:\.\d+)?(?:\s*/\s*\d+)?%?"
    r"|(?<![\w.])[-\u2212\u2013]?\.\d+"
)
# Words that hedge between alternatives inside one answer ("3 or 4", "either 2 ...").
_HEDGE_RE = re.compile(r"(?:\\text\s*\{\s*|\b)(?:or|either|maybe|possibly|perhaps)\b", re.IGNORECASE)
# Phrases that take back an answer given earlier (after the last answer: it is refused).
_RETRACT_RE = re.compile(
    r"\b(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake|an\s+error)"
    r"|\b(?:wait|hold\s+on|hmm|oops)\b[ ,.!:;-]{0,4}(?:no\b|that\b[^.\n]{0,30}\b(?:wrong|incorrect|mistake))"
    r"|\bi\s+made\s+an?\s+(?:mistake|error)|\bi\s+was\s+wrong\b"
    r"|\bi\s+(?:misread|misunderstood|miscalculated|miscounted|mis-?computed)\b"
    r"|\b(?:does\s*n[o']?t|doesn't)\s+(?:look|seem)\s+right"
    r"|\bscratch\s+that\b|\bnever\s?mind\b"
    r"|\bis\s+not\s+(?:the|my)\s+(?:final\s+)?answer",
    re.IGNORECASE,
)
# Markers that end an attempt between two boxed answers (broader: a box before one is
# discarded, so a marker can only ever narrow the judged answer to the last box).
_CORRECTION_RE = re.compile(
    _RETRACT_RE.pattern
    + r"|\b(?:wait|hold\s+on|hmm+|oops|actually|correction|on\s+second\s+thought|instead|mistake|error)\b"
    r"|\blet\s+me\s+(?:re-?\w+|double[- ]check|check\s+again|try\s+again|start\s+over)\b"
    r"|\b(?:re-?(?:checking|computing|calculating|doing|considering|examining|evaluating|working))\b",
    re.IGNORECASE,
)
THOUGHT_BLOCKS: tuple[tuple[str, ...], ...] = (
    ("<think>", "</think>"),  # DeepSeek-R1, Qwen3, QwQ
    ("<thinking>", "</thinking>"),
    ("<reasoning>", "</reasoning>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),  # OpenThoughts, Bespoke-Stratos, Sky-T1
    ("\u25c1think\u25b7", "\u25c1/think\u25b7"),  # Kimi k1.5 / VL-Thinking: \u25c1think\u25b7 ... \u25c1/think\u25b7
    ("<Thought>", "</Thought>"),  # Marco-o1
    ("<|channel|>analysis<|message|>", "<|end|>", "paired"),  # gpt-oss harmony: the analysis channel
)
"""Thought-block delimiters ``(open, close)`` of each model family, matched case-insensitively
(``<think >`` too).  A third element ``"paired"`` means a closing tag counts only after its
opening tag (harmony's ``<|end|>`` also ends the final message)."""


def thought_blocks(blocks=THOUGHT_BLOCKS) -> tuple[tuple[str, str, bool], ...]:
    """``blocks`` checked and normalised to ``(open, close, paired)`` (a verifier option: lists from
    a config are accepted); raises ValueError naming the bad entry."""
    if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__iter__"):
        raise ValueError(f"thought_blocks must be a list of [open, close] pairs, got {blocks!r}")
    out = []
    for b in blocks:
        items = list(b) if isinstance(b, (list, tuple)) else None
        if not items or len(items) not in (2, 3) or not all(isinstance(x, str) and x.strip() for x in items[:2]) \
                or (len(items) == 3 and items[2] not in ("paired", True, False)):
            raise ValueError(f"thought_blocks entry must be [open, close] or [open, close, 'paired'], got {b!r}")
        out.append((items[0], items[1], len(items) == 3 and items[2] in ("paired", True)))
    return tuple(out)


_DEFAULT_BLOCKS = thought_blocks(THOUGHT_BLOCKS)


def _needles(spec: tuple[tuple[str, str, bool], ...]) -> list[str]:
    """Lower-case substrings every delimiter of ``spec`` contains (``<think`` for ``<think >`` too)."""
    return [t.lower()[:-1] if re.fullmatch(r"</?[A-Za-z][\w-]*>", t) else t.lower() for b in spec for t in b[:2]]


def _tag_pattern(tag: str) -> str:
    """A delimiter as a regex: literal, and ``<name>`` also as ``<name >``."""
    m = re.fullmatch(r"(</?)([A-Za-z][\w-]*)>", tag)
    if m:
        return re.escape(m.group(1) + m.group(2)) + r"\s*>"
    return re.escape(tag)


_BLOCK_CACHE: dict[tuple, tuple[re.Pattern[str], list[tuple[int, bool, bool]], list[str]]] = {}


def _block_regex(blocks: tuple[tuple[str, str, bool], ...]) -> tuple[re.Pattern[str], list[tuple[int, bool, bool]],
                                                                     list[str]]:
    """One alternation over every delimiter (group ``k`` tells ``(block index, is_close, paired)``), and
    the substrings (:func:`_needles`) without which no delimiter can be present."""
    hit = _BLOCK_CACHE.get(blocks)
    if hit is None:
        parts, kinds = [], []
        for i, (op, cl, paired) in enumerate(blocks):
            parts += [f"({_tag_pattern(op)})", f"({_tag_pattern(cl)})"]
            kinds += [(i, False, paired), (i, True, paired)]
        hit = (re.compile("|".join(parts), re.IGNORECASE), kinds, _needles(blocks))
        if len(_BLOCK_CACHE) < 64:
            _BLOCK_CACHE[blocks] = hit
    return hit

_LINE_END_RE = re.compile(r"\n|(?<=[^\d\s])\.\s|\.\s*$|\.\s+[A-Z]")
_PHANTOM_RE = re.compile(r"\\[hv]?phantom\s*\{[^{}]*\}|\\[,;:! ]|\\q?quad|~")
_OPEN_RE = re.compile(r"\$\$|(?<!\\)\$|\\\(|\\\[|\\begin\{(?:align|equation|gather|eqnarray|multline)\*?\}")
_ASY_RE = re.compile(r"\[asy\].*?\[/asy\]", re.DOTALL)
_ROW_SPLIT_RE = re.compile(r"\\\\(?:\[[^\]]*\])?")
_LIST_GLUE_RE = re.compile(r"[\s,;.\"'*\\]*(?:(?:\b(?:and|or)\b|[,;])[\s,;.\"'*\\]*)+", re.IGNORECASE)
_SENTENCE_GAP_RE = re.compile(r"[.!?](?:\s|$)|\n")
_CLOSERS = {"$$": ("$$", True), "$": ("$", False), "\\(": ("\\)", False), "\\[": ("\\]", True)}
_NAME_RE = re.compile(r"(?:\\(?:math(?:bf|rm|it|cal)|overline|vec|text|operatorname)\s*\{[A-Za-z]{1,12}\}|[A-Za-z]{1,12}|[A-Za-z]\([a-z]\))(?:_\{?\w{1,3}\}?)?(?:'+)?")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{[^{}]*\}")
_PROSE_RE = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")


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
    boxes: tuple[str, ...] = ()
    """Every kept outermost boxed answer in order (the last is ``answer``): when the
    reference is a list, several boxes may spell it out together."""


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


def outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans of :func:`boxed_spans` not inside another one (a box inside a box is part
    of the answer), in order.  Brace-matched spans nest properly, so one pass in start
    order suffices: a span is inner exactly when it starts before the last kept span ends."""
    out: list[tuple[int, int]] = []
    for sp in spans:
        if not out or sp[0] > out[-1][1]:
            out.append(sp)
    return out


def _rest_of_line(text: str, start: int, limit: int = 300) -> tuple[str, int]:
    """The answer text after a marker: up to the end of the line or sentence."""
    chunk = text[start:start + limit]
    m = _LINE_END_RE.search(chunk)
    piece = chunk[: m.start()] if m else chunk
    return piece.strip().strip("*:").strip(), start + len(piece)


def _last_match(regex: re.Pattern[str], text: str, start: int = 0) -> re.Match[str] | None:
    last = None
    for last in regex.finditer(text, start):
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


def _scan_blocks(text: str, blocks) -> tuple[int, str | None]:
    """``(end of the last thought block, opening tag of a block left open or None)``: one pass."""
    start = 0
    spec = _DEFAULT_BLOCKS if blocks is THOUGHT_BLOCKS else thought_blocks(blocks)
    if not spec:
        return 0, None
    regex, kinds, needles = _block_regex(spec)
    low = text.lower()
    if not any(needle in low for needle in needles):
        return 0, None  # no delimiter anywhere (substring tests: cheaper than the regex on long text)
    inside: int | None = None  # index of the open block
    for m in regex.finditer(text):
        block, is_close, paired = kinds[m.lastindex - 1]
        if inside is None:
            if not is_close:
                inside = block
            elif not paired:  # the template opened the block in the prompt
                start = m.end()
        elif is_close and block == inside:
            inside, start = None, m.end()
    return start, (spec[inside][0] if inside is not None else None)


def open_block(text: str, blocks=THOUGHT_BLOCKS) -> str | None:
    """The opening tag of a thought block ``text`` leaves open (the response was cut off while thinking), or None."""
    return _scan_blocks(text, blocks)[1]


def answer_region(text: str, blocks=THOUGHT_BLOCKS) -> tuple[int, int] | None:
    """``(start, end)`` of the part of ``text`` that may state the final answer, or None.

    The part after the end of the last thought block (``blocks``: see :data:`THOUGHT_BLOCKS`);
    None when a thought block is opened and never closed.  Inside it, the content of the
    last ``<answer>...</answer>`` element when there is one.  One pass over the delimiters.
    """
    start, inside = _scan_blocks(text, blocks)
    if inside is not None:
        return None  # the reasoning never ended: no final answer
    end = len(text)
    if "</answer" in text or "</ANSWER" in text:  # rfind, not a regex: linear whatever the tags
        low = text.lower()
        close = low.rfind("</answer>", start)
        opening = low.rfind("<answer>", start, close) if close >= 0 else -1
        if opening >= 0:
            start, end = opening + len("<answer>"), close
    return start, end


def _is_phantom_or_empty(content: str) -> bool:
    """True for a box that shows nothing: ``\\boxed{}``, ``\\boxed{\\phantom{2}}``, ``\\boxed{\\,}``."""
    if "\\" not in content and "~" not in content and content.strip(" \t\n{}"):
        return False  # the common case, without a regex
    t = _PHANTOM_RE.sub("", content)
    return not _squash(t).strip("{}")


def latex_spans(text: str) -> list[tuple[int, int, int, int]]:
    """``(start, end, content_start, content_end)`` of every math span, in order.

    Spans are ``$$...$$`` and ``\\[...\\]`` (may cross lines), ``$...$`` and ``\\(...\\)``
    (one line only, as math-verify reads them).  ``\\$`` is a dollar sign, not a
    delimiter.  Each search runs forward from the last span, and a delimiter kind
    with no closing match left is never searched again, so this is linear-time.
    """
    spans: list[tuple[int, int, int, int]] = []
    exhausted: set[str] = set()
    i, n = 0, len(text)
    while i < n:
        j = _OPEN_RE.search(text, i)
        if j is None:
            break
        tok, start = j.group(), j.start()
        close, multiline = _CLOSERS[tok] if tok in _CLOSERS else ("\\end" + tok[len("\\begin"):], True)
        if close in exhausted:
            i = j.end()
            continue
        k = _find_unescaped(text, close, j.end())
        if k < 0:
            exhausted.add(close)
            i = j.end()
            continue
        if not multiline and "\n" in text[j.end():k]:
            i = j.end() if tok != "$" else text.index("\n", j.end())  # a lone $ (currency) ends at the line
            continue
        if text[j.end():k].strip():
            spans.append((start, k + len(close), j.end(), k))
        i = k + len(close)
    return spans


def _find_unescaped(text: str, close: str, start: int) -> int:
    while True:
        k = text.find(close, start)
        if k <= 0 or close.startswith("\\") or text[k - 1] != "\\":
            return k
        start = k + 1


def _masked(text: str) -> str:
    """``text`` with every ``$``-paired region (any length, lines included) and math span blanked."""
    out = _blank(text, [(s, e) for s, e, _, _ in latex_spans(text)])
    dollars = [m.start() for m in re.finditer(r"(?<!\\)\$", out)]
    out = _blank(out, [(a, b + 1) for a, b in zip(dollars[0::2], dollars[1::2]) if out.find("\n\n", a, b) < 0])
    return _blank(out, _paren_spans(out))  # \\( ... \\) and \\[ ... \\] broken over lines


_PAREN_TOKEN_RE = re.compile(r"\\[()\[\]]")


def _paren_spans(text: str) -> list[tuple[int, int]]:
    """``\\( ... \\)`` and ``\\[ ... \\]`` regions, each opener closed by the first closer of its
    kind after it (as a lazy regex would match them), in one pass: an opener with no closer of
    its kind after it is skipped, so unclosed openers cost nothing."""
    tokens = [(m.start(), m.group()[1]) for m in _PAREN_TOKEN_RE.finditer(text)]
    last_close = {"(": -1, "[": -1}
    for pos, c in tokens:
        if c in ")]":
            last_close["(" if c == ")" else "["] = pos
    spans: list[tuple[int, int]] = []
    open_kind, open_at = None, 0
    for pos, c in tokens:
        if open_kind is None:
            if c in "([" and last_close[c] > pos:
                open_kind, open_at = c, pos
        elif (open_kind, c) in (("(", ")"), ("[", "]")):
            spans.append((open_at, pos + 2))
            open_kind = None
    return spans


def _blank(text: str, ranges: list[tuple[int, int]]) -> str:
    """``text`` with the ordered, disjoint ``ranges`` replaced by spaces (one pass: linear)."""
    if not ranges:
        return text
    parts, last = [], 0
    for a, b in ranges:
        parts += [text[last:a], " " * (b - a)]
        last = b
    parts.append(text[last:])
    return "".join(parts)


def _is_name(content: str) -> bool:
    """A span that only names something (``$n$``, ``$ABCD$``, ``$\\mathbf{a}$``, ``$f(x)$``)."""
    return bool(_NAME_RE.fullmatch(content.strip()))


def is_prose(s: str) -> bool:
    """True when ``s`` reads as a sentence (two words in a row outside ``\\text{}``)."""
    t = _TEXT_WRAP_RE.sub(" ", s)
    t = re.sub(r"\\[a-zA-Z]+", " ", t)
    return bool(_PROSE_RE.search(t))


def _span_answer(text: str, span: tuple[int, int, int, int]) -> str:
    """A span's content; for an ``align``-style environment, its last row."""
    content = text[span[2]:span[3]]
    if text.startswith("\\begin", span[0]):
        rows = [r.replace("&", " ").strip() for r in _ROW_SPLIT_RE.split(content)]
        rows = [r for r in rows if r.strip(" .,;")]
        content = rows[-1] if rows else ""
    return content.strip()


def _last_candidate(text: str, offset: int = 0, new_sentence: bool = False) -> tuple[str, int, str] | None:
    """The last math span (one that is not just a name) or a bare number written after it
    (with ``new_sentence``, only in a later sentence than the span's).

    Returns ``(answer, end offset, source)``; numbers inside math spans or between
    ``$`` signs are never taken.
    """
    every = [sp for sp in latex_spans(text) if not _is_phantom_or_empty(_BOX_OPEN_RE.sub("", text[sp[2]:sp[3]]))]
    spans = [sp for sp in every if not _is_name(text[sp[2]:sp[3]])] or every[-1:]
    last_span = spans[-1] if spans else None
    masked = _masked(text)
    num = _last_match(_NUMBER_RE, masked, last_span[1] if last_span else 0)
    if num is not None and last_span is not None and new_sentence \
            and not text[last_span[2]:last_span[3]].rstrip().endswith((".", "!", "?")) \
            and not _SENTENCE_GAP_RE.search(masked, last_span[1], num.start()):
        num = None
    if num is not None:
        return num.group(), offset + num.end(), "last_number"
    if last_span is not None:
        return _span_answer(text, last_span), offset + last_span[1], "latex"
    return None


def _from_sentence(piece: str, start: int) -> tuple[str, int] | None:
    """The answer inside a final-answer sentence: the whole of it when it is math,
    else its last math span or number (``The largest $n$ is 34`` -> ``34``)."""
    piece = piece.strip()
    if not piece:
        return None
    spans = latex_spans(piece)
    if len(spans) == 1 and spans[0][0] == 0 and not piece[spans[0][1]:].strip(" .,;:"):
        return piece[spans[0][2]:spans[0][3]].strip(), start + len(piece)
    if len(spans) > 1:  # "$12$ and $13$": one list answer
        rest = piece
        for a, b, _, _ in reversed(spans):
            rest = rest[:a] + " " + rest[b:]
        if _LIST_GLUE_RE.fullmatch(rest):
            return ", ".join(piece[c:d].strip() for _, _, c, d in spans), start + len(piece)
    if not spans and not is_prose(piece):
        return piece, start + len(piece)
    found = _last_candidate(piece)
    if found is not None:
        return found[0], start + found[1]
    return piece, start + len(piece)  # a word answer ("Monday")


def extract_answer(text: str, strictness: str = "lenient", blocks=THOUGHT_BLOCKS) -> Extraction:
    """The final answer of ``text`` at the given strictness (see the module docstring).

    A non-string or empty ``text`` gives ``Extraction(None, "none")``.  Earlier boxed
    answers that differ from the last one are returned in ``others`` (a hedge unless
    they are all right, or the reference is a list they spell out together).
    """
    if strictness not in STRICTNESS:
        raise ValueError(f"unknown strictness {strictness!r}; choose one of {', '.join(STRICTNESS)}")
    if not isinstance(text, str) or not text.strip():
        return Extraction(None, "none")
    region = answer_region(text, blocks)
    if region is None:
        return Extraction(None, "none", "no answer found: unfinished <think> block")
    if region != (0, len(text)):  # blank the reasoning (same length: offsets stay valid)
        a, b = region
        text = " " * a + text[a:b] + " " * (len(text) - b)
        if not text.strip():
            return Extraction(None, "none")
    if "[asy]" in text:  # drawing code is no answer (same length: offsets stay valid)
        text = _ASY_RE.sub(lambda m: " " * (m.end() - m.start()), text)

    spans = [(s, e) for s, e in boxed_spans(text) if not _is_phantom_or_empty(text[s:e])]
    final = _last_match(_FINAL_RE, text)
    if spans and not (final is not None and final.start() > spans[-1][1]):
        outer = outermost(spans)
        # The final attempt: boxes after the last correction marker before the last box
        # ("\\boxed{3} wait, no ... \\boxed{4}" is judged on 4 alone).
        cut = 0
        if len(outer) > 1:
            for m in _CORRECTION_RE.finditer(text, outer[0][1], outer[-1][0]):
                cut = m.end()
        kept = [(s, e) for s, e in outer[:-1] if s >= cut]
        last = text[outer[-1][0]:outer[-1][1]].strip()
        others = tuple(dict.fromkeys(a for a in (text[s:e].strip() for s, e in kept) if _squash(a) != _squash(last)))
        every = tuple(text[s:e].strip() for s, e in kept) + (last,)
        return Extraction(last, "boxed", None, outer[-1][1] + 1, others, every)

    markers = [(_FINAL_RE, "final_answer"), (_GSM8K_RE, "gsm8k")]
    if strictness != "strict":
        markers.append((_ANSWER_RE, "answer_is"))
    for regex, source in markers:
        m = _last_match(regex, text)
        if m:
            piece, end = _rest_of_line(text, m.end())
            found = _from_sentence(piece, m.end()) if source != "gsm8k" else (piece, end)
            if found and found[0]:
                return Extraction(found[0], source, None, max(end, found[1]))

    if strictness != "strict":
        whole = text.strip()
        if len(whole) <= 300 and "\n" not in whole and "$" not in whole and not is_prose(whole) \
                and not latex_spans(whole):  # the completion is nothing but an answer: "\\frac{10}{9}", "(2,4)"
            return Extraction(whole.rstrip("."), "whole", None, len(text))
        found = _last_candidate(text, new_sentence=True)
        if found is not None and (found[2] == "latex" or strictness == "lenient"):
            return Extraction(found[0], found[2], None, found[1])
        if found is not None:  # standard: a number after the last span does not count; the span does
            spans_ = [sp for sp in latex_spans(text) if not _is_name(text[sp[2]:sp[3]])]
            if spans_:
                return Extraction(_span_answer(text, spans_[-1]), "latex", None, spans_[-1][1])
    return Extraction(None, "none")
