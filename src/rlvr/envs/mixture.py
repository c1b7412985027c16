"""A task mixture's environment: one environment per task (the run's ``env`` built with that task's verifier),
each problem routed to its own task's by ``Problem.metadata["task"]``."""

from __future__ import annotations

from rlvr.envs.base import Environment, EpisodeState, Reply
from rlvr.tasks.mixture import task_of
from rlvr.types import Problem

__all__ = ["MixtureEnvironment"]


class MixtureEnvironment(Environment):
    """Routes every call for a problem to the environment of its task (all built from the same ``env`` section,
    so their limits, stop strings and turn structure agree; only their verifiers differ)."""

    def __init__(self, envs: dict[str, Environment]):
        if not envs:
            raise ValueError("a mixture environment needs at least one task")
        first = next(iter(envs.values()))
        self.envs = dict(envs)
        self.limits, self.stop = first.limits, first.stop
        self.single_turn = first.single_turn
        self.step_workers = first.step_workers

    def env_for(self, problem: Problem) -> Environment:
        label = task_of(problem)
        if label not in self.envs:
            raise KeyError(f"problem {problem.id!r} is tagged with task {label!r}, which is not in the mixture "
                           f"({', '.join(self.envs)})")
        return self.envs[label]

    def reset(self, problem: Problem) -> EpisodeState:
        return self.env_for(problem).reset(problem)

    def step(self, state: EpisodeState, text: str) -> Reply:
        return self.env_for(state.problem).step(state, text)

    def close(self, state: EpisodeState, reason: str) -> Reply:
        return self.env_for(state.problem).close(state, reason)
