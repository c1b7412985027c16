"""The ``reasoning_gym`` verifier: a reasoning-gym dataset's own ``score_answer`` on the extracted answer.

The reference is the JSON record written by :mod:`rlvr.tasks.procedural`
(``{"dataset", "answer", "metadata"}``).  The answer is the content of the last
``<answer>...</answer>`` block, else of the last ``\\boxed{}``, else the last
non-empty line; reasoning-gym scores it (1.0 correct, partial credit for some
datasets) and a score of at least ``threshold`` counts as correct.
"""

from __future__ import annotations

import json
import re

from rlvr.types import Verdict
from rlvr.verifiers.base import Verifier, register_verifier
from rlvr.verifiers.numeric import extract_final_answer

__all__ = ["extract_tagged_answer", "reasoning_gym_verifier"]

_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def extract_tagged_answer(text: str) -> str | None:
    """The last ``<answer>`` block's content, else the last ``\\boxed{}``'s, else the last non-empty line."""
    tags = _TAG.findall(text)
    if tags:
        return tags[-1].strip()
    if "\\boxed" in text:
        boxed = extract_final_answer(text, mode="boxed")
        if boxed is not None:
            return boxed
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


@register_verifier("reasoning_gym", doc="a reasoning-gym dataset's own scorer (task.name=reasoning_gym)")
def reasoning_gym_verifier(threshold: float = 1.0, require_tags: bool = False) -> Verifier:
    """Score with reasoning-gym; ``require_tags``: only an ``<answer>`` block counts as an answer."""

    def verify(completion: str, reference: str) -> Verdict:
        try:
            ref = json.loads(reference)
            name = ref["dataset"]
        except (json.JSONDecodeError, TypeError, KeyError):
            return Verdict(0.0, None, reason="reference is not a reasoning_gym record (use task.name=reasoning_gym)")
        if require_tags:
            tags = _TAG.findall(completion)
            answer = tags[-1].strip() if tags else None
        else:
            answer = extract_tagged_answer(completion)
        if answer is None:
            return Verdict(0.0, None, reason="no answer found")
        import reasoning_gym  # noqa: PLC0415 (optional dependency)

        score = float(reasoning_gym.get_score_answer_fn(name)(answer, {"answer": ref["answer"],
                                                                        "metadata": ref["metadata"]}))
        ok = score >= threshold
        return Verdict(1.0 if ok else 0.0, answer, reason="correct" if ok else f"wrong (score {score:.2f})")

    return verify
