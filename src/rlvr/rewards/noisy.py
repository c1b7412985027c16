"""Noisy verifiers: the verifier as a noisy binary channel, reward corrections, noise injection and
an online estimate of the noise rates.

Model (Cai et al. 2025, "Reinforcement Learning with Verifiable yet Noisy Rewards
under Imperfect Verifiers", arXiv:2510.00915): the clean reward ``R`` in {0, 1}
is observed through a channel with

    rho0 = P(R~ = 1 | R = 0)      false-positive rate
    rho1 = P(R~ = 0 | R = 1)      false-negative rate,      rho0 + rho1 < 1.

So ``E[R~ | R] = rho0 + (1 - rho0 - rho1) R``.

Note for group-normalised advantages: both corrections below are per-sample
*affine* maps of ``R~`` with batch-wide constants, so a group mean / std
normalisation (GRPO) cancels them exactly, and mean-centring alone (Dr. GRPO,
RLOO) only rescales by ``1 / (1 - rho0 - rho1)``.  They change the update when
used without group centring: the registered advantage estimators
``"noisy_backward"`` (default base ``"reinforce"``) and ``"noisy_forward"``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.algorithms.noisy import backward_correction, forward_correction_weights

__all__ = ["backward_correction", "forward_correction_weights", "flip_rewards", "NoiseRateEstimator"]


def flip_rewards(rewards: Tensor, rho0: float, rho1: float, generator: torch.Generator | None = None) -> Tensor:
    """Inject verifier noise into clean binary rewards: each 0 becomes 1 with probability ``rho0``
    (false positive), each 1 becomes 0 with probability ``rho1`` (false negative), independently.

    Args:
        rewards: clean rewards in {0, 1}, any shape.
        generator: a seeded ``torch.Generator`` for reproducible noise.

    Returns:
        Noisy rewards, same shape and dtype as ``rewards``.
    """
    if not (0.0 <= rho0 <= 1.0 and 0.0 <= rho1 <= 1.0):
        raise ValueError(f"need rho0, rho1 in [0, 1], got {rho0}, {rho1}")
    r = torch.as_tensor(rewards)
    if not bool(((r == 0) | (r == 1)).all()):
        raise ValueError("flip_rewards needs binary rewards in {0, 1}")
    u = torch.rand(r.shape, generator=generator, device=r.device)
    is_one = r == 1
    flip = torch.where(is_one, u < rho1, u < rho0)
    return torch.where(flip, 1 - r, r).to(r.dtype)


class NoiseRateEstimator:
    """Online estimate of (rho0, rho1) from audited pairs (observed reward, audited true reward),
    e.g. a judge re-checking a random sample of verdicts (the "appeals" of Cai et al. 2025).

    Posterior means under independent Beta priors centred on ``prior_rho0`` /
    ``prior_rho1`` with ``prior_strength`` pseudo-observations each::

        rho1 = (#{obs 0, true 1} + s * prior_rho1) / (#{true 1} + s)
        rho0 = (#{obs 1, true 0} + s * prior_rho0) / (#{true 0} + s)

    ``decay`` < 1 discounts old counts geometrically at every :meth:`update`
    (tracks a drifting verifier).  Rates are clamped so that ``rho0 + rho1 <=
    max_total`` (default 0.95) and the corrections stay finite.  The audit
    sample must be representative of each true class (e.g. uniform over
    rollouts); auditing only observed negatives identifies ``P(R = 1 | R~ = 0)``,
    not ``rho1``.
    """

    def __init__(self, prior_rho0: float = 0.0, prior_rho1: float = 0.0, prior_strength: float = 10.0,
                 decay: float = 1.0, max_total: float = 0.95):
        if not (0.0 <= prior_rho0 < 1.0 and 0.0 <= prior_rho1 < 1.0):
            raise ValueError(f"priors must be in [0, 1), got {prior_rho0}, {prior_rho1}")
        if prior_strength < 0 or not 0.0 < decay <= 1.0 or not 0.0 < max_total < 1.0:
            raise ValueError("need prior_strength >= 0, 0 < decay <= 1 and 0 < max_total < 1")
        self.prior_rho0, self.prior_rho1 = prior_rho0, prior_rho1
        self.prior_strength, self.decay, self.max_total = prior_strength, decay, max_total
        self.fp = self.n_neg = self.fn = self.n_pos = 0.0   # counts: false pos, true negatives seen, ...

    def update(self, observed: Tensor, true: Tensor) -> None:
        """Add audited pairs; both tensors hold {0, 1} values of the same shape."""
        o, t = torch.as_tensor(observed).reshape(-1), torch.as_tensor(true).reshape(-1)
        if o.shape != t.shape:
            raise ValueError(f"observed {tuple(o.shape)} and true {tuple(t.shape)} differ in shape")
        for x, name in ((o, "observed"), (t, "true")):
            if not bool(((x == 0) | (x == 1)).all()):
                raise ValueError(f"{name} must be binary")
        d = self.decay
        self.fp, self.n_neg, self.fn, self.n_pos = (d * self.fp, d * self.n_neg, d * self.fn, d * self.n_pos)
        self.fp += float(((o == 1) & (t == 0)).sum())
        self.n_neg += float((t == 0).sum())
        self.fn += float(((o == 0) & (t == 1)).sum())
        self.n_pos += float((t == 1).sum())

    @property
    def rates(self) -> tuple[float, float]:
        """``(rho0, rho1)``, the clamped posterior means."""
        s = self.prior_strength
        rho0 = (self.fp + s * self.prior_rho0) / (self.n_neg + s) if self.n_neg + s > 0 else self.prior_rho0
        rho1 = (self.fn + s * self.prior_rho1) / (self.n_pos + s) if self.n_pos + s > 0 else self.prior_rho1
        total = rho0 + rho1
        if total > self.max_total:
            rho0, rho1 = rho0 * self.max_total / total, rho1 * self.max_total / total
        return rho0, rho1

    @property
    def rho0(self) -> float:
        return self.rates[0]

    @property
    def rho1(self) -> float:
        return self.rates[1]

    def state_dict(self) -> dict:
        return {"fp": self.fp, "n_neg": self.n_neg, "fn": self.fn, "n_pos": self.n_pos}

    def load_state_dict(self, state: dict) -> None:
        self.fp, self.n_neg = float(state["fp"]), float(state["n_neg"])
        self.fn, self.n_pos = float(state["fn"]), float(state["n_pos"])
        if not all(math.isfinite(v) and v >= 0 for v in (self.fp, self.n_neg, self.fn, self.n_pos)):
            raise ValueError("corrupt NoiseRateEstimator state")
