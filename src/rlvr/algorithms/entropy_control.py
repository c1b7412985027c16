"""Entropy control: the covariance-based policy losses Clip-Cov and KL-Cov, and an adaptive entropy floor.

**Clip-Cov and KL-Cov** (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv 2505.22617, Sec. 5).  Under policy gradient the step change of the policy's
entropy follows the covariance between a token's log-probability and its advantage; a small share of
tokens with a large positive covariance (confident tokens of rewarded answers, unlikely tokens of
penalised ones) drives the collapse.  Over the ``N`` counted tokens ``i`` of a batch::

    Cov_i = (log pi(y_i) - 1/N sum_j log pi(y_j)) * (A_i - 1/N sum_j A_j)          (centred covariance)

    Clip-Cov:  I_clip = floor(r N) tokens drawn uniformly from {i : omega_low <= Cov_i <= omega_high};
               their gradient is detached (the rest get the usual clipped surrogate)
    KL-Cov:    I_KL   = the floor(k N) tokens of largest Cov_i;
               L_i = -ratio_i A_i + beta * |log pi_theta(y_i) - log pi_old(y_i)| * 1[i in I_KL]

The paper's settings (Qwen2.5-7B/32B, 256 prompts x 8 samples of up to 8k tokens): Clip-Cov ``r = 2e-4``,
``omega_low = 1``, ``omega_high = 5`` (with the PPO clip range opened to 1 in the authors' scripts);
KL-Cov ``k = 2e-3`` (7B) / ``2e-4`` (32B), ``beta = 1``, no PPO clip.  The KL penalty is written in the
paper as ``beta * D_KL(pi_old || pi_theta)`` per token and implemented (authors' code, verl) as the
absolute log-ratio ``|log pi_theta - log pi_old|`` used here.

*Which tokens the statistics run over.*  The paper's ``N`` is the batch's tokens; verl evaluates the
loss, means and selection included, one micro-batch at a time.  Here ``scope`` chooses:

* ``"batch"`` (default): the learner selects once per rollout batch, before its first pass, over every
  counted token of the batch (zero-advantage rows included, as in the paper), with ``log pi`` the
  *sampler's* log-probs (``Batch.sampler_logprobs``), and hands each micro-batch its slice as
  ``token_select``.  The selection is then independent of how the batch is cut into micro-batches and
  the same at every PPO epoch / mini-batch step of that batch.  The sampler's log-prob stands in for
  the learner's ``log pi_old`` (they differ by the sampler's rounding: a bf16 sampler's
  ``logprob_mismatch``; ``rollout.dtype=float32`` removes it), which can move a token across a
  selection boundary but costs no extra forward pass.
* ``"micro_batch"``: each call selects among the tokens it is given, with the current ``log pi`` (the
  loss's ``logp``), as verl does: ``N``, the means and the ``r N`` / ``k N`` budgets are those of the
  micro-batch, so they change with ``train.micro_batch_size`` / ``micro_batch_tokens``, and rows the
  learner skips (``algorithm.skip_zero_advantage``) are not among them.

Called directly, either loss selects among the tokens it is given unless ``token_select`` is passed.

*With one optimizer step per batch* the ratio is exactly 1 and ``log pi_theta = log pi_old``: KL-Cov's
penalty is then 0 with gradient 0 (``d|x|/dx = 0`` at 0, and any divergence is stationary where the two
policies coincide), so KL-Cov reduces to the unclipped policy gradient; it acts only from a second
optimizer step on the same batch (``algorithm.ppo_epochs >= 2`` or mini-batch updates).  Clip-Cov acts at
the first step (its selected tokens get no gradient).

**Entropy floor** (:class:`EntropyFloor`): Skywork-OR1's adaptive entropy control (He et al. 2025,
"Skywork Open Reasoner 1 Technical Report", arXiv 2505.22312, "Adaptive Entropy Control"): an entropy
bonus whose coefficient rises by a fixed step while the measured entropy is below a target and falls
otherwise, and that is applied only while the entropy is below the target.

All functions are pure (the randomness of Clip-Cov comes from ``generator`` or torch's global RNG).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor

from rlvr.algorithms.losses import (
    POLICY_LOSSES,
    _apply_is_weights,
    _check_policy_inputs,
    _clip_metrics,
    _per_token_advantages,
    aggregate_loss,
    masked_mean,
)

__all__ = ["token_covariance", "clip_cov_selection", "kl_cov_selection", "clip_cov_loss", "kl_cov_loss",
           "batch_token_selection", "TOKEN_SELECTIONS", "EntropyFloor", "SCOPES"]

SCOPES = ("batch", "micro_batch")


# --------------------------------------------------------------------------- covariance and selection
def token_covariance(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """Per-token centred covariance of log-probability and advantage over the counted tokens (Cui et al. 2025)::

        Cov_i = (logp_i - mean_j logp_j) * (A_i - mean_j A_j),     means over the tokens where mask != 0

    ``logp`` [B, T] (used detached), ``advantages`` [B] (broadcast over tokens) or [B, T]; returns a
    [B, T] float32 tensor, 0 where ``mask`` is 0.  The means are token means, so a long sequence's
    advantage weighs by its length, as the paper's sum over the batch's tokens does.
    """
    if logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(f"logp {tuple(logp.shape)} and mask {tuple(mask.shape)} must be the same [B, T]")
    valid = mask.bool()
    lp = torch.where(valid, logp.detach().float(), torch.zeros((), dtype=torch.float32, device=logp.device))
    adv = _per_token_advantages(advantages, lp)
    adv = torch.where(valid, adv, torch.zeros_like(adv))
    n = valid.sum().clamp(min=1)
    cov = (lp - lp.sum() / n) * (adv - adv.sum() / n)
    return torch.where(valid, cov, torch.zeros_like(cov))


def _budget(fraction: float, n: int) -> int:
    """``floor(fraction * n)``, robust to the float rounding of products such as 0.29 * 100."""
    return int(math.floor(fraction * n + 1e-9))


def clip_cov_selection(cov: Tensor, mask: Tensor, *, ratio: float, cov_low: float, cov_high: float,
                       generator: torch.Generator | None = None) -> Tensor:
    """Clip-Cov's token set: ``floor(ratio * N)`` tokens drawn uniformly without replacement among the counted
    tokens with ``cov_low <= Cov_i <= cov_high`` (all of them when fewer qualify).  ``N`` counts the tokens
    where ``mask != 0``.  Returns a [B, T] bool mask.  (verl draws ``max(1, int(r N))`` tokens, uses open
    bounds and leaves out tokens the PPO clip already stops, of which there are none at ratio 1; this follows
    the paper's ``floor(r N)`` and closed interval.)
    """
    valid = mask.bool()
    candidates = (valid & (cov >= cov_low) & (cov <= cov_high)).flatten().nonzero().squeeze(-1)
    n = min(_budget(ratio, int(valid.sum())), len(candidates))
    out = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if n:
        pick = torch.randperm(len(candidates), generator=generator)[:n].to(candidates.device)
        out[candidates[pick]] = True
    return out.view_as(cov)


def kl_cov_selection(cov: Tensor, mask: Tensor, *, ratio: float) -> Tensor:
    """KL-Cov's token set: the ``floor(ratio * N)`` counted tokens of largest ``Cov_i`` (``N`` counted tokens).
    Returns a [B, T] bool mask."""
    valid = mask.bool()
    n = _budget(ratio, int(valid.sum()))
    out = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if n:
        scores = torch.where(valid, cov, torch.full_like(cov, -math.inf)).flatten()
        out[torch.topk(scores, n).indices] = True
    return out.view_as(cov)


# --------------------------------------------------------------------------- the two losses
class ClipCovParams(BaseModel):
    """Options of ``clip_cov`` (``algorithm.policy_loss_params``)."""

    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(2e-4, gt=0, le=1, description="r: share of the counted tokens whose gradient is detached")
    cov_low: float = Field(1.0, description="omega_low: smallest covariance a detached token may have")
    cov_high: float = Field(5.0, description="omega_high: largest covariance a detached token may have")
    scope: Literal["batch", "micro_batch"] = Field("batch", description="where tokens are selected (see module)")
    clip_low: float = Field(0.2, ge=0, le=1, description="PPO clip range below 1 (default algorithm.clip_low)")
    clip_high: float = Field(0.2, ge=0, description="PPO clip range above 1 (default algorithm.clip_high)")

    @model_validator(mode="after")
    def _band(self):
        if not self.cov_low <= self.cov_high:
            raise ValueError(f"need cov_low <= cov_high, got {self.cov_low} > {self.cov_high}")
        return self


class KLCovParams(BaseModel):
    """Options of ``kl_cov`` (``algorithm.policy_loss_params``)."""

    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(2e-3, gt=0, le=1, description="k: share of the counted tokens that get the KL penalty")
    coef: float = Field(1.0, ge=0, description="beta: weight of |logp - logp_old| on the selected tokens")
    clip: bool = Field(False, description="PPO-clip the surrogate of every token (the paper: no clip)")
    scope: Literal["batch", "micro_batch"] = Field("batch", description="where tokens are selected (see module)")
    clip_low: float = Field(0.2, ge=0, le=1, description="PPO clip range below 1 when clip (algorithm.clip_low)")
    clip_high: float = Field(0.2, ge=0, description="PPO clip range above 1 when clip (algorithm.clip_high)")


def _ppo_objective(log_ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """``min(ratio A, clip(ratio, 1 - clip_low, 1 + clip_high) A)`` per token (PPO, Schulman et al. 2017)."""
    ratio = torch.exp(log_ratio)
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv)


def _selection(token_select: Tensor | None, like: Tensor, make: Callable[[], Tensor]) -> Tensor:
    if token_select is None:
        return make()
    if token_select.shape != like.shape:
        raise ValueError(f"token_select {tuple(token_select.shape)} must match logp {tuple(like.shape)}")
    return token_select.to(device=like.device, dtype=torch.bool)


def _loss_inputs(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor,
                 scope: str) -> tuple[Tensor, Tensor, Tensor]:
    """Checked inputs of the covariance losses: the valid-token mask, per-token advantages and the masked
    log-ratio ``logp - old_logp`` (old log-probs detached, 0 off the mask)."""
    _check_policy_inputs(logp, old_logp, mask)
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    return valid, adv, torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))


def clip_cov_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, ratio: float = 2e-4,
                  cov_low: float = 1.0, cov_high: float = 5.0, scope: str = "batch", clip_low: float = 0.2,
                  clip_high: float = 0.2, agg: str = "token_mean", max_len: int | None = None,
                  is_weights: Tensor | None = None, token_select: Tensor | None = None,
                  generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617, Sec. 5): the PPO clipped surrogate with the gradient of a
    random share ``r = ratio`` of the tokens whose covariance lies in ``[cov_low, cov_high]`` detached::

        Cov_i = (logp_i - mean logp) * (A_i - mean A)                            (:func:`token_covariance`)
        I     = floor(r N) tokens drawn uniformly from {i : cov_low <= Cov_i <= cov_high}
        L_i   = -min(ratio_i A_i, clip(ratio_i, 1 - clip_low, 1 + clip_high) A_i),   sg[L_i] for i in I

    reduced with :func:`~rlvr.algorithms.losses.aggregate_loss` (a detached token still counts in the
    normaliser, as in the authors' code).  ``dL/dlogp_i`` is PPO's (``-ratio_i A_i`` unclipped, 0 clipped)
    outside ``I`` and 0 inside.  ``token_select`` ([B, T] bool): the set ``I`` chosen by the caller (the
    learner's batch-wide selection, ``scope="batch"``); without it the set is drawn here among the tokens
    given, from ``logp`` (``generator`` or torch's global RNG).  ``scope`` is read by the learner (see the
    module docstring); ``is_weights`` multiply the per-token loss.

    Returns:
        ``(loss, metrics)``: PPO's clip fractions, ``ratio_mean``, ``approx_kl`` and ``cov_frac`` (share of the
        counted tokens detached).
    """
    valid, adv, log_ratio = _loss_inputs(logp, old_logp, advantages, mask, scope)
    selected = _selection(token_select, logp, lambda: clip_cov_selection(
        token_covariance(logp, advantages, mask), mask, ratio=ratio, cov_low=cov_low, cov_high=cov_high,
        generator=generator)) & valid
    per_token = -_ppo_objective(log_ratio, adv, clip_low, clip_high)
    per_token = torch.where(selected, per_token.detach(), per_token)
    loss = aggregate_loss(_apply_is_weights(per_token, is_weights), mask, agg, max_len)
    with torch.no_grad():
        metrics = _clip_metrics(torch.exp(log_ratio.detach()), adv, log_ratio, mask, clip_low, clip_high)
        metrics["cov_frac"] = masked_mean(selected.to(logp.dtype), mask)
    return loss, metrics


def kl_cov_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, ratio: float = 2e-3,
                coef: float = 1.0, clip: bool = False, scope: str = "batch", clip_low: float = 0.2,
                clip_high: float = 0.2, agg: str = "token_mean", max_len: int | None = None,
                is_weights: Tensor | None = None,
                token_select: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617, Sec. 5): the policy-gradient surrogate plus a KL penalty on
    the top share ``k = ratio`` of the tokens by covariance::

        I_KL = the floor(k N) tokens of largest Cov_i                            (:func:`token_covariance`)
        L_i  = -ratio_i A_i + coef * |logp_i - old_logp_i| * 1[i in I_KL]

    with ``ratio_i = exp(logp_i - old_logp_i)`` (``clip=True`` uses PPO's clipped surrogate
    ``-min(ratio A, clip(ratio, 1 - clip_low, 1 + clip_high) A)`` instead; the paper clips nothing), reduced
    with :func:`~rlvr.algorithms.losses.aggregate_loss`.  Per token
    ``dL/dlogp_i = -ratio_i A_i + coef * sign(logp_i - old_logp_i) * 1[i in I_KL]``: at ratio 1 (the first
    optimizer step on a batch) the penalty and its gradient are 0.  ``token_select``, ``scope`` and
    ``is_weights`` as in :func:`clip_cov_loss`.

    Returns:
        ``(loss, metrics)``: clip fractions (0 without ``clip``), ``ratio_mean``, ``approx_kl``, ``cov_frac``
        (share of the counted tokens penalised) and ``kl_cov_abs`` (mean ``|logp - old_logp|`` of those).
    """
    valid, adv, log_ratio = _loss_inputs(logp, old_logp, advantages, mask, scope)
    selected = _selection(token_select, logp, lambda: kl_cov_selection(
        token_covariance(logp, advantages, mask), mask, ratio=ratio)) & valid
    objective = _ppo_objective(log_ratio, adv, clip_low, clip_high) if clip else torch.exp(log_ratio) * adv
    penalty = torch.where(selected, coef * log_ratio.abs(), torch.zeros_like(log_ratio))
    loss = aggregate_loss(_apply_is_weights(-objective + penalty, is_weights), mask, agg, max_len)
    with torch.no_grad():
        metrics = _clip_metrics(torch.exp(log_ratio.detach()), adv, log_ratio, mask, clip_low, clip_high)
        if not clip:  # nothing is clipped
            zero = masked_mean(torch.zeros_like(log_ratio), mask)
            metrics.update(clip_frac=zero, clip_frac_low=zero, clip_frac_high=zero)
        sel = selected.to(logp.dtype)
        metrics["cov_frac"] = masked_mean(sel, mask)
        metrics["kl_cov_abs"] = masked_mean(log_ratio.detach().abs(), sel * mask)
    return loss, metrics


# --------------------------------------------------------------------------- batch-wide selection
@dataclass(frozen=True)
class TokenSelection:
    """How the learner selects a loss's tokens over the whole batch (``scope="batch"``)."""

    select: Callable[[Tensor, Tensor, dict[str, Any], "torch.Generator | None"], Tensor]
    """``select(cov, mask, options, generator) -> [B, T] bool``."""
    gradient_on_zero_advantage: bool
    """Whether a selected token of a zero-advantage row can still have a gradient (KL-Cov's penalty does):
    the learner then keeps such rows even with ``algorithm.skip_zero_advantage``."""


TOKEN_SELECTIONS: dict[str, TokenSelection] = {
    "clip_cov": TokenSelection(lambda cov, mask, o, g: clip_cov_selection(
        cov, mask, ratio=o["ratio"], cov_low=o["cov_low"], cov_high=o["cov_high"], generator=g), False),
    "kl_cov": TokenSelection(lambda cov, mask, o, g: kl_cov_selection(cov, mask, ratio=o["ratio"]), True),
}
"""Policy losses whose tokens are selected batch-wide by the learner, by :data:`POLICY_LOSSES` name."""


def batch_token_selection(name: str, params: dict[str, Any] | None, logp: Tensor, advantages: Tensor,
                          mask: Tensor, generator: torch.Generator | None = None
                          ) -> tuple[Tensor, dict[str, float], bool] | None:
    """The batch-wide token set of policy loss ``name`` with options ``params``, or ``None`` when the loss
    selects no tokens or selects them per micro-batch (``scope="micro_batch"``).

    ``logp`` [B, T]: the log-probs the covariance is computed from (the learner passes the sampler's);
    ``advantages`` [B] or [B, T]; ``mask`` [B, T]: the tokens that count.  Returns ``(selected [B, T] bool,
    stats, gradient_on_zero_advantage)`` with ``stats`` = ``cov_mean`` (the mean covariance over the batch's
    tokens: the paper's driver of entropy change, positive while entropy falls), ``cov_selected`` (tokens
    selected) and ``cov_candidates`` (Clip-Cov: tokens inside the band).
    """
    how = TOKEN_SELECTIONS.get(name)
    if how is None:
        return None
    opts = POLICY_LOSSES.entry(name).params.model_validate(dict(params or {})).model_dump()
    if opts["scope"] != "batch":
        return None
    cov = token_covariance(logp, advantages, mask)
    selected = how.select(cov, mask, opts, generator) & mask.bool()
    valid = mask.bool()
    stats = {"cov_mean": float(cov[valid].mean()) if bool(valid.any()) else 0.0,
             "cov_selected": int(selected.sum())}
    if "cov_low" in opts:
        stats["cov_candidates"] = int((valid & (cov >= opts["cov_low"]) & (cov <= opts["cov_high"])).sum())
    return selected, stats, how.gradient_on_zero_advantage


_INPUTS = {"agg", "max_len", "is_weights", "token_select"}
POLICY_LOSSES.add("clip_cov", clip_cov_loss, params=ClipCovParams, inputs=_INPUTS, tags={"clip_range"},
                  doc="Clip-Cov (Cui et al. 2025): PPO-clip with a random share of high-covariance tokens detached")
POLICY_LOSSES.add("kl_cov", kl_cov_loss, params=KLCovParams, inputs=_INPUTS, tags={"clip_range"},
                  doc="KL-Cov (Cui et al. 2025): policy gradient + |log ratio| penalty on the top-covariance tokens")


# --------------------------------------------------------------------------- entropy floor
class EntropyFloor:
    """An entropy bonus that switches on below a target entropy: Skywork-OR1's adaptive entropy control
    (He et al. 2025, "Skywork Open Reasoner 1 Technical Report", arXiv 2505.22312), a bang-bang integral
    controller on the coefficient (not SAC's gradient step on log alpha)::

        c_{k+1}     = clip(c_k + delta, 0, max_coef)   if e_k < target
                      clip(c_k - delta, 0, max_coef)   otherwise              (c_0 = 0)
        alpha_{k+1} = c_{k+1} * 1[e_k < target]
        loss_{k+1} += -alpha_{k+1} * agg(H)                   (:func:`~rlvr.algorithms.losses.entropy_bonus`)

    ``e_k`` is the measured mean token entropy of step ``k`` (:meth:`update`); :attr:`coef` is
    ``alpha`` for the next update.  Skywork-OR1 measures ``e_k`` on step ``k``'s batch before its update and
    applies ``alpha_k`` to that update; the recipe here feeds the entropy the learner measured during step
    ``k`` to step ``k + 1``: the same rule one step later, with no extra forward pass.  The coefficient is
    bounded by ``max_coef`` and the bonus is off whenever the entropy is at or above the target, so it
    cannot push the entropy far above it.  Their 7B/32B runs: target 0.2, delta 1e-4, max_coef 5e-3.
    """

    def __init__(self, target: float, delta: float, max_coef: float):
        if not (target > 0 and delta > 0 and max_coef > 0):
            raise ValueError(f"need target, delta and max_coef > 0, got {target}, {delta}, {max_coef}")
        self.target, self.delta, self.max_coef = float(target), float(delta), float(max_coef)
        self.value = 0.0  # c_k
        self.active = False  # e_k < target

    @property
    def coef(self) -> float:
        """The entropy-bonus coefficient of the next update: ``c * 1[last entropy < target]``."""
        return self.value if self.active else 0.0

    def update(self, entropy: float | None) -> float:
        """Feed the mean entropy measured at this step; returns the coefficient of the next update.
        ``None`` (nothing measured, e.g. a step without learner rows) leaves the state as it is."""
        if entropy is None or not math.isfinite(entropy):
            return self.coef
        self.active = entropy < self.target
        step = self.delta if self.active else -self.delta
        self.value = min(max(self.value + step, 0.0), self.max_coef)
        return self.coef

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "active": self.active}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value, self.active = float(state["value"]), bool(state["active"])
