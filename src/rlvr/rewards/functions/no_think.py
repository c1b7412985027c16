"""The ``no_think`` reward function: AdaptThink's bonus for answering without thinking."""

from __future__ import annotations

import re
from typing import Callable

from rlvr.rewards.rubric import reward_function

__all__ = ["no_think_reward", "thinks"]

_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def thinks(completion: str, require_tag: bool = False) -> bool:
    """Whether ``completion`` thinks: it has a ``<think>`` block with non-blank content, or text before a closing
    ``</think>`` (a chat template that opens ``<think>`` in the prompt), or an unclosed ``<think>``.  With
    ``require_tag`` only a completion that starts with ``</think>`` (after blanks) counts as not thinking."""
    text = completion or ""
    if require_tag:
        return not text.lstrip().startswith("</think>")
    if any(b.strip() for b in _BLOCK.findall(text)):
        return True
    if "</think>" in text and text.split("</think>", 1)[0].replace("<think>", "").strip():
        return True
    return text.count("<think>") > text.count("</think>")


@reward_function("no_think", tags={"bounded"})
def no_think_reward(require_tag: bool = False) -> Callable[..., float]:
    """AdaptThink's NoThinking bonus: 1 when the response does not think, else 0; the weight is AdaptThink's delta.

    Zhang et al. 2025 ("AdaptThink: Reasoning Models Can Learn When to Think", arXiv 2505.13417, Eq. 3): maximise
    ``E[1(y_1 = </think>) * delta + R(x, y) - R_ref(x)]``, i.e. the verifier's reward plus ``delta`` for a response
    whose thinking is empty, so the policy answers directly where that keeps it correct and thinks where it must
    (``R_ref(x)``, the reference model's mean accuracy on ``x``, is constant within a group and cancels in a
    group-relative advantage).  As a rubric: ``[verifier, {kind: no_think, weight: 0.05}]``.  AdaptThink also
    samples half of each group with ``</think>`` forced (importance sampling toward the rarer mode); that is not
    built here, so the policy must reach the NoThinking mode on its own.
    """

    def score(completion: str) -> float:
        return 0.0 if thinks(completion, require_tag) else 1.0

    return score
