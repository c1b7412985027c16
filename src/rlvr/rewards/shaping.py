"""Reward shaping: DAPO's soft overlong punishment and LASER's length reward, and the registry of shaping terms.

The pure functions return a reward *term* per sample, to be added to (soft overlong) or to
replace (LASER) the correctness reward before the advantage estimator runs.

:data:`REWARD_SHAPING` holds the terms the reward pipeline (:mod:`rlvr.rewards.pipeline`)
applies, named in ``reward.shaping`` with their options, e.g.
``reward.shaping: {overlong: {cache_len: 16}}``.  A term is a function
``term(reward [G], group, **options) -> reward [G]`` of one group's rewards and its
:class:`~rlvr.rewards.pipeline.GroupScores` (verdicts, lengths, ``max_new_tokens``).
Adding one is one file::

    from rlvr.rewards.shaping import REWARD_SHAPING

    @REWARD_SHAPING.register("brevity", doc="-coef per generated token")
    def brevity(reward, group, *, coef: float = 0.001):
        return reward - coef * group.lengths

An entry tagged ``verdict`` reads the verifier's verdict (LASER's bonus is for correct
answers): it is refused with a reward source other than the verifier.  An entry's ``check``
sees ``max_new_tokens`` when the config loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from pydantic import NonNegativeFloat, PositiveInt
from torch import Tensor

from rlvr.registry import Registry

if TYPE_CHECKING:
    from rlvr.rewards.pipeline import GroupScores

__all__ = ["soft_overlong_punishment", "laser_reward", "REWARD_SHAPING", "overlong_term", "laser_term"]


def _lengths(lengths) -> Tensor:
    x = torch.as_tensor(lengths)
    if x.dim() != 1:
        raise ValueError(f"lengths must be 1-D [N], got shape {tuple(x.shape)}")
    return x.to(torch.get_default_dtype())


def soft_overlong_punishment(lengths, max_len: int, cache_len: int) -> Tensor:
    """Soft overlong punishment of DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement
    Learning System at Scale", Eq. 13), with ``L_max = max_len`` and ``L_cache = cache_len``::

        R_len(y) = 0                                      |y| <= L_max - L_cache
                 = ((L_max - L_cache) - |y|) / L_cache    L_max - L_cache < |y| <= L_max
                 = -1                                     |y| > L_max

    Added to the correctness reward; the penalty ramps linearly from 0 to -1
    over the last ``cache_len`` tokens of the budget (DAPO: 20480 / 4096).

    Args:
        lengths (Tensor | Sequence[int]): [N] completion lengths in tokens.

    Returns:
        [N] penalties in [-1, 0].
    """
    if not (0 < cache_len <= max_len):
        raise ValueError(f"need 0 < cache_len <= max_len, got {cache_len}, {max_len}")
    L = _lengths(lengths)
    start = max_len - cache_len
    ramp = (start - L) / cache_len
    out = torch.where(L <= start, torch.zeros_like(L), ramp)
    return torch.where(L > max_len, torch.full_like(L, -1.0), out)


def laser_reward(correct, lengths, target_length, *, alpha: float = 0.5, wrong_reward: float = 0.0) -> Tensor:
    """LASER, length-based step reward (Liu et al. 2025, "Learn to Reason Efficiently with Adaptive
    Length-based Reward Shaping", Sec. 3; R^ = C(y) + lambda(y) S(y))::

        R^(y) = C(y) + alpha * 1[y correct] * 1[L(y) <= L_T]

    with ``C(y) = 1`` if correct else ``wrong_reward``: a correct answer within
    the target length ``L_T`` earns a bonus ``alpha``; length never hurts a
    correct answer beyond losing the bonus, and never helps a wrong one.
    ``target_length`` may be a scalar or a per-sample [N] tensor, which is how
    LASER-D's difficulty-dependent targets are passed.

    Args:
        correct (Tensor | Sequence[bool]): [N] bool (or {0, 1}) correctness.
        lengths (Tensor | Sequence[int]): [N] completion lengths.

    Returns:
        [N] shaped rewards.
    """
    c = torch.as_tensor(correct).reshape(-1).bool()
    L = _lengths(lengths)
    if c.shape != L.shape:
        raise ValueError(f"correct {tuple(c.shape)} and lengths {tuple(L.shape)} differ in shape")
    lt = torch.as_tensor(target_length, dtype=L.dtype)
    if lt.dim() > 0 and lt.shape != L.shape:
        raise ValueError(f"target_length must be a scalar or [N], got {tuple(lt.shape)}")
    base = torch.where(c, torch.ones_like(L), torch.full_like(L, wrong_reward))
    bonus = (c & (L <= lt)).to(L.dtype) * alpha
    return base + bonus


# --------------------------------------------------------------------------- registered terms
REWARD_SHAPING: Registry[Callable[..., Tensor]] = Registry("reward shaping term", skip=2)
"""Shaping terms by name: ``term(reward [G], group: GroupScores, **options) -> reward [G]``; ``reward.shaping``
names the ones a run applies, in the order it lists them."""


def _check_overlong(params: dict[str, Any], *, max_new_tokens: int | None = None, **_: Any) -> None:
    if max_new_tokens is not None and params["cache_len"] > max_new_tokens:
        raise ValueError(f"cache_len={params['cache_len']} must be at most rollout.max_new_tokens={max_new_tokens} "
                         "(the window ends there)")


@REWARD_SHAPING.register("overlong", check=_check_overlong)
def overlong_term(reward: Tensor, group: GroupScores, *, cache_len: PositiveInt) -> Tensor:
    """DAPO's soft overlong punishment (:func:`soft_overlong_punishment`) over the last ``cache_len`` tokens before
    ``rollout.max_new_tokens``, added to the reward of any source."""
    return reward + soft_overlong_punishment(group.lengths, group.max_new_tokens, cache_len)


@REWARD_SHAPING.register("laser", tags={"verdict"})
def laser_term(reward: Tensor, group: GroupScores, *, target_length: PositiveInt,
               alpha: NonNegativeFloat = 0.5) -> Tensor:
    """LASER (:func:`laser_reward`): a bonus ``alpha`` for correct answers of at most ``target_length`` tokens;
    LASER's reward is ``1[correct] + bonus``, so the bonus alone is added to the verifier's scaled reward."""
    return reward + laser_reward(group.correct, group.lengths, target_length, alpha=alpha) - group.correct
