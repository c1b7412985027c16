"""Policy-gradient losses for RL with verifiable rewards (PPO-clip, DAPO clip-higher, dual-clip,
GSPO, TOPR, GRPO, Dr. GRPO), loss aggregation, KL and entropy terms.  CISPO and SAPO are in
:mod:`rlvr.algorithms.weighted_pg`, Clip-Cov and KL-Cov in :mod:`rlvr.algorithms.entropy_control`.

Conventions: per-token tensors are [B, T] and position ``t`` is a token of the
sequence; ``mask`` [B, T] (bool or float) is 1 on the completion tokens that
count and 0 elsewhere (prompt, padding); ``advantages`` is [B] (one per
sequence, broadcast over tokens) or [B, T].  All functions are pure.

Every policy loss in :data:`POLICY_LOSSES` has the same signature::

    loss_fn(logp, old_logp, advantages, mask, *, agg="token_mean", max_len=None,
            is_weights=None, **hyper) -> (loss, metrics)

``is_weights`` ([B] or [B, T], constants) multiply the per-token loss: the
truncated importance-sampling correction between the rollout engine and the
learner (:mod:`rlvr.algorithms.importance`).  ``metrics`` always hold
``clip_frac``, ``clip_frac_low``, ``clip_frac_high``, ``ratio_mean`` and
``approx_kl`` (detached 0-dim tensors), plus loss-specific extras.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch
from torch import Tensor

from rlvr.registry import Registry
from torch.autograd.function import once_differentiable

from rlvr.algorithms.kl import kl_estimate

__all__ = [
    "AGGREGATION_MODES",
    "masked_sum",
    "masked_mean",
    "aggregate_loss",
    "ppo_clip_loss",
    "dual_clip_loss",
    "gspo_loss",
    "topr_loss",
    "policy_shaping",
    "off_policy_shaped_loss",
    "kl_loss",
    "entropy_bonus",
    "POLICY_LOSSES",
    "get_policy_loss",
    "loss_aggregation",
    "grpo_loss",
    "entropy_from_logits",
    "selective_log_softmax",
]

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")


# --------------------------------------------------------------------------- masking
def _masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x * mask`` broadcast to a common shape, with exact zeros where ``mask == 0``.

    ``torch.where`` keeps an inf/nan of ``x`` at a masked-out position from
    turning the product into nan.
    """
    m = mask.to(x.dtype) if mask.dtype == torch.bool else mask
    x, m = torch.broadcast_tensors(x, m)
    return torch.where(m != 0, x * m, torch.zeros((), dtype=x.dtype, device=x.device))


def _mask_count(x: Tensor, mask: Tensor, dim=None) -> Tensor:
    m = mask.to(x.dtype)
    m = torch.broadcast_to(m, torch.broadcast_shapes(x.shape, m.shape))
    return m.sum() if dim is None else m.sum(dim)


def masked_sum(x: Tensor, mask: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """``sum(x * mask)`` over ``dim`` (all elements when ``None``); masked-out inf/nan are ignored."""
    xm = _masked(x, mask)
    return xm.sum() if dim is None else xm.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """``sum(x * mask) / sum(mask)`` over ``dim`` (all elements when ``None``).

    Where the mask sums to 0 the result is 0 (not nan).
    """
    num = masked_sum(x, mask, dim)
    den = _mask_count(x, mask, dim)
    return num / torch.where(den != 0, den, torch.ones_like(den))


def aggregate_loss(per_token: Tensor, mask: Tensor, mode: str = "token_mean", max_len: int | None = None) -> Tensor:
    """Reduce a [B, T] per-token loss ``l`` to a scalar.  With ``m`` the mask and ``B`` rows:

    * ``"token_mean"``: ``sum_{i,t} m l / sum_{i,t} m`` — every token of the
      batch weighs the same, so long completions are not under-weighted (DAPO,
      Yu et al. 2025, "token-level policy gradient loss").
    * ``"seq_mean_token_mean"``: ``1/B sum_i (sum_t m l / sum_t m)`` — mean over
      sequences of each sequence's token mean (the original GRPO objective,
      Shao et al. 2024).  A row without counted tokens contributes 0 (it still
      counts in ``B``).
    * ``"seq_mean_token_sum"``: ``1/B sum_i sum_t m l`` — mean over sequences of
      each sequence's token sum.
    * ``"seq_mean_token_sum_norm"``: ``sum_{i,t} m l / (B * max_len)`` — a
      constant normaliser, removing GRPO's length bias (Dr. GRPO, Liu et al.
      2025, "Understanding R1-Zero-Like Training"); ``max_len`` (the generation
      budget) is required.
    """
    if per_token.dim() != 2:
        raise ValueError(f"per_token must be [B, T], got shape {tuple(per_token.shape)}")
    B = per_token.shape[0]
    if mode == "token_mean":
        return masked_mean(per_token, mask)
    if mode == "seq_mean_token_mean":
        return masked_mean(per_token, mask, dim=-1).sum() / max(B, 1)
    if mode == "seq_mean_token_sum":
        return masked_sum(per_token, mask, dim=-1).sum() / max(B, 1)
    if mode == "seq_mean_token_sum_norm":
        if max_len is None or max_len <= 0:
            raise ValueError(f"aggregation 'seq_mean_token_sum_norm' needs max_len > 0, got {max_len!r}")
        return masked_sum(per_token, mask) / (max(B, 1) * max_len)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of: {', '.join(AGGREGATION_MODES)}")


# --------------------------------------------------------------------------- policy losses
def _per_token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    adv = advantages.detach().to(like.dtype)
    if adv.dim() == 1:
        if adv.shape[0] != like.shape[0]:
            raise ValueError(f"advantages [{adv.shape[0]}] do not match batch size {like.shape[0]}")
        adv = adv.unsqueeze(-1)
    elif adv.shape != like.shape:
        raise ValueError(f"advantages {tuple(adv.shape)} must be [B] or [B, T] = {tuple(like.shape)}")
    return adv.expand_as(like)


def _check_policy_inputs(logp: Tensor, old_logp: Tensor, mask: Tensor) -> None:
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
                         f"{tuple(mask.shape)} must have the same [B, T] shape")


def _apply_is_weights(per_token: Tensor, is_weights: Tensor | None) -> Tensor:
    if is_weights is None:
        return per_token
    w = is_weights.detach().to(per_token.dtype)
    if w.dim() == 1:
        w = w.unsqueeze(-1)
    return per_token * w


def _clip_metrics(r: Tensor, a: Tensor, log_ratio: Tensor, mask: Tensor, clip_low: float,
                  clip_high: float) -> dict[str, Tensor]:
    """Clip fractions (a token is clipped low when A < 0 and r < 1 - eps_low, high when A > 0 and
    r > 1 + eps_high), mean ratio and the k2 approximate KL 0.5 (log r)^2, all masked means."""
    low = ((a < 0) & (r < 1.0 - clip_low)).to(r.dtype)
    high = ((a > 0) & (r > 1.0 + clip_high)).to(r.dtype)
    return {
        "clip_frac": masked_mean(low + high, mask),
        "clip_frac_low": masked_mean(low, mask),
        "clip_frac_high": masked_mean(high, mask),
        "ratio_mean": masked_mean(r, mask),
        "approx_kl": masked_mean(0.5 * log_ratio.detach().square(), mask),
    }


def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float = 0.2,
                  clip_high: float = 0.2, agg: str = "token_mean", max_len: int | None = None,
                  dual_clip: float | None = None,
                  is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

    Per token, with ``ratio = exp(logp - old_logp)`` and advantage ``A``::

        L = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)

    then reduced with :func:`aggregate_loss` (``agg``, ``max_len``).
    ``clip_high > clip_low`` is DAPO's "clip-higher" (Yu et al. 2025, "DAPO: An
    Open-Source LLM Reinforcement Learning System at Scale", eps_low = 0.2,
    eps_high = 0.28).  ``dual_clip = c > 1`` adds the dual clip of Ye et al.
    2020 ("Mastering Complex Control in MOBA Games with Deep RL") for ``A < 0``::

        L = -max(min(ratio * A, clip(ratio, ...) * A), c * A)        (A < 0 only)

    which bounds the loss of a negative-advantage token whose ratio has run
    away (gradient 0 where ``ratio > c``).  ``is_weights`` multiply the
    per-token loss (see the module docstring).  ``old_logp`` and ``advantages`` are constants (detached); gradients flow
    into ``logp`` only: ``dL/dlogp = -ratio * A`` where the objective is not
    clipped and 0 where it is.  At masked-out positions the log-ratio is set to
    0, so padding cannot produce inf/nan.

    Args:
        logp: [B, T] log-probs of the taken tokens under the current policy.
        old_logp: [B, T] log-probs under the policy that sampled them.
        advantages: [B] or [B, T].
        mask: [B, T], 1 on tokens that count.

    Returns:
        ``(loss, metrics)``; metrics are detached 0-dim tensors, averaged over masked tokens:

        * ``clip_frac``: fraction of tokens where the clipped term is active
            (strictly below the unclipped one, so the token gets no gradient);
            equals ``clip_frac_low + clip_frac_high``;
        * ``clip_frac_low``: ``A < 0`` and ``ratio < 1 - clip_low``;
        * ``clip_frac_high``: ``A > 0`` and ``ratio > 1 + clip_high``;
        * ``ratio_mean``: mean importance ratio;
        * ``approx_kl``: mean of ``0.5 * (logp - old_logp)^2`` (Schulman's k2
            estimate of the KL between the sampling and current policies);
        * ``clip_frac_dual`` (only with ``dual_clip``): ``A < 0`` and ``ratio > c``.
    """
    _check_policy_inputs(logp, old_logp, mask)
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if clip_low < 0 or clip_high < 0 or clip_low >= 1:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    log_ratio = torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    objective = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        objective = torch.where(adv < 0, torch.maximum(objective, dual_clip * adv), objective)
    per_token = _apply_is_weights(-objective, is_weights)
    loss = aggregate_loss(per_token, mask, agg, max_len)

    with torch.no_grad():
        r, a = ratio.detach(), adv
        metrics = _clip_metrics(r, a, log_ratio, mask, clip_low, clip_high)
        if dual_clip is not None:
            metrics["clip_frac_dual"] = masked_mean(((a < 0) & (r > dual_clip)).to(r.dtype), mask)
    return loss, metrics


def dual_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float = 0.2,
                   clip_high: float = 0.2, clip_ratio_c: float = 3.0, agg: str = "token_mean",
                   max_len: int | None = None, is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL", Eq. 5)::

        L = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)          A >= 0
        L = -max(min(ratio * A, clip(ratio, ...) * A), clip_ratio_c * A)           A <  0

    :func:`ppo_clip_loss` with ``dual_clip=clip_ratio_c`` (c = 3 in the paper and in verl).
    """
    return ppo_clip_loss(logp, old_logp, advantages, mask, clip_low=clip_low, clip_high=clip_high, agg=agg,
                         max_len=max_len, dual_clip=clip_ratio_c, is_weights=is_weights)


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_low: float = 3e-4,
              clip_high: float = 4e-4, agg: str = "seq_mean_token_mean", max_len: int | None = None,
              is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Group Sequence Policy Optimization, GSPO (Zheng et al. 2025, "Group Sequence Policy
    Optimization"), in its GSPO-token form.  The importance ratio is the
    length-normalised *sequence* likelihood ratio::

        s_i     = exp( 1/|y_i| * sum_t (logp_{i,t} - old_logp_{i,t}) )
        s_{i,t} = sg[s_i] * pi(y_{i,t}) / sg[pi(y_{i,t})]           (value s_i; gradient s_i * dlogp_{i,t})
        L       = agg_t( -min(s_{i,t} A_{i,t}, clip(s_{i,t}, 1 - clip_low, 1 + clip_high) A_{i,t}) )

    With one advantage per sequence and ``agg="seq_mean_token_mean"`` (the
    default) this is exactly GSPO's objective
    ``1/B sum_i min(s_i A_i, clip(s_i) A_i)``: ``dL/dlogp_{i,t} = -s_i A_i / (B |y_i|)``
    where the sequence is not clipped, 0 where it is.  Clipping is decided per
    sequence, hence the paper's tiny ranges (3e-4, 4e-4).

    Returns:
        ``(loss, metrics)``; clip fractions are token-weighted fractions of
        clipped sequences, ``ratio_mean`` the token-weighted mean of ``s_i``,
        ``seq_ratio_max`` the largest ``s_i``.
    """
    _check_policy_inputs(logp, old_logp, mask)
    if clip_low < 0 or clip_high < 0 or clip_low >= 1:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    log_ratio = torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))
    seq_log_ratio = masked_mean(log_ratio.detach(), mask, dim=-1)                       # [B]
    tok = torch.where(valid, logp - logp.detach(), torch.zeros_like(logp))
    s = torch.exp(seq_log_ratio.unsqueeze(-1) + tok)                                    # value s_i, grad s_i
    unclipped = s * adv
    clipped = torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = _apply_is_weights(-torch.minimum(unclipped, clipped), is_weights)
    loss = aggregate_loss(per_token, mask, agg, max_len)
    with torch.no_grad():
        r, a = s.detach(), adv
        has_tok = valid.any(-1)
        seq_s = torch.exp(seq_log_ratio)
        metrics = _clip_metrics(r, a, log_ratio, mask, clip_low, clip_high)
        metrics["seq_ratio_max"] = seq_s[has_tok].max() if bool(has_tok.any()) else torch.ones((), dtype=r.dtype)
    return loss, metrics


def topr_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, level: str = "sequence",
              agg: str = "seq_mean_token_sum", max_len: int | None = None,
              is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Tapered Off-Policy REINFORCE, TOPR (Le Roux et al. 2025, "Tapered Off-Policy REINFORCE: Stable
    and efficient reinforcement learning for LLMs", Eq. 7)::

        grad J = sum_{A >= 0} A * grad log pi(y)  +  sum_{A < 0} sg[clip(pi(y) / mu(y), 0, 1)] * A * grad log pi(y)

    Positive samples get a plain (SFT-like) update with no importance weight;
    negative samples get a truncated importance weight, so off-policy negatives
    cannot push log-probabilities to minus infinity.  ``pi(y) / mu(y)`` is the
    sequence ratio ``exp(sum_t (logp - old_logp))`` (``level="sequence"``, the
    paper) or the per-token ratio (``level="token"``).  The surrogate is
    ``L_t = -w_t * A_t * (logp_t - old_logp_t)`` (its value is 0 on-policy; its
    gradient is ``dL/dlogp_t = -w_t A_t``), reduced with ``agg``; the default
    ``seq_mean_token_sum`` matches ``log pi(y) = sum_t log pi(y_t)``.

    Returns:
        ``(loss, metrics)``; ``clip_frac`` = ``clip_frac_high`` = fraction of
        tokens of negative samples whose weight was truncated (ratio > 1).
    """
    _check_policy_inputs(logp, old_logp, mask)
    if level not in ("sequence", "token"):
        raise ValueError(f"level must be 'sequence' or 'token', got {level!r}")
    valid = mask.bool()
    adv = _per_token_advantages(advantages, logp)
    log_ratio = torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp))
    lr = log_ratio.detach()
    if level == "sequence":
        lr = masked_sum(lr, mask, dim=-1).unsqueeze(-1).expand_as(log_ratio)
    w = torch.where(adv >= 0, torch.ones_like(lr), torch.exp(lr.clamp(max=0.0)))   # clip(ratio, 0, 1)
    per_token = _apply_is_weights(-w * adv * log_ratio, is_weights)
    loss = aggregate_loss(per_token, mask, agg, max_len)
    with torch.no_grad():
        trunc = ((adv < 0) & (lr > 0)).to(lr.dtype)
        metrics = {
            "clip_frac": masked_mean(trunc, mask),
            "clip_frac_low": masked_mean(torch.zeros_like(trunc), mask),
            "clip_frac_high": masked_mean(trunc, mask),
            "ratio_mean": masked_mean(torch.exp(log_ratio.detach()), mask),
            "approx_kl": masked_mean(0.5 * log_ratio.detach().square(), mask),
            "topr_weight_mean": masked_mean(w, mask),
        }
    return loss, metrics


def policy_shaping(prob: Tensor, gamma: float = 0.1) -> Tensor:
    """LUFFY's policy shaping (Yan et al. 2025, "Learning to Reason under Off-Policy Guidance", Sec. 3.2)::

        f(p) = p / (p + gamma)

    applied to the importance ratio of an off-policy (demonstration) token, ``p = pi_theta / pi_behaviour``
    with ``pi_behaviour := 1``, i.e. the current policy's probability of the token.  Its gradient
    ``f'(p) grad p = gamma / (p + gamma)^2 * p * grad log p`` is large for low-probability tokens (where plain
    importance sampling ``p * grad log p`` vanishes) and small for tokens the policy already predicts.
    """
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    return prob / (prob + gamma)


def off_policy_shaped_loss(logp: Tensor, advantages: Tensor, mask: Tensor, *, gamma: float = 0.1,
                           agg: str = "token_mean", max_len: int | None = None) -> Tensor:
    """The off-policy term of LUFFY (Yan et al. 2025, Eq. 6 with the shaping of Eq. 8), as a loss::

        L_t = -f(exp(logp_t)) * A_t,      f(p) = p / (p + gamma)       (:func:`policy_shaping`)

    reduced with :func:`aggregate_loss`.  No clipping (LUFFY drops it for off-policy tokens) and no old
    log-prob: the behaviour policy of a demonstration is taken to have probability 1.  Per token,
    ``dL/dlogp = -A * gamma * p / (p + gamma)^2`` times the aggregation weight.
    """
    adv = _per_token_advantages(advantages, logp)
    valid = mask.bool()
    p = torch.exp(torch.where(valid, logp, torch.zeros_like(logp)))
    return aggregate_loss(-policy_shaping(p, gamma) * adv, mask, agg, max_len)


PolicyLoss = Callable[..., "tuple[Tensor, dict[str, Tensor]]"]

POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", skip=4)
"""Policy losses by name; uniform signature, see the module docstring.

Options (``algorithm.policy_loss_params``) are each loss's keyword parameters
less the ones the recipe passes (``agg``, ``max_len``, ``is_weights``).  Losses
tagged ``clip_range`` take ``algorithm.clip_low`` / ``clip_high`` unless their
params set them.  Register a new one with ``@POLICY_LOSSES.register("name")``.
"""

_RECIPE_INPUTS = {"agg", "max_len", "is_weights"}
POLICY_LOSSES.add("ppo_clip", ppo_clip_loss, inputs=_RECIPE_INPUTS, tags={"clip_range"})  # + DAPO clip-higher
POLICY_LOSSES.add("dual_clip", dual_clip_loss, inputs=_RECIPE_INPUTS, tags={"clip_range"})
POLICY_LOSSES.add("gspo", gspo_loss, inputs=_RECIPE_INPUTS)
POLICY_LOSSES.add("topr", topr_loss, inputs=_RECIPE_INPUTS)


def get_policy_loss(name: str, **params) -> PolicyLoss:
    """The loss registered under ``name`` in :data:`POLICY_LOSSES`, with ``params`` bound."""
    fn = POLICY_LOSSES.get(name)
    if params:
        POLICY_LOSSES.validate_params(name, params, key="policy_loss_params")
    return functools.partial(fn, **params) if params else fn


def loss_aggregation(name: str) -> str:
    """The aggregation the policy loss ``name`` is defined with: the default of its ``agg`` parameter.

    ``ppo_clip`` / ``dual_clip``: ``token_mean`` (DAPO's token-level loss); ``gspo``: ``seq_mean_token_mean``
    (GSPO's ``1/B sum_i`` over sequences of length-normalised ratios; verl forces it for GSPO);
    ``topr``: ``seq_mean_token_sum`` (TOPR's ``sum_t log pi(y_t)`` per sequence); ``cispo``: ``token_mean``
    (CISPO's ``1 / sum_i |o_i|``); ``sapo``: ``seq_mean_token_mean`` (SAPO's ``1/G sum_i 1/|y_i|``, as verl
    forces it).  The recipe uses it when ``algorithm.loss_agg`` is not set.
    """
    param = inspect.signature(POLICY_LOSSES.get(name)).parameters.get("agg")
    return "token_mean" if param is None or param.default is inspect.Parameter.empty else param.default


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, *, kind: str = "k3", agg: str = "token_mean",
            max_len: int | None = None) -> Tensor:
    """KL(pi || pi_ref) as a loss term (GRPO, Shao et al. 2024): ``agg(KL_kind)`` with the per-token
    estimator of :func:`rlvr.algorithms.kl.kl_estimate` (k1, k2 or k3; Schulman 2020).

    Per-token gradients w.r.t. ``logp`` (``x = ref_logp - logp``): k1 -> 1,
    k2 -> ``-x``, k3 -> ``1 - e^x``; times the aggregation weight.  Multiply
    by ``kl_coef`` and add to the policy loss.
    """
    return aggregate_loss(kl_estimate(logp, ref_logp, kind, mask=mask), mask, agg, max_len)


def entropy_bonus(entropy: Tensor, mask: Tensor, *, coef: float, agg: str = "token_mean",
                  max_len: int | None = None) -> Tensor:
    """Entropy regularisation term to *add to the loss* (Williams & Peng 1991; Mnih et al. 2016, A3C)::

        L_ent = -coef * agg(H_t)

    so minimising the total loss raises the policy entropy ``H_t`` (from
    :func:`entropy_from_logits`, differentiable) when ``coef > 0``.
    """
    if entropy.shape != mask.shape:
        raise ValueError(f"entropy {tuple(entropy.shape)} and mask {tuple(mask.shape)} must have the same shape")
    return -coef * aggregate_loss(entropy, mask, agg, max_len)


def grpo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, ref_logp: Tensor | None = None,
              kl_coef: float = 0.0, kl_kind: str = "k3", clip_low: float = 0.2, clip_high: float = 0.2,
              agg: str = "token_mean", max_len: int | None = None, policy_loss: str = "ppo_clip",
              policy_loss_params: dict | None = None, entropy: Tensor | None = None, entropy_coef: float = 0.0,
              is_weights: Tensor | None = None, off_policy: Tensor | None = None,
              shaping_gamma: float = 0.1, token_select: Tensor | None = None,
              entropy_select: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO objective (Shao et al. 2024, *DeepSeekMath*, Eq. 3) as a loss to minimise::

        loss = agg(-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A))
               + kl_coef * agg(KL_kind(pi || pi_ref))
               - entropy_coef * agg(H)

    The first term is :func:`ppo_clip_loss`, or any loss of
    :data:`POLICY_LOSSES` chosen by ``policy_loss`` (``clip_low`` /
    ``clip_high`` are passed to ``"ppo_clip"`` and ``"dual_clip"`` only; other
    hyper-parameters go in ``policy_loss_params``); ``is_weights`` are passed
    through to it, and so is ``token_select`` ([B, T] bool, when given: the tokens a batch-wide rule chose,
    for the losses that take it, e.g. Clip-Cov / KL-Cov).  The per-token KL estimate is
    :func:`rlvr.algorithms.kl.kl_estimate` (``"k3"`` in the paper), reduced
    with the same aggregation ``agg``.  The KL term is added only when
    ``kl_coef > 0``, which then requires ``ref_logp``; the entropy bonus
    (:func:`entropy_bonus`) only when ``entropy_coef != 0``, which then requires
    ``entropy`` ([B, T], differentiable).  Variants by arguments:
    DAPO = ``clip_high > clip_low``, ``agg="token_mean"``, ``kl_coef=0``;
    Dr. GRPO = ``agg="seq_mean_token_sum_norm"`` with Dr. GRPO advantages.

    ``entropy_select`` ([B, T] 0/1): the bonus on the selected tokens only, SIREN's peak-entropy mask (Jiang et al.
    2025, arXiv 2509.25133): ``- entropy_coef * agg(1[t selected] * H_t)``, the normaliser counting every token.

    ``off_policy`` ([B] bool, LUFFY's mixed-policy GRPO): the policy loss sees the on-policy rows only;
    the flagged rows (demonstrations) get :func:`off_policy_shaped_loss` with ``gamma = shaping_gamma``,
    and the two terms are aggregated as one (``token_mean``: each weighted by its share of the counted
    tokens; the sequence modes already share the normaliser ``B``).  The policy loss's metrics are then
    those of the on-policy tokens.  The KL term leaves the flagged rows out: a demonstration was not sampled
    from the policy, so no estimator of KL(pi || pi_ref) holds on its tokens (their KL is 0, counted in the
    aggregation's normaliser; the reward's KL penalty gives them 0 too, :func:`rlvr.learner.update.reference_kl`).
    ``None`` or no flagged row: the plain loss.

    Returns:
        ``(loss, metrics)``: the policy loss's metrics plus ``pg_loss``
        (the surrogate term), whenever ``ref_logp`` is given ``kl`` (the masked
        token-mean of the estimate over the on-policy tokens; computed for monitoring even when
        ``kl_coef == 0``), and whenever ``entropy`` is given ``entropy`` (its
        masked token-mean).  All detached 0-dim tensors.
    """
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp (log-probs of the reference policy)")
    if entropy_coef != 0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy (per-token policy entropy)")
    params = dict(policy_loss_params or {})
    if "clip_range" in POLICY_LOSSES.entry(policy_loss).tags:
        params.setdefault("clip_low", clip_low)
        params.setdefault("clip_high", clip_high)
    if token_select is not None:
        params["token_select"] = token_select
    fn = get_policy_loss(policy_loss)
    if off_policy is not None and bool(off_policy.any()):
        pg_loss, metrics = _mixed_policy_loss(fn, logp, old_logp, advantages, mask, off_policy, agg=agg,
                                              max_len=max_len, is_weights=is_weights, shaping_gamma=shaping_gamma,
                                              params=params)
    else:
        pg_loss, metrics = fn(logp, old_logp, advantages, mask, agg=agg, max_len=max_len, is_weights=is_weights,
                              **params)
    metrics["pg_loss"] = pg_loss.detach()
    loss = pg_loss
    if ref_logp is not None:
        kl_term, metrics["kl"] = _kl_term(logp, ref_logp, mask, off_policy, kl_coef=kl_coef, kind=kl_kind, agg=agg,
                                          max_len=max_len)
        loss = loss if kl_term is None else loss + kl_coef * kl_term
    if entropy is not None:
        if entropy_coef != 0:  # entropy_select: SIREN's peak-entropy mask (the denominators still count every token)
            bonus_of = entropy if entropy_select is None else entropy * entropy_select.to(entropy.dtype)
            loss = loss + entropy_bonus(bonus_of, mask, coef=entropy_coef, agg=agg, max_len=max_len)
        metrics["entropy"] = masked_mean(entropy.detach(), mask)
    return loss, metrics


def _kl_term(logp: Tensor, ref_logp: Tensor, mask: Tensor, off_policy: Tensor | None, *, kl_coef: float, kind: str,
             agg: str, max_len: int | None) -> tuple[Tensor | None, Tensor]:
    """``(agg(KL_kind) or None when kl_coef is 0, the estimate's token mean)`` of :func:`grpo_loss`.

    The estimators are KL(pi || pi_ref) only on tokens drawn from pi: the ``off_policy`` rows' (demonstrations')
    tokens get none, 0 in the aggregation, whose normaliser still counts them as the policy term's does; the token
    mean is the on-policy tokens'.
    """
    on_mask = mask if off_policy is None else \
        torch.where(off_policy.to(device=mask.device, dtype=torch.bool).unsqueeze(-1), torch.zeros_like(mask), mask)
    if kl_coef > 0:
        kl = kl_estimate(logp, ref_logp, kind, mask=on_mask)
        return aggregate_loss(kl, mask, agg, max_len), masked_mean(kl.detach(), on_mask)
    with torch.no_grad():
        return None, masked_mean(kl_estimate(logp.detach(), ref_logp, kind, mask=on_mask), on_mask)


def _mixed_policy_loss(fn, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, off_policy: Tensor, *,
                       agg: str, max_len: int | None, is_weights: Tensor | None, shaping_gamma: float,
                       params: dict) -> tuple[Tensor, dict[str, Tensor]]:
    """LUFFY's mixed-policy term of :func:`grpo_loss`: the policy loss ``fn`` on the on-policy rows, the shaped loss
    on the ``off_policy`` rows, aggregated as one (``token_mean``: each weighted by its share of the tokens)."""
    off = off_policy.to(device=mask.device, dtype=torch.bool).unsqueeze(-1)
    on_mask = torch.where(off, torch.zeros_like(mask), mask)
    off_mask = torch.where(off, mask, torch.zeros_like(mask))
    pg_on, metrics = fn(logp, old_logp, advantages, on_mask, agg=agg, max_len=max_len, is_weights=is_weights,
                        **params)
    pg_off = off_policy_shaped_loss(logp, advantages, off_mask, gamma=shaping_gamma, agg=agg, max_len=max_len)
    if agg == "token_mean":  # one mean over all counted tokens
        n_on, n_off = _mask_count(logp, on_mask), _mask_count(logp, off_mask)
        total = (n_on + n_off).clamp(min=1)
        pg_on, pg_off = pg_on * n_on / total, pg_off * n_off / total
    return pg_on + pg_off, metrics


# --------------------------------------------------------------------------- logits -> log-probs, entropy
def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _row_slices(x: Tensor):
    """Index objects splitting ``x`` [..., V] into pieces of one leading row each (or the whole tensor)."""
    if x.dim() >= 3:
        return list(range(x.shape[0]))
    return [slice(None)]


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy ``H = -sum_v p_v log p_v`` of ``softmax(logits)`` over the last dim.

    Computed as ``log p = z - logsumexp(z)`` (stable for any logit scale) and
    ``H = -sum exp(log p) * log p``; ``-inf`` logits (masked vocabulary) are
    allowed and contribute 0.  Processed one leading row at a time, so only
    one [T, V] temporary exists at once; half / bfloat16 inputs are computed
    and returned in float32.  Differentiable.

    Args:
        logits: [..., V].

    Returns:
        [...] entropies in nats.
    """
    cdt = _compute_dtype(logits.dtype)
    lowest = torch.finfo(cdt).min
    out = []
    for idx in _row_slices(logits):
        z = logits[idx].to(cdt).clamp(min=lowest)  # -inf -> finite: p = 0 and p * log p = 0, gradients finite
        logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
        out.append(-(logp.exp() * logp).sum(-1))
    return torch.stack(out) if logits.dim() >= 3 else out[0]


class _SelectiveLogSoftmax(torch.autograd.Function):
    """``log_softmax(logits).gather(index)`` with row-by-row forward and backward.

    Only ``logits`` (already alive), ``index`` and the [B, T] logsumexp are
    saved; the backward ``g * (onehot(index) - softmax(logits))`` recomputes the
    softmax one row at a time, straight into the [B, T, V] gradient.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, index: Tensor) -> Tensor:
        cdt = _compute_dtype(logits.dtype)
        lse = torch.stack([torch.logsumexp(logits[i].to(cdt), dim=-1) for i in _row_slices(logits)]) \
            if logits.dim() >= 3 else torch.logsumexp(logits.to(cdt), dim=-1)
        picked = logits.gather(-1, index.unsqueeze(-1)).squeeze(-1).to(cdt)
        ctx.save_for_backward(logits, index, lse)
        return picked - lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, index, lse = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        cdt = lse.dtype
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for i in _row_slices(logits):
            g = grad_out[i].to(cdt).unsqueeze(-1)
            row = -torch.exp(logits[i].to(cdt) - lse[i].unsqueeze(-1)) * g
            row.scatter_add_(-1, index[i].unsqueeze(-1), g)
            grad[i] = row.to(logits.dtype)
        return grad, None


def selective_log_softmax(logits: Tensor, index: Tensor) -> Tensor:
    """``log_softmax(logits, -1).gather(-1, index[..., None])[..., 0]`` without a second [B, T, V] tensor.

    Uses ``log p(index) = logits[index] - logsumexp(logits)``, computing the
    logsumexp one sequence (leading row) at a time; the backward pass
    ``dlogp/dlogits = onehot(index) - softmax(logits)`` is likewise done row by
    row into the gradient buffer.  Half / bfloat16 logits are processed in
    float32 and the result is float32; otherwise the result has the logits'
    dtype.  Supports one backward (no double backward).

    Args:
        logits: [B, T, V] (any [..., V] works).
        index: [B, T] int64 token ids (the logits' shape without the last dim).

    Returns:
        [B, T] log-probabilities of ``index``.
    """
    if logits.shape[:-1] != index.shape:
        raise ValueError(f"index shape {tuple(index.shape)} must equal logits shape without the vocab dim "
                         f"{tuple(logits.shape[:-1])}")
    return _SelectiveLogSoftmax.apply(logits, index.long())
