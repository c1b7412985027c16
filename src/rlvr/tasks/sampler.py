"""A resumable, seeded prompt order over a task's training problems."""

from __future__ import annotations

import random
from typing import Sequence

from rlvr.types import Problem

__all__ = ["PromptSampler"]


class PromptSampler:
    """Walks over the training problems in seeded, reshuffled-every-epoch order.

    The whole state is ``position`` (prompts consumed so far), so a resumed run
    that restores it sees exactly the prompts an uninterrupted run would.
    """

    def __init__(self, problems: Sequence[Problem], seed: int = 0, position: int = 0):
        if not problems:
            raise ValueError("no training problems")
        self.problems = list(problems)
        self.seed = seed
        self.position = position

    def _order(self, epoch: int) -> list[int]:
        if getattr(self, "_epoch", None) != epoch:
            order = list(range(len(self.problems)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._epoch, self._cached = epoch, order
        return self._cached

    def next(self, k: int) -> list[Problem]:
        out = []
        for _ in range(k):
            epoch, i = divmod(self.position, len(self.problems))
            out.append(self.problems[self._order(epoch)[i]])
            self.position += 1
        return out
