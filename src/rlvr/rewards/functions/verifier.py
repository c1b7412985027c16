"""The ``verifier`` reward function: the episode's verified return, or any registered verifier's score."""

from __future__ import annotations

from typing import Any, Callable

from rlvr.rewards.rubric import reward_function
from rlvr.verifiers import VERIFIERS, get_verifier, safe_verify

__all__ = ["verifier_reward"]


def _check(params: dict[str, Any], **_: Any) -> None:
    """A named verifier is registered and takes the options given; options need a name."""
    if params.get("verifier") is None:
        if params.get("verifier_params"):
            raise ValueError("verifier_params are the options of a named verifier: set verifier as well")
        return
    VERIFIERS.entry(params["verifier"], key="verifier")
    VERIFIERS.check(params["verifier"], params.get("verifier_params"), key="verifier_params")


@reward_function("verifier", check=_check)
def verifier_reward(verifier: str | None = None, verifier_params: dict[str, Any] | None = None,
                    correct: float = 1.0, wrong: float = 0.0) -> Callable[..., float]:
    """The episode's verified return, or a named verifier's score, scaled to [wrong, correct].

    ``wrong + (correct - wrong) * s``, where ``s`` is the episode's return (its task's verifier or environment,
    after ``reward.flip_*`` noise) or, with ``verifier``, the score of that registered verifier on the completion.

    Without ``name`` this is the reward of a run without ``reward.functions`` (``reward.correct_reward`` /
    ``wrong_reward`` become ``correct`` / ``wrong``); with ``verifier`` a second checker can join the first (e.g.
    ``{kind: verifier, name: tags, params: {verifier: format, verifier_params: {think: false}}}``).
    """
    span = correct - wrong
    if verifier is None:
        if verifier_params:
            raise ValueError("verifier_params are the options of a named verifier: set verifier as well")

        def episode(env_return: float) -> float:
            return wrong + span * env_return

        return episode
    check = get_verifier(verifier, **dict(verifier_params or {}))

    def named(completion: str, answer: str) -> float:
        return wrong + span * float(safe_verify(check, completion, answer).score)

    return named
