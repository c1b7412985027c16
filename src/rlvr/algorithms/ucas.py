"""UCAS: uncertainty-aware advantage shaping (response-level self-confidence, token-level logit certainty)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ucas_advantages", "minmax_over_mask"]


def minmax_over_mask(x: Tensor, mask: Tensor, eps: float = 1e-6) -> Tensor:
    """``(x - min) / (max - min + eps)`` over the masked entries of the batch, 0 off the mask; 0.5 everywhere on it
    when all masked entries are equal (UCAS's ``_normalize_kl_certainty``)."""
    m = mask.bool()
    if not m.any():
        return torch.zeros_like(x)
    lo, hi = x[m].min(), x[m].max()
    if torch.isclose(hi, lo):
        return torch.full_like(x, 0.5) * mask
    return (x - lo) / (hi - lo + eps) * mask


def ucas_advantages(rewards: Tensor, group_size: int, *, certainty: Tensor, token_logits: Tensor, mask: Tensor,
                    beta_pos: float = 0.25, beta_neg: float = 0.35, logit_coef: float = 0.05,
                    eps: float = 1e-6) -> Tensor:
    """UCAS's two-stage advantage [N, T] (Xie et al. 2025, "Unlocking Exploration in RLVR: Uncertainty-aware
    Advantage Shaping for Deeper Reasoning", arXiv 2510.10649; as in the authors' ``compute_ucas_advantage``).

    Stage 1 (response level): with ``A_i`` GRPO's group-normalised advantage and ``c_i`` the response's
    self-confidence ``sum_t KL(U || p_t)`` z-scored within its group (the same mean / sample-std normalisation)::

        A'_i = A_i * exp(-beta_pos * c_i)      if A_i > 0   (a confident correct answer is reinforced less)
        A'_i = A_i * exp( beta_neg * c_i)      otherwise    (a confident wrong answer is pushed down harder)

    Stage 2 (token level): ``raw_{i,t} = A'_i - logit_coef * l~_{i,t}``, with ``l~`` the generated token's raw logit
    min-max normalised over every completion token of the batch; where ``A'_i > 0`` the result is floored at 0
    (a positive trajectory never turns negative): ``A_{i,t} = max(raw, 0)`` there, ``raw`` elsewhere.

    Args:
        rewards: [N] (groups of ``group_size`` consecutive samples).
        certainty: [N, T] per-token ``KL(U || p)`` of the policy (0 off the completion).
        token_logits: [N, T] the raw logit of each generated token.
        mask: [N, T] the completion tokens.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards are not groups of {group_size}")
    m = mask.float()
    r = rewards.float().view(-1, group_size)
    c = (certainty.float() * m).sum(-1).view(-1, group_size)
    if group_size > 1:
        a = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + eps)
        z = (c - c.mean(-1, keepdim=True)) / (c.std(-1, keepdim=True) + eps)
    else:  # one sample per prompt: mean 0, std 1 (the authors' single-sample case)
        a, z = r, c
    a, z = a.reshape(-1, 1) * m, z.reshape(-1, 1) * m
    scaled = a * torch.where(a > 0, torch.exp(-beta_pos * z), torch.exp(beta_neg * z))
    raw = scaled - logit_coef * minmax_over_mask(token_logits.float(), m)
    return torch.where(scaled > 0, raw.clamp(min=0.0), raw) * m
