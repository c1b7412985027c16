"""The ``guess_number`` environment: guess the hidden number with "higher" / "lower" feedback."""

from rlvr.envs import ENVIRONMENTS, Environment, EpisodeState, Limits, Reply
from rlvr.types import Verdict


class GuessNumber(Environment):
    """Guess the hidden number (``problem.answer``); the reward halves with every extra guess."""

    def __init__(self, verifier, max_guesses: int):
        self.verifier = verifier
        self.limits = Limits(max_turns=max_guesses)

    def step(self, state: EpisodeState, text: str) -> Reply:
        verdict = self.verifier(text, state.problem.answer)  # reads the guess (reward.verifier, e.g. last_integer)
        if verdict.extracted is None:
            return Reply(observation="Reply with a number.", role="user")
        if verdict.correct:
            return Reply(done=True, reward=0.5 ** state.turn, verdict=Verdict(1.0, verdict.extracted, "found"))
        higher = int(verdict.extracted) < int(state.problem.answer)
        return Reply(observation="Higher." if higher else "Lower.", role="user")


@ENVIRONMENTS.register("guess_number", tags={"multi_turn"})
def guess_number(verifier, tokenizer, *, max_guesses: int = 6) -> Environment:
    """A number-guessing game scored by reward.verifier: "higher" or "lower" after each wrong guess."""
    return GuessNumber(verifier, max_guesses)
