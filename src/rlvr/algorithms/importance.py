"""Off-policy correction between the rollout engine and the learner: truncated / masked
importance-sampling weights and mismatch diagnostics.

The rollout engine's log-probs ``mu`` (``rollout_logp``: another kernel or
precision, e.g. a bf16 sampler copy or vLLM, and/or weights one update stale in
asynchronous RL) differ from the learner's ``pi_old`` (``learner_logp``, the
learner's own log-probs of the same tokens before the update).  The PPO ratio
``pi / pi_old`` does not see that gap; an extra weight ``pi_old / mu`` does.
Because ``pi_old / mu`` can be huge on rare tokens it is truncated (TIS) or the
offending tokens / sequences are dropped (masked IS):

* Yao, Liu et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training" (TIS, token level, cap C = 2);
* Espeholt et al. 2018 (IMPALA, V-trace): truncated importance weights;
* masked IS / "IcePop" (Ling team 2025) and verl's rollout-correction
  ``mis`` modes: zero the weight outside ``[lower, upper]``.

The weights are detached, shape [B, T] (1 at masked-out positions), and go to
the policy losses' ``is_weights`` argument.  All functions are pure.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from rlvr.registry import Registry

__all__ = ["IS_LEVELS", "is_log_ratio", "truncated_is_weights", "masked_is_weights", "is_correction_weights",
           "IS_CORRECTIONS", "logprob_mismatch"]

IS_LEVELS = ("token", "sequence", "geometric")


def _check(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> None:
    if not (learner_logp.shape == rollout_logp.shape == mask.shape) or mask.dim() != 2:
        raise ValueError(f"learner_logp {tuple(learner_logp.shape)}, rollout_logp {tuple(rollout_logp.shape)} "
                         f"and mask {tuple(mask.shape)} must all be [B, T]")


def is_log_ratio(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor, level: str = "token") -> Tensor:
    """``log(pi_old / mu)`` at the chosen level, broadcast to [B, T] (0 at masked-out positions)::

        token:      d_t = learner_logp_t - rollout_logp_t
        sequence:   sum_t d_t               (the ratio of sequence probabilities)
        geometric:  mean_t d_t              (length-normalised, as GSPO's ratio)
    """
    _check(learner_logp, rollout_logp, mask)
    if level not in IS_LEVELS:
        raise ValueError(f"unknown IS level {level!r}; choose one of: {', '.join(IS_LEVELS)}")
    m = mask.bool()
    d = torch.where(m, learner_logp.detach() - rollout_logp.detach(), torch.zeros_like(learner_logp))
    if level == "token":
        return d
    s = d.sum(-1, keepdim=True)
    if level == "geometric":
        s = s / m.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(m, s.expand_as(d), torch.zeros_like(d))


def truncated_is_weights(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *, cap: float = 2.0,
                         level: str = "token") -> Tensor:
    """Truncated importance sampling, TIS (Yao et al. 2025; IMPALA's truncated weights)::

        w = min(pi_old / mu, cap)          at the level of :func:`is_log_ratio`

    computed as ``exp(min(log_ratio, log cap))`` so sequence-level ratios cannot
    overflow.  Multiplying the per-token loss by ``w`` corrects the bias from
    sampling with ``mu`` up to the truncation (bias traded for bounded variance).

    Returns:
        [B, T] detached weights, 1 where ``mask`` is 0.
    """
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    lr = is_log_ratio(learner_logp, rollout_logp, mask, level)
    w = torch.exp(lr.clamp(max=math.log(cap)))
    return torch.where(mask.bool(), w, torch.ones_like(w))


def masked_is_weights(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *, lower: float = 0.0,
                      upper: float = 2.0, level: str = "token", keep_ratio: bool = True) -> Tensor:
    """Masked importance sampling (MIS; IcePop-style rejection)::

        w = r * 1[lower <= r <= upper]       (keep_ratio=True:  importance-weighted inside the band)
        w =     1[lower <= r <= upper]       (keep_ratio=False: plain rejection of mismatched tokens)

    with ``r = pi_old / mu`` at ``level``; tokens (or whole sequences) outside
    the band get weight 0, i.e. no gradient.

    Returns:
        [B, T] detached weights, 1 where ``mask`` is 0.
    """
    if not (0.0 <= lower < upper):
        raise ValueError(f"need 0 <= lower < upper, got {lower}, {upper}")
    lr = is_log_ratio(learner_logp, rollout_logp, mask, level)
    inside = (lr >= (math.log(lower) if lower > 0 else -math.inf)) & (lr <= math.log(upper))
    r = torch.exp(lr.clamp(max=math.log(upper)))
    w = torch.where(inside, r if keep_ratio else torch.ones_like(r), torch.zeros_like(r))
    return torch.where(mask.bool(), w, torch.ones_like(w))


IS_CORRECTIONS: Registry[Callable[..., "Tensor | None"]] = Registry("IS correction", skip=3)
"""IS corrections by name: ``fn(learner_logp, rollout_logp, mask, **params) -> [B, T] weights``
(``"none"``: no weights); options are ``algorithm.is_params``."""


@IS_CORRECTIONS.register("none", doc="no correction")
def _no_correction(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> None:
    return None


IS_CORRECTIONS.add("tis", truncated_is_weights, doc="truncated importance weights (TIS)")
IS_CORRECTIONS.add("mis", masked_is_weights, doc="masked importance weights (MIS)")


def is_correction_weights(name: str, learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor,
                          **params) -> Tensor | None:
    """The weights of the correction registered under ``name`` (``None`` for ``"none"``)."""
    return IS_CORRECTIONS.get(name)(learner_logp, rollout_logp, mask, **params)


def logprob_mismatch(learner_logp: Tensor, rollout_logp: Tensor, mask: Tensor, *,
                     cap: float = 2.0) -> dict[str, float]:
    """Rollout-vs-learner log-prob mismatch over the counted tokens (``d = learner - rollout``)::

        mismatch_abs_mean     mean |d|
        mismatch_abs_max      max |d|
        mismatch_kl_k1        mean(-d)                     } estimates of KL(mu || pi_old) on tokens
        mismatch_kl_k3        mean(e^d - 1 - d)            } sampled from mu (Schulman 2020)
        mismatch_ratio_max    max e^d,  mismatch_ratio_min  min e^d
        mismatch_frac_over_cap  fraction of tokens with e^d > cap (what TIS truncates)
        mismatch_seq_log_ratio_abs_max  max_i |sum_t d_{i,t}|

    All 0.0 when no token counts.
    """
    _check(learner_logp, rollout_logp, mask)
    m = mask.bool()
    keys = ("mismatch_abs_mean", "mismatch_abs_max", "mismatch_kl_k1", "mismatch_kl_k3", "mismatch_ratio_max",
            "mismatch_ratio_min", "mismatch_frac_over_cap", "mismatch_seq_log_ratio_abs_max")
    if not bool(m.any()):
        return dict.fromkeys(keys, 0.0)
    with torch.no_grad():
        dfull = torch.where(m, learner_logp.double() - rollout_logp.double(), torch.zeros((), dtype=torch.float64))
        d = dfull[m]
        seq = dfull.sum(-1)[m.any(-1)]
        return {
            "mismatch_abs_mean": float(d.abs().mean()),
            "mismatch_abs_max": float(d.abs().max()),
            "mismatch_kl_k1": float((-d).mean()),
            "mismatch_kl_k3": float((torch.expm1(d) - d).mean()),
            "mismatch_ratio_max": float(d.max().exp()),
            "mismatch_ratio_min": float(d.min().exp()),
            "mismatch_frac_over_cap": float((d > math.log(cap)).double().mean()),
            "mismatch_seq_log_ratio_abs_max": float(seq.abs().max()),
        }
