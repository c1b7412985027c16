"""Today's tasks plus a verifier as an environment: one assistant turn, scored by the verifier."""

from __future__ import annotations

from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Reply
from rlvr.types import Problem
from rlvr.verifiers import safe_verify

__all__ = ["SingleTurnEnvironment"]


class SingleTurnEnvironment(Environment):
    """One completion per episode, scored by ``verifier(text, problem.answer)``; the reward is the verdict's score.

    For binary verifiers that is 1 if correct and 0 if not; verifiers with partial
    credit (``partial=True`` code and instruction verifiers, reasoning-gym's scores)
    pass their fraction through rather than having it rounded to correct/wrong.

    The episode's first messages are the problem's own, so the engine renders
    exactly the prompt it renders for the bare task; training and evaluation on
    this environment are the same computation as before environments existed.
    """

    single_turn = True

    def __init__(self, verifier, workers: int = 1):
        self.verifier = verifier
        self.step_workers = workers

    def reset(self, problem: Problem) -> EpisodeState:
        return EpisodeState(problem, problem.to_messages())

    def step(self, state: EpisodeState, text: str) -> Reply:
        verdict = safe_verify(self.verifier, text, state.problem.answer)
        return Reply(done=True, reward=float(verdict.score), verdict=verdict)


def _check(params: dict, **_) -> None:
    if params.get("workers", 1) < 0:
        raise ValueError("workers must be >= 0")


@ENVIRONMENTS.register("single_turn", check=_check,
                       doc="one completion scored by reward.verifier (the task as it is: the default); params "
                           "workers (parallel checks, for code verifiers)")
def single_turn(verifier, tokenizer, *, workers: int = 1) -> Environment:
    """``workers``: checks of one step run on this many threads (0: one per CPU core); worth it for verifiers
    whose checks run in child processes (the code verifiers), pointless for in-process ones."""
    import os

    _check({"workers": workers})
    return SingleTurnEnvironment(verifier, workers=workers or os.cpu_count() or 1)
