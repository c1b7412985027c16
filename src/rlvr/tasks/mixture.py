"""Task mixtures: several tasks in one run, each problem tagged with its task, prompts drawn by weight.

Every problem of a mixture carries its task's label in ``Problem.metadata["task"]`` and in its id
(``<label>/<id>``, so ids stay unique across tasks); the environment and the reward stage look the
label up to score the problem by its own task's verifier and rubric (:mod:`rlvr.envs.mixture`,
:class:`rlvr.rewards.pipeline.RewardPipeline`).  :class:`MixtureSampler` draws each prompt's task
with probability proportional to its weight (Guru, Nemotron-CrossThink, MoDoMoDo mix domains this
way), then that task's next problem in its own seeded order; its whole state is one ``position``,
like :class:`~rlvr.tasks.sampler.PromptSampler`'s, so a resumed run draws what an uninterrupted one
would.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from rlvr.tasks.registry import build_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.settings import MixtureEntry, TaskConfig
from rlvr.types import Problem

__all__ = ["build_mixture", "MixtureSampler", "task_of", "task_metrics", "TASK_KEY"]

TASK_KEY = "task"
"""The ``Problem.metadata`` key holding a mixture problem's task label."""


def task_of(problem: Problem) -> str | None:
    """The mixture label of ``problem`` (None outside a mixture)."""
    return problem.metadata.get(TASK_KEY) if problem.metadata else None


def _tagged(problems: Sequence[Problem], label: str) -> list[Problem]:
    return [dataclasses.replace(p, id=f"{label}/{p.id}", metadata={**(p.metadata or {}), TASK_KEY: label})
            for p in problems]


def build_mixture(entries: Sequence[MixtureEntry], base: TaskConfig) -> dict[str, tuple[list[Problem], list[Problem]]]:
    """Each entry's (train, held-out) problems, tagged with its label; ``base`` (the run's ``task`` section) gives
    the defaults an entry leaves out (held-out size, seed, system prompt)."""
    out = {}
    for e in entries:
        cfg = TaskConfig.model_validate({**base.model_dump(), "name": e.task, "params": dict(e.params),
                                         "path": e.path, "num_heldout": base.num_heldout if e.num_heldout is None
                                         else e.num_heldout})
        train, heldout = build_task(cfg)
        out[e.name] = (_tagged(train, e.name), _tagged(heldout, e.name))
    return out


class MixtureSampler:
    """Prompts from several tasks: each draw picks a task with probability ``weight / sum(weights)`` (seeded by the
    draw's position), then that task's next problem in its own :class:`PromptSampler` order.

    The state is ``position`` alone: the tasks' own positions are recomputed from the draws before it.
    """

    def __init__(self, problems: dict[str, Sequence[Problem]], weights: dict[str, float], seed: int = 0,
                 position: int = 0):
        self.labels = [k for k in problems if weights.get(k, 0) > 0]
        if not self.labels:
            raise ValueError("a task mixture needs a task with weight > 0 and training problems")
        total = sum(weights[k] for k in self.labels)
        self.weights = [weights[k] / total for k in self.labels]
        self.samplers = {k: PromptSampler(problems[k], seed=seed + i) for i, k in enumerate(self.labels)}
        self.seed = seed
        self._draws: list[int] = []  # the task index of every draw so far (recomputed from position)
        self.position = position

    def _task(self, n: int) -> int:
        """The task of draw ``n``."""
        return random.Random(self.seed * 1_000_003 + 7919 * n + 1).choices(range(len(self.labels)),
                                                                            self.weights)[0]

    @property
    def position(self) -> int:
        return len(self._draws)

    @position.setter
    def position(self, value: int) -> None:
        self._draws = [self._task(n) for n in range(int(value))]
        for i, label in enumerate(self.labels):
            self.samplers[label].position = sum(1 for t in self._draws if t == i)

    def next(self, k: int) -> list[Problem]:
        out = []
        for _ in range(k):
            t = self._task(len(self._draws))
            self._draws.append(t)
            out += self.samplers[self.labels[t]].next(1)
        return out

    def shares(self) -> dict[str, float]:
        """Each task's share of the draws so far."""
        n = max(len(self._draws), 1)
        return {label: sum(1 for t in self._draws if t == i) / n for i, label in enumerate(self.labels)}


def task_metrics(samples: Sequence, verdicts: Sequence, rewards) -> dict[str, float]:
    """``task/<label>/share``, ``/accuracy`` and ``/reward_mean`` of one step's samples, per mixture task (the
    task label is the prefix of a sample's problem id)."""
    by: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by.setdefault(s.problem_id.split("/", 1)[0], []).append(i)
    n = max(len(samples), 1)
    out: dict[str, float] = {}
    for label, idx in sorted(by.items()):
        out[f"task/{label}/share"] = len(idx) / n
        out[f"task/{label}/accuracy"] = sum(float(verdicts[i].correct) for i in idx) / len(idx)
        out[f"task/{label}/reward_mean"] = sum(float(rewards[i]) for i in idx) / len(idx)
    return out
