"""The ``genrm`` reward function: a generative verifier's p(Yes) of each completion (reference-free)."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import PositiveInt

from rlvr.rewards.genrm import GenerativeVerifier, PairwiseJudge, check_causal_lm_dir
from rlvr.rewards.rubric import reward_function

__all__ = ["genrm_reward", "pairwise_reward"]

_LOADED: dict[tuple, GenerativeVerifier] = {}
"""Verifiers loaded in this process, by what they were loaded with."""


def _loaded(cls: type[GenerativeVerifier], path: str, device: str, max_length: int) -> GenerativeVerifier:
    """``cls`` at ``path``, loaded once per process (by class, path, device and length)."""
    key = (cls.__name__, path, device, max_length)
    if key not in _LOADED:
        from rlvr.utils.device import resolve_device

        _LOADED[key] = cls(path, device=str(resolve_device(device)), max_length=max_length)
    return _LOADED[key]


def _check(params: dict[str, Any], **_: Any) -> None:
    check_causal_lm_dir(params["path"])  # config.json only: no weights before training starts


@reward_function("genrm", scope="group", check=_check)
def genrm_reward(path: str, device: str = "auto", max_length: PositiveInt = 4096) -> Callable[..., list[float]]:
    """A generative verifier's p(Yes) that the answer is correct (GenRM).

    The score in [0, 1] is ``p(Yes) / (p(Yes) + p(No))`` after "Is the answer correct (Yes/No)?" (Zhang et al.
    2024; :class:`rlvr.rewards.genrm.GenerativeVerifier`).

    ``path`` is any causal-LM directory, checked when the config loads and loaded at the first call.  It never
    reads the reference, so it can reward unlabelled prompts; as the only reward the policy learns what the
    verifier over-rewards, so beside a ``verifier`` function or at weight 0 (a logged monitor) is the usual use.
    """
    check_causal_lm_dir(path)

    def score(problem, completions: list[str]) -> list[float]:
        verifier = _loaded(GenerativeVerifier, path, device, max_length)
        return verifier.score_many([(problem, c) for c in completions])

    return score


@reward_function("pairwise", scope="group", check=_check)
def pairwise_reward(path: str, device: str = "auto", max_length: PositiveInt = 4096) -> Callable[..., list[float]]:
    """A round-robin tournament in the group, judged by a causal LM.

    Each completion's mean probability of beating each other completion of its group, ``p("A") / (p("A") +
    p("B"))`` after "Which response is better, A or B?", both orders averaged
    (:class:`rlvr.rewards.genrm.PairwiseJudge`).

    Pairwise rewards for tasks without a checkable answer (Pairwise-RL, Writing-Zero's pairwise GenRM, ArenaRL's
    tournaments): the reward is relative to the group, as GRPO's baseline is; ``G (G - 1)`` judge passes per group.
    Reference-free; the weight-0 monitor or a sum with a verifier is the safe use, as for ``genrm``.
    """
    check_causal_lm_dir(path)

    def score(problem, completions: list[str]) -> list[float]:
        return _loaded(PairwiseJudge, path, device, max_length).win_rates(problem, completions)

    return score
