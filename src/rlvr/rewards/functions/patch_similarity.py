"""The ``patch_similarity`` reward function: SWE-RL's sequence similarity of a proposed patch to the oracle's."""

from __future__ import annotations

import difflib
import re
from typing import Callable

from rlvr.rewards.rubric import reward_function

__all__ = ["patch_similarity_reward", "extract_patch", "patch_similarity"]

_FENCE = re.compile(r"```[ \t]*(?:diff|patch)[ \t]*\n(.*?)```", re.DOTALL)


def extract_patch(completion: str) -> str | None:
    """The one fenced ```diff (or ```patch) block of ``completion`` with at least one hunk line, or None.

    None (a format error) when there is no such block or more than one: offering several patches is not an answer.
    A block is a patch when it has a line starting ``@@`` or a ``+``/``-`` line that is not a ``+++``/``---``
    file header."""
    if not isinstance(completion, str):
        return None
    blocks = _FENCE.findall(completion)
    if len(blocks) != 1:
        return None
    body = blocks[0]
    lines = body.splitlines()
    hunk = any(ln.startswith("@@") or (ln[:1] in "+-" and ln[:3] not in ("+++", "---") and ln[:1] != "")
               for ln in lines)
    return body.strip("\n") if hunk else None


def patch_similarity(predicted: str, oracle: str) -> float:
    """``difflib.SequenceMatcher(None, predicted, oracle).ratio()``: 2 M / T, in [0, 1] (1: identical)."""
    return difflib.SequenceMatcher(None, predicted, oracle, autojunk=False).ratio()


@reward_function("patch_similarity", tags={"bounded"})
def patch_similarity_reward(format_penalty: float = -1.0, max_chars: int = 200_000) -> Callable[..., float]:
    """SWE-RL's reward: ``-1`` for a malformed answer, else the similarity of the patch to the oracle patch.

    Wei et al. 2025 ("SWE-RL: Advancing LLM Reasoning via Reinforcement Learning on Open Software Evolution",
    arXiv 2502.18449), eq. 1: ``R(tau) = -1`` if the format is wrong, else ``compare(patch_pred, patch_gt)``,
    where ``compare`` is Python's ``difflib.SequenceMatcher`` ratio ``2 M / T`` (M: matched characters, T: the
    two lengths together).  Here the predicted patch is the completion's one fenced ```diff block (none, several,
    or one without a hunk line is the format error: ``format_penalty``, default the paper's -1), and the oracle
    patch is the problem's reference answer.  Either text longer than ``max_chars`` scores the format penalty
    (SequenceMatcher is quadratic in the worst case).
    """
    if not (-1.0 <= format_penalty <= 0.0):
        raise ValueError(f"format_penalty must be in [-1, 0], got {format_penalty!r}")
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")

    def score(completion: str, answer: str) -> float:
        patch = extract_patch(completion)
        if patch is None or len(patch) > max_chars or len(answer) > max_chars:
            return format_penalty
        return patch_similarity(patch, answer.strip("\n"))

    return score
