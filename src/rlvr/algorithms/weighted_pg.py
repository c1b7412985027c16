"""Policy gradients that reshape the importance weight instead of clipping the update: CISPO and SAPO.

PPO's clipped surrogate (:func:`~rlvr.algorithms.losses.ppo_clip_loss`) gives a token *no* gradient once its
ratio ``r = pi_theta / pi_old`` has left the clip range in the direction of its advantage.  The two losses
here keep every token's gradient and act on its weight instead.  Per token, with ``A`` the advantage, both
have the form ``dL/dlogp = -w(r) A`` (times the aggregation weight):

* **CISPO** (MiniMax et al. 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
  Attention", arXiv 2506.13585, Sec. 3.1): ``w = clip(r, 1 - eps_low, 1 + eps_high)``, a constant (stop
  gradient): the weight is capped, the token never dropped.
* **SAPO** (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347): the hard clip becomes a
  sigmoid gate of temperature ``tau``, ``w = 4 sigma(tau (r - 1)) (1 - sigma(tau (r - 1))) r``: 1 on-policy,
  falling smoothly to 0 as the token moves off-policy, faster for a larger ``tau``; tokens of negative
  advantage get their own (by default larger) temperature.

At ratio 1, i.e. with one optimizer step per rollout batch, ``w = 1`` for both: the plain policy gradient.
Their weights act from the second optimizer step on a batch (``algorithm.mini_batches`` or ``ppo_epochs`` > 1).

Both follow the signature of every policy loss (see :mod:`rlvr.algorithms.losses`) and register in
:data:`~rlvr.algorithms.losses.POLICY_LOSSES` as ``cispo`` and ``sapo``.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from rlvr.algorithms.losses import (
    POLICY_LOSSES,
    _apply_is_weights,
    _check_policy_inputs,
    _per_token_advantages,
    aggregate_loss,
    masked_mean,
)

__all__ = ["cispo_loss", "sapo_loss", "sapo_gate", "CISPOParams", "SAPOParams"]

_MAX_LOG_RATIO = 20.0
"""SAPO's log-ratio is capped here before ``exp`` (as verl does): beyond it the gate is flat to float precision, and
``exp`` of a larger value would overflow into ``0 * inf``."""


# --------------------------------------------------------------------------- options
class CISPOParams(BaseModel):
    """Options of ``cispo`` (``algorithm.policy_loss_params``)."""

    model_config = ConfigDict(extra="forbid")
    clip_low: float = Field(1.0, ge=0, le=1, description="eps_low^IS: IS weight floored at 1 - clip_low "
                                                          "(1: no floor, the paper's choice)")
    clip_high: float = Field(4.0, ge=0, description="eps_high^IS: IS weight capped at 1 + clip_high "
                                                    "(4: cap 5, ScaleRL's and TRL's recommended value)")


class SAPOParams(BaseModel):
    """Options of ``sapo`` (``algorithm.policy_loss_params``)."""

    model_config = ConfigDict(extra="forbid")
    tau_pos: float = Field(1.0, gt=0, description="gate temperature for tokens with A > 0 (larger: narrower "
                                                  "trust region)")
    tau_neg: float = Field(1.05, gt=0, description="gate temperature for tokens with A <= 0 (the paper: above "
                                                   "tau_pos, a narrower region for negative updates)")


# --------------------------------------------------------------------------- CISPO
def cispo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float = 1.0,
               clip_high: float = 4.0, agg: str = "token_mean", max_len: int | None = None,
               is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO, clipped IS-weight policy optimization (MiniMax et al. 2025, "MiniMax-M1: Scaling Test-Time
    Compute Efficiently with Lightning Attention", arXiv 2506.13585, Sec. 3.1, the CISPO objective)::

        J(theta) = 1 / sum_i |o_i| * sum_i sum_t sg(r^_{i,t}) A_{i,t} log pi_theta(o_{i,t})
        r^_{i,t} = clip(r_{i,t}, 1 - eps_low^IS, 1 + eps_high^IS),    r_{i,t} = pi_theta(o_{i,t}) / pi_old(o_{i,t})

    The importance-sampling weight is clipped and held constant (``sg``, stop-gradient); the token's update is
    not: ``dL/dlogp_t = -r^_t A_t`` for *every* token, where PPO gives a token whose ratio has left the clip
    range (in its advantage's direction) none.  The loss minimised per token is
    ``L_t = -sg(r^_t) A_t (logp_t - old_logp_t)``: the paper's objective (negated) less the constant
    ``sg(r^_t) A_t old_logp_t``, so the gradient is the paper's and the value is 0 on-policy (verl and TRL
    minimise ``-sg(r^_t) A_t logp_t``).  Reduced with :func:`~rlvr.algorithms.losses.aggregate_loss`
    (``agg``, default ``token_mean``: the paper's ``1 / sum_i |o_i|``).  ``is_weights`` multiply the per-token
    loss.

    ``clip_low`` / ``clip_high`` are ``eps_low^IS`` / ``eps_high^IS``.  The paper sets no lower bound ("setting
    eps_low^IS to a large value") and tunes only the upper one, without publishing it; the default
    ``clip_low = 1`` floors the weight at 0 (no bound) and ``clip_high = 4`` caps it at 5, the cap ScaleRL
    (Khatri et al. 2025) uses and TRL recommends.  (TRL's ``epsilon_high`` is that cap itself, ``r^ =
    min(r, epsilon_high)``; verl reuses the actor's PPO ``clip_ratio_low / high``, default 0.2.)

    Returns:
        ``(loss, metrics)``: ``clip_frac_low`` / ``clip_frac_high``: share of the counted tokens whose weight
        was raised to ``1 - clip_low`` / capped at ``1 + clip_high`` (whatever their advantage; they keep their
        gradient), ``clip_frac`` their sum, ``ratio_mean``, ``approx_kl`` (``0.5 (log r)^2``) and
        ``is_weight_mean`` (mean ``r^``).
    """
    _check_policy_inputs(logp, old_logp, mask)
    if not 0 <= clip_low <= 1 or not clip_high >= 0:
        raise ValueError(f"need 0 <= clip_low <= 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    log_ratio = torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))
    with torch.no_grad():  # sg(clip(r)): the weight is a constant
        ratio = torch.exp(log_ratio)
        weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = _apply_is_weights(-weight * adv * log_ratio, is_weights)
    loss = aggregate_loss(per_token, mask, agg, max_len)
    with torch.no_grad():
        low = (ratio < 1.0 - clip_low).to(ratio.dtype)
        high = (ratio > 1.0 + clip_high).to(ratio.dtype)
        metrics = {
            "clip_frac": masked_mean(low + high, mask),
            "clip_frac_low": masked_mean(low, mask),
            "clip_frac_high": masked_mean(high, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "approx_kl": masked_mean(0.5 * log_ratio.detach().square(), mask),
            "is_weight_mean": masked_mean(weight, mask),
        }
    return loss, metrics


# --------------------------------------------------------------------------- SAPO
def sapo_gate(ratio: Tensor, tau: Tensor | float) -> Tensor:
    """SAPO's soft gate (Gao et al. 2025, arXiv 2511.20347): ``f(r) = 4 / tau * sigma(tau (r - 1))``.

    ``f(1) = 2 / tau`` and ``f'(r) = 4 sigma (1 - sigma)``, which is 1 at ``r = 1``: on-policy the gate's
    gradient is the policy gradient's, whatever the temperature; it decays like ``exp(-tau |r - 1|)`` away
    from 1, a soft trust region in place of PPO's hard clip."""
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


def sapo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, tau_pos: float = 1.0,
              tau_neg: float = 1.05, agg: str = "seq_mean_token_mean", max_len: int | None = None,
              is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """SAPO, soft adaptive policy optimization (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv
    2511.20347, the SAPO objective)::

        J(theta) = 1/G sum_i 1/|y_i| sum_t f_{i,t}(r_{i,t}) A_{i,t}
        f_{i,t}(r) = sigma(tau_{i,t} (r - 1)) * 4 / tau_{i,t},    tau_{i,t} = tau_pos if A_{i,t} > 0 else tau_neg

    with ``r_{i,t} = pi_theta(y_{i,t}) / pi_old(y_{i,t})`` the token ratio (:func:`sapo_gate`).  Its gradient
    is the policy gradient with a smooth weight in place of PPO's hard clip::

        dL/dlogp_{i,t} = -w_{i,t} A_{i,t},    w_{i,t} = 4 p (1 - p) r_{i,t},    p = sigma(tau_{i,t} (r_{i,t} - 1))

    (times the aggregation weight): ``w = 1`` on-policy, decaying smoothly as the token moves off-policy in
    either direction, faster with a larger temperature.  ``tau_neg > tau_pos`` (the paper's 1.05 vs 1.0, the
    defaults of verl and TRL) narrows the region for negative-advantage tokens: the paper argues their updates,
    which raise the logits of every token not sampled, destabilise training more.  The loss is ``L_t = -f(r_t) A_t`` reduced
    with :func:`~rlvr.algorithms.losses.aggregate_loss`, by default ``seq_mean_token_mean``: the paper's
    ``1/G sum_i 1/|y_i|`` (verl forces it for SAPO; TRL uses it).  ``is_weights`` multiply the per-token loss.
    The log-ratio is capped at 20 before ``exp`` (as in verl), where the gate's gradient is already 0.

    Returns:
        ``(loss, metrics)``: ``clip_frac`` (and ``_low`` / ``_high``) are 0 (nothing is clipped),
        ``ratio_mean``, ``approx_kl`` (``0.5 (log r)^2``) and ``gate_weight_mean`` (mean ``w``).
    """
    _check_policy_inputs(logp, old_logp, mask)
    if not tau_pos > 0 or not tau_neg > 0:
        raise ValueError(f"need tau_pos > 0 and tau_neg > 0, got {tau_pos}, {tau_neg}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    log_ratio = torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))
    ratio = torch.exp(log_ratio.clamp(max=_MAX_LOG_RATIO))
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    per_token = _apply_is_weights(-sapo_gate(ratio, tau) * adv, is_weights)
    loss = aggregate_loss(per_token, mask, agg, max_len)
    with torch.no_grad():
        r = ratio.detach()
        p = torch.sigmoid(tau * (r - 1.0))
        zero = masked_mean(torch.zeros_like(r), mask)
        metrics = {
            "clip_frac": zero,
            "clip_frac_low": zero.clone(),
            "clip_frac_high": zero.clone(),
            "ratio_mean": masked_mean(r, mask),
            "approx_kl": masked_mean(0.5 * log_ratio.detach().square(), mask),
            "gate_weight_mean": masked_mean(4.0 * p * (1.0 - p) * r, mask),
        }
    return loss, metrics


_INPUTS = {"agg", "max_len", "is_weights"}
POLICY_LOSSES.add("cispo", cispo_loss, params=CISPOParams, inputs=_INPUTS,
                  doc="CISPO (MiniMax-M1, 2025): policy gradient with the IS weight clipped and stop-gradiented; "
                      "every token keeps its gradient")
POLICY_LOSSES.add("sapo", sapo_loss, params=SAPOParams, inputs=_INPUTS,
                  doc="SAPO (Gao et al. 2025): a temperature-controlled sigmoid gate on the ratio in place of "
                      "PPO's hard clip, one temperature for positive and one for negative advantages")
