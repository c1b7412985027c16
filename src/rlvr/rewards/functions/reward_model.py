"""The ``outcome_rm`` reward function: a learned outcome reward model's score as (part of) the reward."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import PositiveInt

from rlvr.rewards.models import OutcomeRewardModel, check_reward_model_dir
from rlvr.rewards.rubric import reward_function

__all__ = ["outcome_rm_reward"]

_LOADED: dict[tuple[str, str, int], OutcomeRewardModel] = {}
"""Models loaded in this process, by (path, device, max_length): one copy however often the rubric is built."""


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
