"""The ``format`` reward function: 1 when the completion has the asked-for shape (tags, a box), else 0."""

from __future__ import annotations

from typing import Callable

from rlvr.rewards.rubric import reward_function
from rlvr.verifiers.format import check_format
from rlvr.verifiers.numeric import parse_number

__all__ = ["format_reward"]


@reward_function("format", tags={"bounded"})
def format_reward(think: bool = False, answer: bool = False, boxed: bool = True, strict: bool = True,
                  think_open_optional: bool = False, max_chars: int = 1_000_000, number: bool = False,
                  single_box: bool = False) -> Callable[..., float]:
    """1 when the completion has the asked-for shape (tags, a box), else 0.

    1.0 when every enabled check of :func:`rlvr.verifiers.format.check_format` passes (``think``: one
    non-empty ``<think>`` block; ``answer``: one ``<answer>`` block; ``boxed``: a non-empty ``\\boxed{}``), else 0.
    ``number``: the answer (the last box, or the ``<answer>`` block) must also be one number (``72``, ``-2.5``,
    ``\\frac{1}{2}``, ``1,234``; no ``=``, no expression such as ``49 + 23``); ``single_box``: exactly one
    ``\\boxed`` in the completion.  Both ask for what a strict checker reads, so that the term cannot be earned by
    boxing the question (a policy trained with a plain box term on a strict scorer learned to box the expression).

    The default asks for a box only (the demo's prompt); the reference is never read, so the format alone earns
    this term and only its weight bounds what a well-formatted wrong answer gets.
    """
    if not (think or answer or boxed):
        raise ValueError("enable at least one of think, answer, boxed")
    if number and not (answer or boxed):
        raise ValueError("number: checks the answer of a box or an <answer> block: enable boxed or answer")

    def score(completion: str) -> float:
        if not isinstance(completion, str) or len(completion) > max_chars:
            return 0.0
        problems, extracted = check_format(completion, think=think, answer=answer, boxed=boxed, strict=strict,
                                           think_open_optional=think_open_optional)
        if problems or (single_box and completion.count("\\boxed") != 1):
            return 0.0
        if number and (extracted is None or "=" in extracted or parse_number(extracted) is None):
            return 0.0
        return 1.0

    return score
