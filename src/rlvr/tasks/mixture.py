"""Task mixtures: several tasks in one run, each problem tagged with its task, prompts drawn by weight.

Every problem of a mixture carries its task's label in ``Problem.metadata["task"]`` and in its id
(``<label>/<id>``, so ids stay unique across tasks); the environment and the reward stage look the
label up to score the problem by its own task's verifier and rubric (:mod:`rlvr.envs.mixture`,
:class:`rlvr.rewards.pipeline.RewardPipeline`).  :class:`MixtureSampler` draws each prompt's task
with probability proportional to its weight (Guru, Nemotron-CrossThink, MoDoMoDo mix domains this
way), or moved toward the tasks whose groups are learnable now, then that task's next problem in its
own seeded order; its state is checkpointed, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from rlvr.tasks.registry import build_task
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.settings import MixtureEntry, TaskConfig
from rlvr.types import Problem

__all__ = ["build_mixture", "MixtureSampler", "task_of", "task_metrics", "learnable_groups", "TASK_KEY"]

TASK_KEY = "task"
"""The ``Problem.metadata`` key holding a mixture problem's task label."""


def task_of(problem: Problem) -> str | None:
    """The mixture label of ``problem`` (None outside a mixture)."""
    return problem.metadata.get(TASK_KEY) if problem.metadata else None


def label_of(problem_id: str) -> str:
    """The mixture label of a problem id (``<label>/<id>``, as :func:`build_mixture` makes them)."""
    return problem_id.split("/", 1)[0]


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
    """Prompts from several tasks: each draw picks a task with probability ``p_t`` (seeded by the draw's number),
    then that task's next problem in its own :class:`PromptSampler` order.

    ``adapt="none"``: ``p_t = w_t / sum(w)``.  ``adapt="learnable"``: ``p_t ∝ w_t (floor + u_t)``, where ``u_t`` is
    a moving average (weight ``alpha`` per step) of the share of task t's groups that were learnable, their
    rewards not all equal (a group-relative estimator's only source of gradient; DAPO drops the others): the
    sampling moves toward the tasks the policy can learn from now, as MoDoMoDo and DUMP weigh domains by what
    the policy gains from them; ``u_t`` starts at 1 (the weights as given) and changes only through
    :meth:`observe`.  The state (:meth:`state_dict`) is the number of draws, each task's position and ``u``.
    """

    def __init__(self, problems: dict[str, Sequence[Problem]], weights: dict[str, float], seed: int = 0,
                 adapt: str = "none", alpha: float = 0.3, floor: float = 0.1):
        self.labels = [k for k in problems if weights.get(k, 0) > 0]
        if not self.labels:
            raise ValueError("a task mixture needs a task with weight > 0 and training problems")
        if adapt not in ("none", "learnable"):
            raise ValueError(f"adapt must be none or learnable, got {adapt!r}")
        self.base = [float(weights[k]) for k in self.labels]
        self.samplers = {k: PromptSampler(problems[k], seed=seed + i) for i, k in enumerate(self.labels)}
        self.seed, self.adapt, self.alpha, self.floor = seed, adapt, alpha, floor
        self.useful = [1.0] * len(self.labels)
        self.position = 0  # draws so far

    @property
    def probabilities(self) -> list[float]:
        """Each task's probability of being drawn next."""
        w = [b * ((self.floor + u) if self.adapt == "learnable" else 1.0) for b, u in zip(self.base, self.useful)]
        total = sum(w)
        return [x / total for x in w]

    def next(self, k: int) -> list[Problem]:
        out, probs = [], self.probabilities
        for _ in range(k):
            rng = random.Random(self.seed * 1_000_003 + 7919 * self.position + 1)
            t = rng.choices(range(len(self.labels)), probs)[0]
            self.position += 1
            out += self.samplers[self.labels[t]].next(1)
        return out

    def observe(self, learnable: dict[str, list[bool]]) -> None:
        """A step's groups by task label, each True when learnable: the moving averages move toward each task's
        share (a task without groups this step keeps its average)."""
        for i, label in enumerate(self.labels):
            flags = learnable.get(label)
            if flags:
                self.useful[i] += self.alpha * (sum(flags) / len(flags) - self.useful[i])

    def metrics(self) -> dict[str, float]:
        """``task/<label>/probability`` (and ``/learnable`` when adapting) for the log."""
        out = {f"task/{k}/probability": p for k, p in zip(self.labels, self.probabilities)}
        if self.adapt == "learnable":
            out.update({f"task/{k}/learnable": u for k, u in zip(self.labels, self.useful)})
        return out

    def state_dict(self) -> dict:
        return {"position": self.position, "positions": {k: s.position for k, s in self.samplers.items()},
                "useful": list(self.useful)}

    def load_state_dict(self, state: dict) -> None:
        if sorted(state["positions"]) != sorted(self.labels):
            raise ValueError(f"the checkpoint's mixture has tasks {sorted(state['positions'])}, the config "
                             f"{sorted(self.labels)}")
        self.position = int(state["position"])
        for k, pos in state["positions"].items():
            self.samplers[k].position = int(pos)
        self.useful = [float(u) for u in state["useful"]]


def task_metrics(samples: Sequence, verdicts: Sequence, rewards) -> dict[str, float]:
    """``task/<label>/share``, ``/accuracy`` and ``/reward_mean`` of one step's samples, per mixture task (the
    task label is the prefix of a sample's problem id)."""
    by: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by.setdefault(label_of(s.problem_id), []).append(i)
    n = max(len(samples), 1)
    out: dict[str, float] = {}
    for label, idx in sorted(by.items()):
        out[f"task/{label}/share"] = len(idx) / n
        out[f"task/{label}/accuracy"] = sum(float(verdicts[i].correct) for i in idx) / len(idx)
        out[f"task/{label}/reward_mean"] = sum(float(rewards[i]) for i in idx) / len(idx)
    return out


def learnable_groups(samples: Sequence, rewards, group_size: int) -> dict[str, list[bool]]:
    """Each consecutive group of ``group_size`` samples by task label (the prefix of its problem id): True when
    its rewards are not all equal."""
    out: dict[str, list[bool]] = {}
    for i in range(0, len(samples), group_size):
        r = [float(x) for x in rewards[i:i + group_size]]
        out.setdefault(label_of(samples[i].problem_id), []).append(max(r) > min(r))
    return out
