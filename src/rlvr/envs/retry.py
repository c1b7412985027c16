"""'Try again' feedback: a wrong final answer gets a short message and another attempt."""

from __future__ import annotations

from rlvr.envs.base import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.types import Problem
from rlvr.verifiers import safe_verify

__all__ = ["RetryEnvironment"]


class RetryEnvironment(Environment):
    """Up to ``attempts`` answers; each wrong one is answered with ``feedback`` as a user message.

    Reward ``discount ** k`` x the verdict's score (1 for binary verifiers) for a correct answer
    at attempt ``k`` (0-based), 0 if every attempt is wrong: a second-attempt success is worth
    less than a first one, so the policy is not paid to answer carelessly first (the
    unary-feedback setting of Liu et al. 2025, "A simple 'try again' can elicit multi-turn LLM
    reasoning").  ``info`` records ``correct_at_turn_k`` for accuracy per attempt.
    """

    def __init__(self, verifier, *, attempts: int, feedback: str, discount: float, max_total_tokens: int):
        self.verifier = verifier
        self.feedback = feedback
        self.discount = discount
        self.limits = Limits(max_turns=attempts, max_total_tokens=max_total_tokens)

    def reset(self, problem: Problem) -> EpisodeState:
        return EpisodeState(problem, problem.to_messages())

    def step(self, state: EpisodeState, text: str) -> Reply:
        k = state.turn
        verdict = safe_verify(self.verifier, text, state.problem.answer)
        info = {f"correct_at_turn_{k + 1}": float(verdict.correct)}
        if verdict.correct:
            return Reply(done=True, reward=self.discount ** k * float(verdict.score), verdict=verdict, info=info)
        if k + 1 >= self.limits.max_turns:
            return Reply(done=True, reward=0.0, verdict=verdict, info=info)
        return Reply(observation=self.feedback, role="user", info=info)


@ENVIRONMENTS.register("retry", tags={"multi_turn"},
                       doc="'try again': a wrong answer gets feedback and another attempt (params attempts, "
                           "feedback, discount)")
def retry_env(verifier, tokenizer, *, attempts: int = 2,
              feedback: str = "That is not correct. Try again, and put the final answer in \\boxed{}.",
              discount: float = 0.5, max_total_tokens: int = 0) -> Environment:
    if attempts < 1:
        raise ValueError(f"env.params.attempts must be >= 1, got {attempts}")
    if not 0 <= discount <= 1:
        raise ValueError(f"env.params.discount must be in [0, 1], got {discount}")
    return RetryEnvironment(verifier, attempts=attempts, feedback=feedback, discount=discount,
                            max_total_tokens=max_total_tokens)
