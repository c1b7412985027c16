"""The ``format`` reward function: 1 when the completion has the asked-for shape (tags, a box), else 0."""

from __future__ import annotations

from typing import Callable

from rlvr.rewards.rubric import reward_function
from rlvr.verifiers.format import check_format

__all__ = ["format_reward"]


@reward_function("format", tags={"bounded"})
def format_reward(think: bool = False, answer: bool = False, boxed: bool = True, strict: bool = True,
                  think_open_optional: bool = False, max_chars: int = 1_000_000) -> Callable[..., float]:
    """1 when the completion has the asked-for shape (tags, a box), else 0.

    1.0 when every enabled check of :func:`rlvr.verifiers.format.check_format` passes (``think``: one
    non-empty ``<think>`` block; ``answer``: one ``<answer>`` block; ``boxed``: a non-empty ``\\boxed{}``), else 0.

    The default asks for a box only (the demo's prompt); the reference is never read, so the format alone earns
    this term and only its weight bounds what a well-formatted wrong answer gets.
    """
    if not (think or answer or boxed):
        raise ValueError("enable at least one of think, answer, boxed")

    def score(completion: str) -> float:
        if not isinstance(completion, str) or len(completion) > max_chars:
            return 0.0
        problems, _ = check_format(completion, think=think, answer=answer, boxed=boxed, strict=strict,
                                   think_open_optional=think_open_optional)
        return 0.0 if problems else 1.0

    return score
