"""PPO with a learned value head: generalized advantage estimation and the clipped value loss.

Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
Advantage Estimation" (GAE); Schulman et al. 2017 (PPO); the value clipping of
the OpenAI baselines PPO2 implementation.  Conventions as in
:mod:`rlvr.algorithms.losses`: per-token tensors are [B, T], ``mask`` is 1 on the
completion tokens; masked-out positions are skipped (a value of the next
*counted* token is bootstrapped across them) and get 0.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from rlvr.algorithms.kl import kl_in_reward
from rlvr.algorithms.losses import aggregate_loss, masked_mean

__all__ = ["gae_advantages", "ppo_gae_advantages", "value_loss", "masked_whiten", "GAEParams"]


class GAEParams(BaseModel):
    """GAE's settings, declared once: the ``gae`` estimator's options (``algorithm.advantage_params``), which
    process rewards under PPO read too (Schulman et al. 2016, Eq. 16)."""

    model_config = ConfigDict(extra="forbid")

    gamma: float = Field(1.0, ge=0, le=1, description="discount per token (1: undiscounted returns)")
    lam: float = Field(1.0, ge=0, le=1, description="GAE's lambda (1: Monte-Carlo returns minus the value; 0: TD(0))")
    whiten: bool = Field(True, description="normalise the advantages over the batch's counted tokens")


def gae_advantages(token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0,
                   lam: float = 1.0) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, Eq. 16) over the counted tokens::

        delta_t = r_t + gamma * V_{t+1} - V_t          (V after the last counted token = 0)
        A_t     = sum_{l >= 0} (gamma * lam)^l * delta_{t+l}  =  delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                             (the value target, "returns")

    ``t + 1`` means the next position where ``mask`` is 1 (padding and holes
    are skipped).  ``lam = 1`` gives Monte-Carlo returns minus the value;
    ``lam = 0`` gives one-step TD errors.

    Args:
        token_rewards: [B, T] (see :func:`rlvr.algorithms.kl.kl_in_reward`).
        values: [B, T] value-head predictions for the state before each token (constants).
        mask: [B, T].

    Returns:
        ``(advantages, returns)``, both [B, T] and 0 where ``mask`` is 0, detached.
    """
    if not (token_rewards.shape == values.shape == mask.shape) or mask.dim() != 2:
        raise ValueError(f"token_rewards {tuple(token_rewards.shape)}, values {tuple(values.shape)} and mask "
                         f"{tuple(mask.shape)} must all be [B, T]")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"need gamma and lam in [0, 1], got {gamma}, {lam}")
    r = token_rewards.detach()
    dt = r.dtype if r.is_floating_point() else torch.get_default_dtype()
    r, v = r.to(dt), values.detach().to(dt)
    m = mask.bool()
    B, T = r.shape
    adv = torch.zeros(B, T, dtype=dt, device=r.device)
    next_value = torch.zeros(B, dtype=dt, device=r.device)
    last = torch.zeros(B, dtype=dt, device=r.device)
    for t in reversed(range(T)):
        mt = m[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        last = torch.where(mt, delta + gamma * lam * last, last)
        next_value = torch.where(mt, v[:, t], next_value)
        adv[:, t] = torch.where(mt, last, torch.zeros_like(last))
    returns = torch.where(m, adv + v, torch.zeros_like(adv))
    return adv, returns


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / (std + eps)`` over the counted positions (sample std), 0 elsewhere; the
    usual PPO advantage normalisation.  With fewer than two counted values, or all equal, it returns 0."""
    m = mask.to(x.dtype)
    n = m.sum()
    if n < 2:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / (n - 1)
    if var == 0:
        return torch.zeros_like(x)
    return (x - mean) / (var.sqrt() + eps) * m


def ppo_gae_advantages(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0,
                       kl: Tensor | None = None, kl_coef: float = 0.0,
                       whiten: bool = True) -> tuple[Tensor, Tensor]:
    """PPO advantages for outcome rewards (Ouyang et al. 2022 style RLHF-PPO)::

        r_{i,t} = 1[t = last_i] * r_i - kl_coef * KL_{i,t}       (kl_in_reward)
        A, R    = GAE(r, V, gamma, lam)                            (gae_advantages)
        A       = whiten(A) over the batch's counted tokens       (if whiten)

    Returns:
        ``(advantages, returns)`` [B, T]; ``returns`` (unwhitened) are the value targets.
    """
    token_rewards = kl_in_reward(rewards, mask, kl=kl, kl_coef=kl_coef)
    adv, ret = gae_advantages(token_rewards, values, mask, gamma=gamma, lam=lam)
    if whiten:
        adv = masked_whiten(adv, mask)
    return adv, ret


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *,
               clip_range: float | None = 0.2, agg: str = "token_mean",
               max_len: int | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss of PPO (OpenAI baselines PPO2)::

        V_clip = V_old + clip(V - V_old, -clip_range, clip_range)
        L_t    = 0.5 * max((V - R)^2, (V_clip - R)^2)          (0.5 * (V - R)^2 if clip_range is None)

    reduced with :func:`~rlvr.algorithms.losses.aggregate_loss`.  Gradient:
    ``dL_t/dV = V - R`` where the unclipped term is the max (or ``V_clip`` is not
    clamped), 0 where the clamped term is strictly larger.

    Returns:
        ``(loss, metrics)`` with ``vf_clip_frac`` (fraction of tokens whose clipped
        term is strictly larger) and ``value_mean``; detached 0-dim tensors.
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError("values, old_values, returns and mask must have the same [B, T] shape")
    ret = returns.detach()
    unclipped = (values - ret).square()
    if clip_range is None:
        per_token = 0.5 * unclipped
        clipped_active = torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        if clip_range <= 0:
            raise ValueError(f"clip_range must be > 0, got {clip_range}")
        old = old_values.detach()
        v_clip = old + torch.clamp(values - old, -clip_range, clip_range)
        clipped = (v_clip - ret).square()
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        clipped_active = clipped.detach() > unclipped.detach()
    loss = aggregate_loss(per_token, mask, agg, max_len)
    with torch.no_grad():
        metrics = {"vf_clip_frac": masked_mean(clipped_active.to(values.dtype), mask),
                   "value_mean": masked_mean(values.detach(), mask)}
    return loss, metrics
