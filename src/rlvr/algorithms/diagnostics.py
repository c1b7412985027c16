"""Per-step training diagnostics as one pure function returning plain floats."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.algorithms.advantages import group_stats
from rlvr.algorithms.importance import logprob_mismatch
from rlvr.algorithms.kl import kl_estimate

__all__ = ["step_diagnostics"]


def _mmean(x: Tensor, m: Tensor) -> float:
    n = m.sum()
    return float((torch.where(m, x, torch.zeros_like(x))).sum() / n) if n > 0 else 0.0


def step_diagnostics(*, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor,
                     clip_low: float = 0.2, clip_high: float = 0.2, rewards: Tensor | None = None,
                     group_size: int | None = None, entropy: Tensor | None = None,
                     rollout_logp: Tensor | None = None, ref_logp: Tensor | None = None,
                     is_cap: float = 2.0) -> dict[str, float]:
    """The diagnostics to log every step, from the tensors a training step already has.

    With ``ratio = exp(logp - old_logp)`` over the counted tokens (``mask``)
    and ``A`` the per-token advantage (a [B] advantage is broadcast):

    * ``clip_frac_low``: ``A < 0`` and ``ratio < 1 - clip_low``; ``clip_frac_high``:
      ``A > 0`` and ``ratio > 1 + clip_high``; ``clip_frac`` their sum (PPO-clip's
      zero-gradient tokens);
    * ``approx_kl_k2`` = mean ``0.5 (logp - old_logp)^2``, ``approx_kl_k3`` =
      mean ``e^x - 1 - x`` with ``x = old_logp - logp`` (KL(pi || pi_old),
      Schulman 2020); ``ratio_mean``, ``ratio_max``;
    * ``entropy`` (mean token entropy) if ``entropy`` is given;
    * ``zero_variance_frac``, ``reward_mean``, ``reward_std`` if ``rewards`` and
      ``group_size`` are given (fraction of groups whose rewards are all equal);
    * ``adv_mean``, ``adv_std``, ``adv_min``, ``adv_max``, ``adv_abs_mean``,
      ``adv_zero_frac`` (per sequence for [B] advantages, per counted token for [B, T]);
    * ``kl_ref`` (k3 estimate of KL(pi || pi_ref)) if ``ref_logp`` is given;
    * the :func:`~rlvr.algorithms.importance.logprob_mismatch` keys if
      ``rollout_logp`` is given (rollout engine vs learner, ``old_logp``).

    Returns:
        dict of Python floats (0.0 for empty inputs, never nan from padding).
    """
    if not (logp.shape == old_logp.shape == mask.shape):
        raise ValueError("logp, old_logp and mask must have the same [B, T] shape")
    m = mask.bool()
    out: dict[str, float] = {}
    with torch.no_grad():
        lp, olp = logp.detach().double(), old_logp.detach().double()
        x = torch.where(m, lp - olp, torch.zeros_like(lp))
        ratio = torch.exp(x)
        adv = advantages.detach().double()
        adv_tok = adv.unsqueeze(-1).expand_as(x) if adv.dim() == 1 else adv
        low = (adv_tok < 0) & (ratio < 1 - clip_low)
        high = (adv_tok > 0) & (ratio > 1 + clip_high)
        out["clip_frac_low"] = _mmean(low.double(), m)
        out["clip_frac_high"] = _mmean(high.double(), m)
        out["clip_frac"] = out["clip_frac_low"] + out["clip_frac_high"]
        out["approx_kl_k2"] = _mmean(0.5 * x.square(), m)
        out["approx_kl_k3"] = _mmean(torch.expm1(-x) + x, m)
        out["ratio_mean"] = _mmean(ratio, m)
        out["ratio_max"] = float(ratio[m].max()) if bool(m.any()) else 0.0
        if entropy is not None:
            out["entropy"] = _mmean(entropy.detach().double(), m)
        if rewards is not None and group_size is not None:
            r = torch.as_tensor(rewards).double()
            gs = group_stats(r, group_size)
            out["zero_variance_frac"] = float(gs["zero_variance_frac"])
            out["reward_mean"] = float(r.mean()) if r.numel() else 0.0
            out["reward_std"] = float(r.std(correction=0)) if r.numel() else 0.0
        vals = adv if adv.dim() == 1 else adv[m]
        if vals.numel():
            out.update(adv_mean=float(vals.mean()), adv_std=float(vals.std(correction=0)),
                       adv_min=float(vals.min()), adv_max=float(vals.max()), adv_abs_mean=float(vals.abs().mean()),
                       adv_zero_frac=float((vals == 0).double().mean()))
        else:
            out.update(dict.fromkeys(("adv_mean", "adv_std", "adv_min", "adv_max", "adv_abs_mean",
                                      "adv_zero_frac"), 0.0))
        if ref_logp is not None:
            out["kl_ref"] = _mmean(kl_estimate(lp, ref_logp.detach().double(), "k3", mask=mask), m)
        if rollout_logp is not None:
            out.update(logprob_mismatch(old_logp, rollout_logp, mask, cap=is_cap))
    return out
