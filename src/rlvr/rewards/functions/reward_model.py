"""Learned reward models as reward functions: ``outcome_rm`` (an ORM's score) and ``prm`` (a PRM's aggregated step
scores), each loaded once per process at its first call."""

from __future__ import annotations

from typing import Any, Callable, Literal

from pydantic import PositiveInt

from rlvr.rewards.models import (AGGREGATIONS, OutcomeRewardModel, ProcessRewardModel, check_reward_model_dir,
                                 prm_format)
from rlvr.rewards.rubric import reward_function

__all__ = ["outcome_rm_reward", "prm_reward"]

_LOADED: dict[tuple, OutcomeRewardModel | ProcessRewardModel] = {}
"""Models loaded in this process, by what they were loaded with: one copy however often the rubric is built."""


def _model(path: str, device: str, max_length: int) -> OutcomeRewardModel:
    key = (path, device, max_length)
    if key not in _LOADED:
        from rlvr.utils.device import resolve_device

        _LOADED[key] = OutcomeRewardModel(path, device=str(resolve_device(device)), max_length=max_length)
    return _LOADED[key]


def _check(params: dict[str, Any], **_: Any) -> None:
    check_reward_model_dir(params["path"], "orm")  # reads config.json only: no weights before training starts


@reward_function("outcome_rm", scope="group", check=_check)
def outcome_rm_reward(path: str, device: str = "auto", max_length: PositiveInt = 4096,
                      batch_size: PositiveInt = 16) -> Callable[..., list[float]]:
    """A learned outcome reward model's score in [0, 1] of each completion (the ORM's sigmoid, or its probability
    of "correct").

    ``path`` is a sequence-classifier directory (``rlvr rm train kind=orm`` writes one; any HF reward model with
    one or two labels loads the same way), checked when the config loads and loaded at the first call; a group's
    G completions are scored in batches of ``batch_size`` on ``device`` (``auto``: the GPU when there is one).
    As the only reward (``[{kind: outcome_rm, params: {path: DIR}}]``) the policy is trained on the model alone
    and will learn what the model over-rewards (Gao et al. 2023, "Scaling Laws for Reward Model
    Overoptimization"); beside a ``verifier`` function, or at weight 0 as a monitor, the held-out evaluations
    log its score next to the verified accuracy (``heldout_reward/<name>``), which draws that curve.
    """
    check_reward_model_dir(path, "orm")

    def score(problem, completions: list[str]) -> list[float]:
        return _model(path, device, max_length).score_many([(problem, c) for c in completions], batch_size)

    return score


def _check_prm(params: dict[str, Any], **_: Any) -> None:
    check_reward_model_dir(params["path"], "prm")


def _prm(path: str, device: str, opts: tuple) -> ProcessRewardModel:
    key = ("prm", path, device, opts)
    if key not in _LOADED:
        from rlvr.utils.device import resolve_device

        _LOADED[key] = ProcessRewardModel(path, device=str(resolve_device(device)), **dict(opts))
    return _LOADED[key]


@reward_function("prm", scope="group", check=_check_prm)
def prm_reward(path: str, aggregate: Literal["min", "last", "mean", "prod"] = "min", device: str = "auto",
               step_tag: str | None = None, good: str | None = None, bad: str | None = None,
               delimiter: str | None = None, only_when_correct: bool = False) -> Callable[..., list[float]]:
    """A process reward model's step scores, aggregated into one score in [0, 1] per completion.

    ``path`` is a Math-Shepherd PRM directory (``rlvr rm train kind=prm`` writes one): each completion is split
    into steps at ``delimiter``, every step scored, and the scores aggregated by ``aggregate`` (``min``: a
    solution is worth its weakest step, as Lightman et al. 2023 and PURE's min-form; ``last``, ``mean``,
    ``prod``).  The input format (step tag, good / bad tokens, delimiter) is the one its
    ``rlvr_reward_model.json`` records unless given.  For step scores as per-token credit instead of one
    score, see ``reward.process_prm``.

    ``only_when_correct``: Posterior-GRPO's gate (Fan et al. 2025, "Posterior-GRPO: Rewarding Reasoning Processes in
    Code Generation", Sec. 3: ``R = R_outcome + 1[outcome correct] * R_process``): the process score counts only for
    a sample its verdict calls correct (0 otherwise, and the PRM is not asked), so a well-written wrong solution
    earns nothing from its reasoning and the policy cannot trade correctness for process reward.
    """
    check_reward_model_dir(path, "prm")
    if aggregate not in AGGREGATIONS:
        raise ValueError(f"aggregate must be one of {AGGREGATIONS}, got {aggregate!r}")
    opts = tuple(prm_format(path, step_tag=step_tag, good=good, bad=bad, delimiter=delimiter).items())

    def score(problem, completions: list[str], correct) -> list[float]:
        model = _prm(path, device, opts + (("aggregate", aggregate),))
        return [model.score(problem, c) if (not only_when_correct or float(ok) > 0) else 0.0
                for c, ok in zip(completions, correct)]

    return score
