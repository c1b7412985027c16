"""Sampler-side policies: DAPO dynamic sampling and online difficulty filtering.

Pure tensor logic plus two small stateful helpers that hold no model and no
I/O; the training loop decides what to generate and feeds results back.
"""

from __future__ import annotations

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
    ``0 < #{correct} < G``, i.e. whose accuracies are not all equal, because all-correct or
    all-wrong groups have zero advantage and only shrink the effective batch.  Pass the
    verdicts (1 correct, 0 wrong), as verl filters on ``acc``: a shaped reward (overlong
    punishment, length bonus) can differ within an all-correct group.

    Returns:
        ``(keep_groups [N / G], keep_samples [N])`` bool masks.
    """
    keep = informative_groups(rewards, group_size)
    return keep, keep.repeat_interleave(group_size)


class DynamicSamplingBuffer:
    """DAPO dynamic sampling (Yu et al. 2025, Sec. 3.2) as the recipe runs it: collect groups over several
    generation rounds until ``target_groups`` informative ones are kept.

    Usage per training step (what :func:`rlvr.rollout.collect.collect_rollouts` does)::

        buf = DynamicSamplingBuffer(target_groups=P, group_size=G, max_rounds=4, drop_uninformative=True)
        while not buf.full and not buf.exhausted:
            buf.start_round()
            for group, rewards in generate(P prompts):
                buf.add(group, rewards)
        groups = buf.take()    # exactly P groups: the kept ones first, topped up with dropped ones

    A group is *informative* when the outcomes it is added with are not all equal; the recipe
    passes the verdicts' accuracy (DAPO's Eq. 11 counts correct answers; see
    :func:`dynamic_sampling_filter`).  With ``drop_uninformative=False`` every group counts
    as kept (one round, plain GRPO).  If the rounds run out first, the batch is
    topped up with dropped groups (their advantage is 0, so they only count towards
    the step's statistics).  ``generated`` counts every group's samples.
    """

    def __init__(self, target_groups: int, group_size: int, max_rounds: int | None = None,
                 drop_uninformative: bool = True):
        if target_groups < 1 or group_size < 1:
            raise ValueError(f"need target_groups >= 1 and group_size >= 1, got {target_groups}, {group_size}")
        if max_rounds is not None and max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.target_groups, self.group_size, self.max_rounds = target_groups, group_size, max_rounds
        self.drop_uninformative = drop_uninformative
        self.kept: list[Any] = []
        self.dropped: list[Any] = []
        self.rounds = 0

    @property
    def needed(self) -> int:
        """Groups still missing from the batch."""
        return max(self.target_groups - len(self.kept), 0)

    @property
    def full(self) -> bool:
        return self.needed == 0

    @property
    def exhausted(self) -> bool:
        return self.max_rounds is not None and self.rounds >= self.max_rounds

    @property
    def generated(self) -> int:
        """Samples generated so far (every group, kept or dropped)."""
        return (len(self.kept) + len(self.dropped)) * self.group_size

    def start_round(self) -> None:
        self.rounds += 1

    def add(self, group: Any, rewards: Tensor) -> bool:
        """Add one group (anything; ``rewards`` are its ``group_size`` outcomes the filter reads, e.g. 1 / 0
        verdicts); returns whether it is kept."""
        r = torch.as_tensor(rewards)
        if r.numel() != self.group_size:
            raise ValueError(f"a group has {self.group_size} rewards, got {r.numel()}")
        keep = bool(informative_groups(r, self.group_size)[0]) or not self.drop_uninformative
        (self.kept if keep else self.dropped).append(group)
        return keep

    def take(self) -> list[Any]:
        """``target_groups`` groups: the kept ones first, then dropped ones if the rounds ran out."""
        return (self.kept + self.dropped)[: self.target_groups]


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
