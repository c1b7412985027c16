"""DGPO's difficulty-balanced advantages (MathForge: "Harder Is Better", Dai et al. 2026)."""

from __future__ import annotations

import torch
from pydantic import NonNegativeFloat, PositiveFloat
from torch import Tensor

__all__ = ["dgpo_advantages"]


def dgpo_advantages(rewards: Tensor, group_size: int, *, temperature: PositiveFloat = 2.0,
                    question_weighting: bool = True, eps: NonNegativeFloat = 1e-4) -> Tensor:
    """Difficulty-Aware Group Policy Optimization's advantages: DGAE, then DQW.

    Dai et al. 2026 ("Harder Is Better: Boosting Mathematical Reasoning via Difficulty-Aware GRPO and Multi-Aspect
    Question Reformulation", arXiv 2601.20614), as in the authors' release (a patched TRL GRPO trainer):

    * **DGAE** (difficulty-balanced group advantage estimation): GRPO's division by the group's std makes the
      total update size ``sum_i |A_i|`` of a question depend on its accuracy p (``G sqrt(p(1-p))``-like, largest
      at p = 1/2); dividing by the mean absolute deviation instead gives every question the same total::

          A_i = (r_i - mean_j r_j) / (MAD + eps / G),   MAD = mean_j |r_j - mean_k r_k|

      i.e. the release's ``G (r_i - mean) / (sum_j |r_j - mean| + eps)``, so ``sum_i |A_i| = G`` in every group
      that has a spread.
    * **DQW** (difficulty-aware question weighting): among the batch's M groups with a spread, group q's
      advantages are scaled by ``M softmax_q(-mean_q / temperature)``: harder questions (lower mean reward) weigh
      more, the weights average 1.  Groups without a spread keep weight 1 (their advantages are 0).

    The release also rescales the token-mean loss by the share of tokens in groups with a spread
    (``zero_mask_ratio``, a property of its loss normalisation, not of the advantages): rlvr leaves that to
    ``algorithm.loss_agg`` / ``algorithm.skip_zero_advantage``.  The mean in DQW is of the training reward (the
    release's first reward function, its accuracy, which it is when ``reward.functions`` is one verifier).

    Returns:
        [N] advantages.
    """
    r = rewards.reshape(-1, group_size).double()
    mean = r.mean(1, keepdim=True)
    dev = r - mean
    extent = dev.abs().sum(1, keepdim=True)
    adv = group_size * dev / (extent + eps)
    spread = ~torch.isclose(r.std(1, correction=1) if group_size > 1 else torch.zeros(r.shape[0], dtype=r.dtype),
                            torch.zeros(r.shape[0], dtype=r.dtype))
    adv[~spread] = 0.0
    if question_weighting and bool(spread.any()):
        weights = torch.ones(r.shape[0], dtype=r.dtype)
        m = int(spread.sum())
        weights[spread] = m * torch.softmax(-mean[spread, 0] / temperature, 0)
        adv = adv * weights[:, None]
    return adv.reshape(-1).to(rewards.dtype)
