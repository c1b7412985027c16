"""Sampler-side policies: DAPO dynamic sampling and online difficulty filtering.

Pure tensor logic plus two small stateful helpers that hold no model and no
I/O; the training loop decides what to generate and feeds results back.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Hashable, Sequence

import torch
from torch import Tensor

from rlvr.algorithms.advantages import _grouped, _zero_variance

__all__ = ["informative_groups", "dynamic_sampling_filter", "DynamicSamplingBuffer", "DifficultyFilter"]


def informative_groups(rewards: Tensor, group_size: int) -> Tensor:
    """Bool [N / G]: the group's rewards are not all equal (it has a non-zero group-relative advantage)."""
    return ~_zero_variance(_grouped(rewards, group_size))


def dynamic_sampling_filter(rewards: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """DAPO dynamic sampling (Yu et al. 2025, "DAPO", Sec. 3.2, Eq. 11): keep only groups with
    ``0 < #{correct} < G``, i.e. whose rewards are not all equal, because all-correct or
    all-wrong groups have zero advantage and only shrink the effective batch.

    Returns:
        ``(keep_groups [N / G], keep_samples [N])`` bool masks.
    """
    keep = informative_groups(rewards, group_size)
    return keep, keep.repeat_interleave(group_size)


class DynamicSamplingBuffer:
    """Accumulates informative groups over several generation rounds until a batch is full (DAPO).

    Usage per training step::

        buf = DynamicSamplingBuffer(target_groups=P, group_size=G, max_rounds=8)
        while not buf.full and not buf.exhausted:
            samples, rewards = generate(buf.prompts_to_request(P))   # G samples per prompt
            buf.add(samples, rewards)
        samples, rewards = buf.take()          # exactly P groups (fewer if exhausted)

    ``items`` may be anything indexable (Sample records, ids); groups are
    consecutive blocks of ``group_size``.  Surplus groups beyond the target are
    dropped, as in DAPO.  Counters (``rounds``, ``groups_seen``,
    ``groups_dropped``) feed the diagnostics.
    """

    def __init__(self, target_groups: int, group_size: int, max_rounds: int | None = None):
        if target_groups < 1 or group_size < 1:
            raise ValueError(f"need target_groups >= 1 and group_size >= 1, got {target_groups}, {group_size}")
        if max_rounds is not None and max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.target_groups, self.group_size, self.max_rounds = target_groups, group_size, max_rounds
        self._items: list[list[Any]] = []
        self._rewards: list[Tensor] = []
        self.rounds = self.groups_seen = self.groups_dropped = 0

    @property
    def num_groups(self) -> int:
        return len(self._items)

    @property
    def needed(self) -> int:
        """Groups still missing from the batch."""
        return max(self.target_groups - self.num_groups, 0)

    @property
    def full(self) -> bool:
        return self.needed == 0

    @property
    def exhausted(self) -> bool:
        return self.max_rounds is not None and self.rounds >= self.max_rounds

    def prompts_to_request(self, keep_rate: float | None = None, oversample: float = 1.0) -> int:
        """How many prompts to generate next: ``ceil(needed * oversample / keep_rate)``.

        ``keep_rate`` defaults to the fraction of groups kept so far (1 before any round).
        """
        if self.full:
            return 0
        if keep_rate is None:
            kept = self.groups_seen - self.groups_dropped
            keep_rate = kept / self.groups_seen if kept else (1.0 / (self.groups_seen + 1) if self.groups_seen else 1.0)
        if not 0.0 < keep_rate <= 1.0 or oversample <= 0:
            raise ValueError(f"need 0 < keep_rate <= 1 and oversample > 0, got {keep_rate}, {oversample}")
        return max(1, math.ceil(self.needed * oversample / keep_rate - 1e-9))

    def add(self, items: Sequence[Any], rewards: Tensor) -> int:
        """Add one round of generations; keeps the informative groups and returns how many."""
        r = torch.as_tensor(rewards)
        if len(items) != r.numel():
            raise ValueError(f"{len(items)} items but {r.numel()} rewards")
        keep = informative_groups(r, self.group_size)
        self.rounds += 1
        self.groups_seen += keep.numel()
        self.groups_dropped += int((~keep).sum())
        G = self.group_size
        for g in keep.nonzero().reshape(-1).tolist():
            self._items.append(list(items[g * G:(g + 1) * G]))
            self._rewards.append(r[g * G:(g + 1) * G])
        return int(keep.sum())

    def take(self) -> tuple[list[Any], Tensor]:
        """The first ``target_groups`` kept groups (flattened) and their rewards; resets the buffer."""
        items = [x for grp in self._items[:self.target_groups] for x in grp]
        rew = torch.cat(self._rewards[:self.target_groups]) if self._rewards else torch.zeros(0)
        self._items, self._rewards = [], []
        self.rounds = self.groups_seen = self.groups_dropped = 0
        return items, rew


class DifficultyFilter:
    """Online difficulty filtering (Bae et al. 2025, "Online Difficulty Filtering for Reasoning
    Oriented Reinforcement Learning"): train on prompts whose pass rate lies in ``[low, high]``.

    Keeps a running pass rate per prompt id, updated from each group's mean reward ``p``::

        ema:     rate <- p on first sight, then rate <- (1 - alpha) * rate + alpha * p
        window:  rate = mean of the last ``window`` group means

    ``keep(pid)`` is ``low <= rate <= high``; prompts never seen are kept when
    ``keep_unseen`` (they may be informative).  ``state_dict`` /
    ``load_state_dict`` make it resumable from a checkpoint (prompt ids must be
    hashable and picklable).
    """

    def __init__(self, low: float = 0.25, high: float = 0.75, *, mode: str = "ema", alpha: float = 0.5,
                 window: int = 4, keep_unseen: bool = True):
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"need 0 <= low <= high <= 1, got {low}, {high}")
        if mode not in ("ema", "window"):
            raise ValueError(f"mode must be 'ema' or 'window', got {mode!r}")
        if not 0.0 < alpha <= 1.0 or window < 1:
            raise ValueError("need 0 < alpha <= 1 and window >= 1")
        self.low, self.high, self.mode, self.alpha, self.window = low, high, mode, alpha, window
        self.keep_unseen = keep_unseen
        self._ema: dict[Hashable, float] = {}
        self._hist: dict[Hashable, deque] = {}

    def update(self, prompt_ids: Sequence[Hashable], rewards: Tensor, group_size: int) -> None:
        """Record one group of ``group_size`` rewards per prompt id (``len(prompt_ids) = N / G``)."""
        means = _grouped(torch.as_tensor(rewards), group_size).mean(dim=1)
        if len(prompt_ids) != means.numel():
            raise ValueError(f"{len(prompt_ids)} prompt ids for {means.numel()} groups")
        for pid, p in zip(prompt_ids, means.tolist()):
            if self.mode == "ema":
                self._ema[pid] = p if pid not in self._ema else (1 - self.alpha) * self._ema[pid] + self.alpha * p
            else:
                self._hist.setdefault(pid, deque(maxlen=self.window)).append(p)

    def pass_rate(self, pid: Hashable) -> float | None:
        if self.mode == "ema":
            return self._ema.get(pid)
        h = self._hist.get(pid)
        return sum(h) / len(h) if h else None

    def keep(self, pid: Hashable) -> bool:
        rate = self.pass_rate(pid)
        if rate is None:
            return self.keep_unseen
        return self.low <= rate <= self.high

    def filter(self, prompt_ids: Sequence[Hashable]) -> list[bool]:
        return [self.keep(pid) for pid in prompt_ids]

    def __len__(self) -> int:
        return len(self._ema) if self.mode == "ema" else len(self._hist)

    def state_dict(self) -> dict:
        return {"mode": self.mode, "ema": dict(self._ema), "hist": {k: list(v) for k, v in self._hist.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state.get("mode", self.mode) != self.mode:
            raise ValueError(f"state was saved in mode {state['mode']!r}, filter is in mode {self.mode!r}")
        self._ema = dict(state.get("ema", {}))
        self._hist = {k: deque(v, maxlen=self.window) for k, v in state.get("hist", {}).items()}
