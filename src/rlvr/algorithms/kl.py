"""Per-token estimators of KL(pi || pi_ref) from log-probs of tokens sampled from pi.

J. Schulman (2020), "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KL_ESTIMATORS", "kl_estimate"]

KL_ESTIMATORS = ("k1", "k2", "k3")


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
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; choose one of: {', '.join(KL_ESTIMATORS)}")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} differ in shape")
    log_ratio = ref_logp.detach() - logp
    if mask is not None:
        log_ratio = torch.where(mask.bool(), log_ratio, torch.zeros_like(log_ratio))
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0.0)
