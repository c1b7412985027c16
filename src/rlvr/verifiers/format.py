"""A format verifier: does the completion have the shape the prompt asked for?

Checks, each switchable:

* ``think``: one ``<think>...</think>`` block with non-blank content, closed,
  before any ``<answer>`` (``think_open_optional`` accepts a missing opening tag,
  for chat templates that put ``<think>`` in the prompt);
* ``answer``: one ``<answer>...</answer>`` block with non-blank content, and
  (``strict``) nothing but whitespace after it;
* ``boxed``: a non-empty ``\\boxed{...}`` (inside the answer block when there is one).

The reference is ignored (any value).  The verdict is 1.0 when every enabled
check passes; the reason lists the ones that failed; ``extracted`` is the answer
block's content (or the boxed content).  Never raises.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.numeric import extract_final_answer

__all__ = ["format_verifier", "check_format"]

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


def check_format(text: Any, *, think: bool = True, answer: bool = True, boxed: bool = False,
                 strict: bool = True, think_open_optional: bool = False) -> tuple[list[str], str | None]:
    """The failed checks (empty when the format is right) and the extracted answer."""
    if not isinstance(text, str):
        return [f"completion is not a string ({type(text).__name__})"], None
    problems: list[str] = []
    answers = list(_ANSWER_RE.finditer(text))
    answer_start = answers[0].start() if answers else len(text)
    if think:
        opens, closes = text.count(_THINK_OPEN), text.count(_THINK_CLOSE)
        if closes != 1 or opens > 1 or (opens == 0 and not think_open_optional):
            problems.append(f"expected one <think>...</think> block (found {opens} open, {closes} close)")
        else:
            start = text.find(_THINK_OPEN) + len(_THINK_OPEN) if opens else 0
            end = text.find(_THINK_CLOSE)
            if end < start or not text[start:end].strip():
                problems.append("empty or malformed <think> block")
            elif end > answer_start:
                problems.append("<think> block must come before <answer>")
    extracted = None
    if answer:
        if len(answers) != 1 or text.count("<answer>") != 1:
            problems.append(f"expected one <answer>...</answer> block (found {len(answers)})")
        else:
            extracted = answers[0].group(1).strip()
            if not extracted:
                problems.append("empty <answer> block")
            elif strict and text[answers[0].end():].strip():
                problems.append("text after </answer>")
    if boxed:
        box = extract_final_answer(extracted if extracted is not None else text, "boxed")
        if box is None:
            problems.append("no non-empty \\boxed{...}")
        elif extracted is None:
            extracted = box
    return problems, extracted


@register_verifier("format")
def format_verifier(think: bool = True, answer: bool = True, boxed: bool = False, strict: bool = True,
                    think_open_optional: bool = False, max_chars: int = 1_000_000) -> Verifier:
    """A verifier scoring 1.0 when the completion has the required tags (see the module doc).

    Completions longer than ``max_chars`` fail without being scanned further.
    """
    if not (think or answer or boxed):
        raise ValueError("format verifier: enable at least one of think, answer, boxed")

    def verify(completion: str, reference: Any = None) -> Verdict:
        try:
            if isinstance(completion, str) and len(completion) > max_chars:
                return Verdict(0.0, None, f"completion too long ({len(completion)} chars > {max_chars})")
            problems, extracted = check_format(completion, think=think, answer=answer, boxed=boxed,
                                               strict=strict, think_open_optional=think_open_optional)
            if problems:
                return Verdict(0.0, extracted, "; ".join(problems))
            return Verdict(1.0, extracted, "format ok")
        except Exception as e:  # noqa: BLE001 - a reward must never crash training
            return Verdict(0.0, None, f"verifier error: {type(e).__name__}: {str(e)[:200]}")

    return verify
