"""Problem synthesis from failures (SwS-style): new problems of the structure the policy fails on, queued for
training.

Liang et al. 2025 ("SwS: Self-aware Weakness-driven Problem Synthesis in Reinforcement Learning for LLM
Reasoning", arXiv 2506.08989) find the problems the policy keeps failing, synthesise new problems that target
the same weakness, and train on them.  SwS extracts the failed problems' concepts and has an LLM write new
problems; for a procedural task the weakness is the problem's *structure*, so here a failed problem is re-drawn
with the same structure and fresh numbers: an arithmetic expression keeps its operators and gets new operands
from its spec's range (:func:`variants`).  A :class:`FailureSynthesizer` turns every group whose samples all fail
into ``k`` variants, queues them (never a held-out problem's expression), and hands them out first in later
steps, up to a share of each step's prompts.  Its state (queue and RNG) is checkpointed.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Iterable, Sequence

from rlvr.tasks.arithmetic import ArithmeticSpec, _build_problem, evaluate_expression
from rlvr.types import Problem

__all__ = ["variants", "FailureSynthesizer", "can_synthesize"]


def can_synthesize(problem: Problem) -> bool:
    """Whether :func:`variants` can re-draw ``problem`` (a generated arithmetic problem)."""
    md = problem.metadata if isinstance(problem.metadata, dict) else {}
    return {"operands", "operators", "spec", "expression"} <= set(md)


def variants(problem: Problem, rng: random.Random, k: int) -> list[Problem]:
    """Up to ``k`` new problems with ``problem``'s structure (its operators, in order) and fresh operands drawn
    uniformly from its spec's range (non-negative results only when the spec asks), each different from it; []
    when it cannot be re-drawn."""
    if not can_synthesize(problem):
        return []
    md = problem.metadata
    spec_fields = dict(md["spec"])
    spec = ArithmeticSpec(**{**spec_fields, "operators": tuple(spec_fields["operators"])})
    template = problem.prompt.replace("{", "{{").replace("}", "}}").replace(md["expression"], "{expression}", 1)
    ops = list(md["operators"])
    out: list[Problem] = []
    for _ in range(20 * k):
        if len(out) >= k:
            break
        operands = [rng.randint(spec.min_value, spec.max_value) for _ in range(len(ops) + 1)]
        if not spec.allow_negative_results and evaluate_expression(operands, ops) < 0:
            continue
        p = _build_problem(operands, ops, spec, template)
        if p.id != problem.id and all(p.id != q.id for q in out):
            p.metadata["synthesized_from"] = problem.id
            out.append(p)
    return out


def _to_dict(p: Problem) -> dict[str, Any]:
    return {"id": p.id, "prompt": p.prompt, "answer": p.answer, "metadata": p.metadata}


class FailureSynthesizer:
    """Queue ``k`` variants of each problem whose group all failed; :meth:`take` hands queued ones out first."""

    def __init__(self, k: int, share: float, capacity: int = 1000, forbidden: Iterable[str] = (), seed: int = 0):
        if k < 1 or not 0 < share <= 1 or capacity < 1:
            raise ValueError("k >= 1, 0 < share <= 1 and capacity >= 1 are needed")
        self.k, self.share, self.capacity = k, share, capacity
        self.forbidden = set(forbidden)
        self.rng = random.Random(seed)
        self.queue: deque[Problem] = deque()
        self.made = 0
        """Problems synthesised so far."""
        self.taken: list[Problem] = []
        """The problems the last :meth:`take` handed out."""

    def __len__(self) -> int:
        return len(self.queue)

    def observe(self, problem: Problem, correct: Sequence[float]) -> int:
        """After a group: if none of its samples is correct, queue variants of ``problem``; how many were queued."""
        if any(float(c) > 0 for c in correct):
            return 0
        new = [p for p in variants(problem, self.rng, self.k) if p.id not in self.forbidden]
        room = self.capacity - len(self.queue)
        new = new[:max(0, room)]
        self.queue.extend(new)
        self.made += len(new)
        return len(new)

    def take(self, prompts: int) -> list[Problem]:
        """Up to ``floor(share * prompts)`` queued problems, oldest first."""
        n = min(len(self.queue), int(self.share * prompts))
        self.taken = [self.queue.popleft() for _ in range(n)]
        return list(self.taken)

    def state_dict(self) -> dict[str, Any]:
        return {"queue": [_to_dict(p) for p in self.queue], "rng": self.rng.getstate(), "made": self.made}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queue = deque(Problem(d["id"], prompt=d["prompt"], answer=d["answer"], metadata=d["metadata"])
                           for d in state["queue"])
        self.rng.setstate(tuple(x if not isinstance(x, list) else tuple(x) for x in state["rng"]))
        self.made = state["made"]
