"""KL(pi || pi_ref): per-token estimators, the KL penalty folded into the reward, and the
periodic reference reset of ProRL.

J. Schulman (2020), "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html.
The KL as a *loss term* is :func:`rlvr.algorithms.losses.kl_loss` (and inside
``grpo_loss``); as part of the *reward* it is :func:`kl_in_reward` (PPO-RLHF,
Ouyang et al. 2022; REINFORCE++).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from rlvr.registry import Registry

from dataclasses import dataclass

__all__ = ["KL_ESTIMATORS", "kl_estimate", "outcome_token_rewards", "kl_in_reward", "ReferenceResetSchedule"]

KL_ESTIMATORS: Registry[Callable[[Tensor], Tensor]] = Registry("KL estimator", skip=1)
"""Per-token KL(pi || pi_ref) estimators by name, each ``fn(log_ratio) -> [B, T]`` with
``log_ratio = log pi_ref(x) - log pi(x)`` (Schulman 2020, "Approximating KL divergence")."""


@KL_ESTIMATORS.register("k1", doc="-log_ratio: unbiased, high variance, can be < 0")
def _k1(log_ratio: Tensor) -> Tensor:
    return -log_ratio


@KL_ESTIMATORS.register("k2", doc="0.5 log_ratio^2: biased, low variance, >= 0")
def _k2(log_ratio: Tensor) -> Tensor:
    return 0.5 * log_ratio.square()


@KL_ESTIMATORS.register("k3", doc="exp(log_ratio) - 1 - log_ratio: unbiased, low variance, >= 0 (GRPO's)")
def _k3(log_ratio: Tensor) -> Tensor:
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0.0)


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k3", mask: Tensor | None = None) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) (Schulman 2020).

    With tokens x ~ pi and the log-ratio ``log_ratio = log pi_ref(x) - log pi(x)``
    (note the direction: reference over policy)::

        k1 = -log_ratio                          # unbiased, high variance, can be < 0
        k2 = 0.5 * log_ratio ** 2                # biased, low variance, >= 0
        k3 = exp(log_ratio) - 1 - log_ratio      # unbiased, low variance, >= 0  (GRPO's choice)

    k3 is computed as ``expm1(log_ratio) - log_ratio`` (accurate near 0) and
    clamped at 0 so it is non-negative in floating point too.

    Args:
        logp: [B, T] log-probs of the sampled tokens under the policy (gradients flow here).
        ref_logp: [B, T] log-probs under the reference policy (treated as a constant).
        kind: ``"k1"``, ``"k2"`` or ``"k3"``.
        mask: optional [B, T]; where it is 0 the log-ratio is set to 0, so the
            estimate is 0 there and no inf/nan from padding can leak into
            values or gradients.

    Returns:
        [B, T] per-token estimates (not masked-averaged; see ``aggregate_loss``).
    """
    estimator = KL_ESTIMATORS.get(kind)
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} differ in shape")
    log_ratio = ref_logp.detach() - logp
    if mask is not None:
        log_ratio = torch.where(mask.bool(), log_ratio, torch.zeros_like(log_ratio))
    return estimator(log_ratio)


def outcome_token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """Place each sequence's outcome reward on its last counted token.

    ``out[i, t] = rewards[i]`` if ``t`` is the last position with ``mask[i, t] = 1``,
    else 0.  Rows without counted tokens get no reward.

    Args:
        rewards: [B]; mask: [B, T].

    Returns:
        [B, T] (floating point).
    """
    if mask.dim() != 2 or rewards.dim() != 1 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(f"need rewards [B] and mask [B, T], got {tuple(rewards.shape)} and {tuple(mask.shape)}")
    r = rewards.detach()
    if not r.is_floating_point():
        r = r.to(torch.get_default_dtype())
    m = mask.bool()
    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand_as(m)
    last = torch.where(m, pos, torch.full_like(pos, -1)).amax(-1)          # [B], -1 for empty rows
    out = torch.zeros(mask.shape, dtype=r.dtype, device=r.device)
    rows = (last >= 0).nonzero().squeeze(-1)
    out[rows, last[rows]] = r[rows]
    return out


def kl_in_reward(rewards: Tensor, mask: Tensor, *, kl: Tensor | None = None, kl_coef: float = 0.0) -> Tensor:
    """Token-level rewards with the KL penalty folded in (PPO-RLHF; Ouyang et al. 2022, REINFORCE++)::

        r_{i,t} = 1[t = last_i] * r_i - kl_coef * KL_{i,t}          (0 where mask is 0)

    ``kl`` is a per-token estimate, usually ``kl_estimate(rollout_logp,
    ref_logp, "k1")`` on the sampled tokens (k1 keeps the summed penalty an
    unbiased estimate of the sequence KL); it is treated as a constant.

    Args:
        rewards: [B] outcome rewards; mask: [B, T]; kl: optional [B, T].
        kl_coef: beta >= 0.

    Returns:
        [B, T] token rewards, to be turned into returns / advantages
        (REINFORCE++, GAE).
    """
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    out = outcome_token_rewards(rewards, mask)
    if kl is not None and kl_coef != 0:
        if kl.shape != mask.shape:
            raise ValueError(f"kl {tuple(kl.shape)} must have the mask's shape {tuple(mask.shape)}")
        pen = torch.where(mask.bool(), kl.detach().to(out.dtype), torch.zeros_like(out))
        out = out - kl_coef * pen
    elif kl_coef != 0:
        raise ValueError("kl_coef > 0 needs kl")
    return out


@dataclass
class ReferenceResetSchedule:
    """When to hard-reset the reference policy to the current policy (ProRL; Liu et al. 2025,
    "ProRL: Prolonged Reinforcement Learning Expands Reasoning Boundaries in Large Language Models").

    ProRL copies the online policy into the reference (and resets the
    optimizer state) periodically, so the KL penalty keeps the policy close to a
    recent checkpoint instead of pinning it to the initial model.  A reset is due
    at ``step`` when

    * ``every > 0`` and ``step - last_reset >= every``; or
    * ``kl_threshold`` is set and the measured ``kl`` exceeds it (at least
      ``min_interval`` steps after the last reset).

    Call :meth:`should_reset` once per step; when it returns True, copy the
    weights (the trainer's job) and call :meth:`mark_reset`.  ``state_dict`` /
    ``load_state_dict`` make it resumable.
    """

    every: int = 0
    kl_threshold: float | None = None
    min_interval: int = 1
    last_reset: int = 0

    def __post_init__(self):
        if self.every < 0:
            raise ValueError(f"every must be >= 0, got {self.every}")
        if self.kl_threshold is not None and not self.kl_threshold > 0:
            raise ValueError(f"kl_threshold must be > 0, got {self.kl_threshold}")

    def should_reset(self, step: int, kl: float | None = None) -> bool:
        since = step - self.last_reset
        if self.every > 0 and since >= self.every:
            return True
        if self.kl_threshold is not None and kl is not None and math.isfinite(kl):
            return since >= self.min_interval and kl > self.kl_threshold
        return False

    def mark_reset(self, step: int) -> None:
        self.last_reset = step

    def state_dict(self) -> dict:
        return {"last_reset": self.last_reset}

    def load_state_dict(self, state: dict) -> None:
        self.last_reset = int(state["last_reset"])
