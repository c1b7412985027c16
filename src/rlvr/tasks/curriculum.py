"""A live curriculum: the difficulty level moves to keep the rolling pass rate inside a band.

The task is built once per level (each level is a set of task options: larger
operands, more terms, a harder reasoning-gym configuration, another task
altogether), and prompts are drawn from the current level.  After every step the
recipe reports each group's pass rate; once ``min_groups`` groups have been seen at
a level, a rolling mean (the last ``window`` groups) above ``high`` moves one level
up and one below ``low`` moves one level down, and the window starts again.  The
target band follows the observation that GRPO learns from groups that are neither
all right nor all wrong (a pass rate of 0 or 1 gives zero advantage).

The whole state (level, window, each level's prompt position, moves) is a plain
dict (:meth:`CurriculumSampler.state_dict`) written into checkpoints, so a resumed
run continues exactly.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from rlvr.tasks.sampler import PromptSampler
from rlvr.types import Problem

__all__ = ["CurriculumSampler"]


class CurriculumSampler:
    """Draws prompts from the current level of ``levels`` (training problem lists, easiest first)."""

    def __init__(self, levels: Sequence[Sequence[Problem]], *, seed: int = 0, low: float = 0.2, high: float = 0.8,
                 window: int = 32, min_groups: int = 16, start_level: int = 0):
        if not levels:
            raise ValueError("a curriculum needs at least one level")
        if not 0 <= low < high <= 1:
            raise ValueError(f"need 0 <= low < high <= 1, got low={low}, high={high}")
        if window < 1 or not 1 <= min_groups <= window:
            raise ValueError(f"need window >= 1 and 1 <= min_groups <= window, got {window}, {min_groups}")
        if not 0 <= start_level < len(levels):
            raise ValueError(f"start_level {start_level} is not one of the {len(levels)} levels")
        self.samplers = [PromptSampler(p, seed=seed + 7919 * i) for i, p in enumerate(levels)]
        self.low, self.high, self.window, self.min_groups = low, high, window, min_groups
        self.level = start_level
        self.recent: deque[float] = deque(maxlen=window)
        self.moves = 0

    @property
    def num_levels(self) -> int:
        return len(self.samplers)

    @property
    def position(self) -> int:
        """Prompts drawn so far over all levels."""
        return sum(s.position for s in self.samplers)

    def next(self, k: int) -> list[Problem]:
        return self.samplers[self.level].next(k)

    @property
    def pass_rate(self) -> float | None:
        """Rolling mean pass rate at the current level (None before any group)."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    def observe(self, pass_rates: Sequence[float]) -> int:
        """Record groups' pass rates (each in [0, 1]); returns the move made (-1, 0 or +1)."""
        self.recent.extend(float(r) for r in pass_rates)
        rate = self.pass_rate
        if len(self.recent) < self.min_groups or rate is None:
            return 0
        move = 1 if rate > self.high and self.level + 1 < self.num_levels else \
            -1 if rate < self.low and self.level > 0 else 0
        if move:
            self.level += move
            self.recent.clear()
            self.moves += 1
        return move

    def metrics(self) -> dict[str, float]:
        rate = self.pass_rate
        return {"curriculum/level": float(self.level), "curriculum/moves": float(self.moves),
                **({"curriculum/pass_rate": rate} if rate is not None else {})}

    def state_dict(self) -> dict:
        return {"level": self.level, "recent": list(self.recent), "moves": self.moves,
                "positions": [s.position for s in self.samplers]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["positions"]) != self.num_levels:
            raise ValueError(f"checkpoint has {len(state['positions'])} curriculum levels, the config {self.num_levels}")
        self.level, self.moves = int(state["level"]), int(state["moves"])
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        for s, p in zip(self.samplers, state["positions"]):
            s.position = int(p)
