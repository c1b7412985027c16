"""The ``rm_ensemble`` reward function: several learned outcome reward models, one conservative score."""

from __future__ import annotations

from typing import Any, Callable, Literal

import torch
from pydantic import NonNegativeFloat, PositiveInt
from torch import Tensor

from rlvr.rewards.functions.reward_model import _model
from rlvr.rewards.models import check_reward_model_dir
from rlvr.rewards.rubric import reward_function

__all__ = ["rm_ensemble_reward", "aggregate_ensemble"]


def aggregate_ensemble(scores: Tensor, aggregate: str, uwo_lambda: float = 1.0) -> Tensor:
    """One score per completion from ``scores`` [M models, G completions].

    Coste et al. 2024 ("Reward Model Ensembles Help Mitigate Overoptimization", Sec. 3) and Eisenstein et al. 2024
    ("Helping or Herding? Reward Model Ensembles Mitigate but do not Eliminate Reward Hacking", Sec. 3):

    * ``mean``: ``1/M sum_m R_m``;
    * ``median``: the models' median (for an even M, the mean of the two middle scores);
    * ``min`` (worst-case optimisation, WCO): ``min_m R_m``;
    * ``uwo`` (uncertainty-weighted optimisation): ``mean_m R_m - lambda * Var_m R_m``, the population variance
      over the M models.
    """
    if scores.dim() != 2 or scores.shape[0] < 1:
        raise ValueError(f"scores must be [models, completions], got shape {tuple(scores.shape)}")
    s = scores.double()
    if aggregate == "mean":
        out = s.mean(0)
    elif aggregate == "median":
        srt = torch.sort(s, 0).values
        m = s.shape[0]
        out = srt[m // 2] if m % 2 else (srt[m // 2 - 1] + srt[m // 2]) / 2
    elif aggregate == "min":
        out = s.min(0).values
    elif aggregate == "uwo":
        out = s.mean(0) - uwo_lambda * s.var(0, correction=0)
    else:
        raise ValueError(f"aggregate must be mean, median, min or uwo, got {aggregate!r}")
    return out.to(torch.float32)


def _check(params: dict[str, Any], **_: Any) -> None:
    paths = params["paths"]
    if len(paths) < 2:
        raise ValueError(f"paths: an ensemble needs at least 2 reward models, got {len(paths)}")
    if len(set(paths)) != len(paths):
        raise ValueError("paths: the same reward model is listed twice")
    for p in paths:
        check_reward_model_dir(p, "orm")


@reward_function("rm_ensemble", scope="group", check=_check)
def rm_ensemble_reward(paths: list[str], aggregate: Literal["mean", "median", "min", "uwo"] = "uwo",
                       uwo_lambda: NonNegativeFloat = 1.0, device: str = "auto", max_length: PositiveInt = 4096,
                       batch_size: PositiveInt = 16) -> Callable[..., Tensor]:
    """An ensemble of learned outcome reward models (each as ``outcome_rm`` loads it), scores in [0, 1] combined by
    ``aggregate`` (:func:`aggregate_ensemble`: ``mean``, ``median``, ``min`` = worst case, ``uwo`` = mean minus
    ``uwo_lambda`` times the models' variance).  Ensembles trained from different seeds disagree where the policy
    leaves their training distribution, so the conservative aggregates (``min``, ``uwo``) pay less for what only
    some models over-reward: they slow, but do not stop, reward hacking (Eisenstein et al. 2024).  Each
    directory is checked when the config loads and loaded at the first call; ``batch_size`` as in ``outcome_rm``.
    """
    for p in paths:
        check_reward_model_dir(p, "orm")

    def score(problem, completions: list[str]) -> Tensor:
        items = [(problem, c) for c in completions]
        per_model = torch.tensor([_model(p, device, max_length).score_many(items, batch_size) for p in paths])
        return aggregate_ensemble(per_model, aggregate, uwo_lambda)

    return score
