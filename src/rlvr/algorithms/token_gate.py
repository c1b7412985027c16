"""Token-level entropy gating: the policy gradient on the high-entropy minority of tokens only."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["high_entropy_token_mask"]


def high_entropy_token_mask(entropy: Tensor, mask: Tensor, fraction: float) -> tuple[Tensor, float]:
    """``([B, T] 0/1 mask, threshold)``: the ``ceil(fraction * N)`` counted tokens of highest entropy.

    Wang et al. 2025 ("Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning
    for LLM Reasoning", arXiv 2506.01939, Sec. 5): over the ``N`` completion tokens of a batch (``mask``), keep
    the policy gradient of the tokens whose entropy ``H_t = -sum_v pi(v) log pi(v)`` lies in the top ``fraction``
    (the paper's rho = 20%: ``H_t >= tau_rho``, the batch's (1 - rho) quantile) and drop the rest.  Ties at the
    threshold keep the earlier token (a stable sort), so exactly ``ceil(fraction * N)`` tokens are kept;
    ``fraction = 1`` keeps every counted token.  ``threshold`` is the smallest kept entropy (``inf`` for no
    tokens).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    counted = mask.reshape(-1) > 0
    n = int(counted.sum())
    out = torch.zeros(mask.numel(), dtype=torch.float32)
    if n == 0:
        return out.view(mask.shape), math.inf
    keep = min(n, math.ceil(fraction * n - 1e-9))
    idx = counted.nonzero().squeeze(1)
    values = entropy.reshape(-1)[idx].float()
    order = torch.sort(-values, stable=True).indices[:keep]
    out[idx[order]] = 1.0
    return out.view(mask.shape), float(values[order].min())
