"""Group-relative advantages (GRPO and Dr. GRPO).

Every prompt is sampled ``G`` times (a *group*); each completion's advantage is
its reward relative to the other completions of the same prompt, so no value
network is needed.  Groups are consecutive blocks of ``group_size`` rewards:
``rewards[k*G:(k+1)*G]`` belong to prompt ``k``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = [
    "group_normalized_advantages",
    "grpo_advantages",
    "drgrpo_advantages",
    "group_stats",
    "ADVANTAGE_ESTIMATORS",
    "get_advantage_estimator",
]

AdvantageEstimator = Callable[[Tensor, int], Tensor]


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """``rewards`` [N] as a float [N / group_size, group_size] view, with checks."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    if n % group_size:
        raise ValueError(f"number of rewards ({n}) is not divisible by group_size ({group_size})")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    return rewards.reshape(n // group_size, group_size)


def _group_std(r: Tensor) -> Tensor:
    """Per-group sample std (Bessel-corrected, ``correction=1``); 0 for groups of one."""
    if r.shape[1] < 2:
        return torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    return r.std(dim=1, correction=1)


def _zero_variance(r: Tensor) -> Tensor:
    """Bool [num_groups]: all rewards in the group are equal."""
    return (r == r[:, :1]).all(dim=1)


def group_normalized_advantages(rewards: Tensor, group_size: int, *, scale_by_std: bool = True,
                                eps: float = 1e-6) -> Tensor:
    """Group-relative advantages of GRPO (Shao et al. 2024, *DeepSeekMath*, Sec. 4.1.2).

    For a group of rewards ``r_1..r_G`` of the same prompt::

        A_i = (r_i - mean(r)) / (std(r) + eps)        # GRPO (scale_by_std=True)
        A_i =  r_i - mean(r)                          # Dr. GRPO (Liu et al. 2025, scale_by_std=False)

    ``std`` is the *sample* standard deviation (Bessel-corrected,
    ``torch.std(correction=1)``), which is what ``torch.Tensor.std`` does by
    default and what the TRL ``GRPOTrainer`` and the DeepSeekMath-style
    implementations use.  Dr. GRPO drops the division because it up-weights
    prompts whose rewards barely vary (too easy or too hard) and biases the
    objective.

    Groups whose rewards are all equal carry no learning signal and get an
    advantage of exactly 0 (not a rounding residue), so callers can skip them.
    Groups of size 1 are such groups.

    Args:
        rewards: [N] rewards, grouped in consecutive blocks of ``group_size``.
        group_size: G; ``N`` must be divisible by it.
        scale_by_std: divide by the group std (GRPO) or not (Dr. GRPO).
        eps: added to the std in the denominator.

    Returns:
        [N] advantages (floating point; integer rewards are converted).
    """
    r = _grouped(rewards, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale_by_std:
        adv = adv / (_group_std(r).unsqueeze(1) + eps)
    adv = torch.where(_zero_variance(r).unsqueeze(1), torch.zeros_like(adv), adv)
    return adv.reshape(-1)


def grpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """GRPO advantages, ``(r - mean) / (std + 1e-6)`` per group (Shao et al. 2024)."""
    return group_normalized_advantages(rewards, group_size, scale_by_std=True)


def drgrpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """Dr. GRPO advantages, ``r - mean`` per group (Liu et al. 2025, *Understanding R1-Zero-Like Training*)."""
    return group_normalized_advantages(rewards, group_size, scale_by_std=False)


def group_stats(rewards: Tensor, group_size: int) -> dict[str, Tensor]:
    """Per-group reward statistics.

    Returns a dict of tensors:

    * ``mean``: [N / G] group means;
    * ``std``: [N / G] group sample stds (``correction=1``, as in
      :func:`group_normalized_advantages`; 0 for groups of one);
    * ``zero_variance``: [N / G] bool, all rewards of the group equal;
    * ``zero_variance_frac``: 0-dim, fraction of groups with zero variance
      (these contribute no policy gradient).
    """
    r = _grouped(rewards, group_size)
    zv = _zero_variance(r)
    return {
        "mean": r.mean(dim=1),
        "std": _group_std(r),
        "zero_variance": zv,
        "zero_variance_frac": zv.to(r.dtype).mean(),
    }


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo_advantages,
    "drgrpo": drgrpo_advantages,
}
"""Advantage estimators by name; each maps ``(rewards [N], group_size) -> advantages [N]``."""


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered under ``name`` in :data:`ADVANTAGE_ESTIMATORS`."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; "
                         f"choose one of: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}") from None
