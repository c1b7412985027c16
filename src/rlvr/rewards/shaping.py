"""Length-based reward shaping: DAPO's soft overlong punishment and LASER's step length reward.

Both return a reward *term* per sample, to be added to (soft overlong) or to
replace (LASER) the correctness reward before the advantage estimator runs.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["soft_overlong_punishment", "laser_reward"]


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
