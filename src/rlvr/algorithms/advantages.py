"""Advantage estimators: group-relative (GRPO, Dr. GRPO, RLOO, quantile, pass@k),
sign-based (PSR / NSR / W-REINFORCE), batch-normalised (REINFORCE++), value-based
(GAE, see :mod:`rlvr.algorithms.gae`), entropy-guided for zero-variance groups,
and noisy-verifier corrected (see :mod:`rlvr.rewards.noisy`).

Every prompt is sampled ``G`` times (a *group*); groups are consecutive blocks of
``group_size`` rewards: ``rewards[k*G:(k+1)*G]`` belong to prompt ``k``.

Common signature (what :data:`ADVANTAGE_ESTIMATORS` holds)::

    estimator(rewards: Tensor [N], group_size: int, **extra) -> Tensor [N] or [N, T]

``extra`` are keyword-only hyper-parameters (bind them from the config with
``get_advantage_estimator(name, **params)``) and, for token-level estimators,
per-token tensors that the caller must pass at call time; they are listed in
each entry's ``needs`` / ``inputs`` in :data:`ADVANTAGE_ESTIMATORS`.  A [N] result is one advantage per sequence
(broadcast over its tokens by the losses); a [N, T] result is per token and is 0
where ``mask`` is 0.  Every estimator treats its inputs as constants (no
gradient flows through advantages).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
from torch import Tensor

from rlvr.algorithms.dgpo import dgpo_advantages
from rlvr.algorithms.disco import disco_advantages
from rlvr.algorithms.dpo import online_dpo_advantages
from rlvr.algorithms.gae import GAEParams
from rlvr.algorithms.maxk import maxk_advantages
from rlvr.algorithms.tree import tree_advantages
from rlvr.algorithms.ucas import ucas_advantages
from rlvr.registry import Registry, params_from_signature

__all__ = [
    "group_normalized_advantages",
    "grpo_advantages",
    "drgrpo_advantages",
    "rloo_advantages",
    "reinforce_advantages",
    "reinforce_pp_advantages",
    "passk_advantages",
    "psr_advantages",
    "nsr_advantages",
    "w_reinforce_advantages",
    "quantile_advantages",
    "entropy_guided_advantages",
    "group_stats",
    "ADVANTAGE_ESTIMATORS",
    "get_advantage_estimator",
]

AdvantageEstimator = Callable[..., Tensor]


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """``rewards`` [N] as a float [N / group_size, group_size] view, with checks."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    if n % group_size:
        raise ValueError(f"number of rewards ({n}) is not divisible by group_size ({group_size})")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    return rewards.reshape(n // group_size, group_size)


def _group_std(r: Tensor) -> Tensor:
    """Per-group sample std (Bessel-corrected, ``correction=1``); 0 for groups of one."""
    if r.shape[1] < 2:
        return torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    return r.std(dim=1, correction=1)


def _zero_variance(r: Tensor) -> Tensor:
    """Bool [num_groups]: all rewards in the group are equal."""
    return (r == r[:, :1]).all(dim=1)


def group_normalized_advantages(rewards: Tensor, group_size: int, *, scale_by_std: bool = True,
                                eps: float = 1e-6) -> Tensor:
    """Group-relative advantages of GRPO (Shao et al. 2024, *DeepSeekMath*, Sec. 4.1.2).

    For a group of rewards ``r_1..r_G`` of the same prompt::

        A_i = (r_i - mean(r)) / (std(r) + eps)        # GRPO (scale_by_std=True)
        A_i =  r_i - mean(r)                          # Dr. GRPO (Liu et al. 2025, scale_by_std=False)

    ``std`` is the *sample* standard deviation (Bessel-corrected,
    ``torch.std(correction=1)``), which is what ``torch.Tensor.std`` does by
    default and what the TRL ``GRPOTrainer`` and the DeepSeekMath-style
    implementations use.  Dr. GRPO drops the division because it up-weights
    prompts whose rewards barely vary (too easy or too hard) and biases the
    objective.

    Groups whose rewards are all equal carry no learning signal and get an
    advantage of exactly 0 (not a rounding residue), so callers can skip them.
    Groups of size 1 are such groups.

    Args:
        rewards: [N] rewards, grouped in consecutive blocks of ``group_size``.
        group_size: G; ``N`` must be divisible by it.
        scale_by_std: divide by the group std (GRPO) or not (Dr. GRPO).
        eps: added to the std in the denominator.

    Returns:
        [N] advantages (floating point; integer rewards are converted).
    """
    r = _grouped(rewards, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale_by_std:
        adv = adv / (_group_std(r).unsqueeze(1) + eps)
    adv = torch.where(_zero_variance(r).unsqueeze(1), torch.zeros_like(adv), adv)
    return adv.reshape(-1)


def grpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """GRPO advantages, ``(r - mean) / (std + 1e-6)`` per group (Shao et al. 2024)."""
    return group_normalized_advantages(rewards, group_size, scale_by_std=True)


def drgrpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """Dr. GRPO advantages, ``r - mean`` per group (Liu et al. 2025, *Understanding R1-Zero-Like Training*)."""
    return group_normalized_advantages(rewards, group_size, scale_by_std=False)


def group_stats(rewards: Tensor, group_size: int) -> dict[str, Tensor]:
    """Per-group reward statistics.

    Returns a dict of tensors:

    * ``mean``: [N / G] group means;
    * ``std``: [N / G] group sample stds (``correction=1``, as in
      :func:`group_normalized_advantages`; 0 for groups of one);
    * ``zero_variance``: [N / G] bool, all rewards of the group equal;
    * ``zero_variance_frac``: 0-dim, fraction of groups with zero variance
      (these contribute no policy gradient).
    """
    r = _grouped(rewards, group_size)
    zv = _zero_variance(r)
    return {
        "mean": r.mean(dim=1),
        "std": _group_std(r),
        "zero_variance": zv,
        "zero_variance_frac": zv.to(r.dtype).mean(),
    }


# --------------------------------------------------------------------------- leave-one-out, plain REINFORCE
def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """RLOO: REINFORCE with a leave-one-out baseline (Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a
    Baseline for Free!"; Ahmadian et al. 2024, "Back to Basics").  For a group ``r_1..r_G``::

        A_i = r_i - 1/(G-1) * sum_{j != i} r_j  =  G/(G-1) * (r_i - mean(r))

    The baseline of sample ``i`` does not depend on ``r_i``, so the estimator is
    unbiased.  Groups of one have no baseline and get 0, as do groups whose
    rewards are all equal.

    Returns:
        [N] advantages.
    """
    r = _grouped(rewards, group_size)
    if group_size < 2:
        return torch.zeros_like(r).reshape(-1)
    adv = (r - r.mean(dim=1, keepdim=True)) * (group_size / (group_size - 1))
    adv = torch.where(_zero_variance(r).unsqueeze(1), torch.zeros_like(adv), adv)
    return adv.reshape(-1)


def reinforce_advantages(rewards: Tensor, group_size: int, *, baseline: float = 0.0) -> Tensor:
    """Plain REINFORCE (Williams 1992): ``A_i = r_i - b`` with a constant baseline ``b`` (default 0).

    No group statistics at all; use it with rewards that are already centred or
    corrected, e.g. the noisy-verifier corrections of :mod:`rlvr.rewards.noisy`,
    whose effect a group mean/std normalisation would cancel.

    Returns:
        [N] advantages.
    """
    r = _grouped(rewards, group_size)
    return (r - baseline).reshape(-1)


# --------------------------------------------------------------------------- REINFORCE++
def _masked_reverse_cumsum(x: Tensor, mask: Tensor) -> Tensor:
    """``G_t = sum_{s >= t, mask_s} x_s`` along the last dim (gamma = 1), 0 where ``mask`` is 0."""
    m = mask.to(x.dtype)
    xm = x * m
    g = xm.flip(-1).cumsum(-1).flip(-1)
    return g * m


def reinforce_pp_advantages(rewards: Tensor, group_size: int, *, mask: Tensor | None = None,
                            kl: Tensor | None = None, kl_coef: float = 0.0, baseline: str = "none",
                            eps: float = 1e-8) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning LLMs").

    The outcome reward ``r_i`` is placed on the last completion token, the
    per-token KL penalty is folded into the reward, returns are summed to the end
    of the sequence (gamma = 1) and the advantages are normalised over the whole
    *batch* (not per group)::

        r_{i,t} = 1[t = last_i] * r_i - kl_coef * KL_{i,t}
        G_{i,t} = sum_{s >= t} r_{i,s}
        A_{i,t} = (G_{i,t} - mean_batch(G)) / (std_batch(G) + eps)

    with mean and (sample) std taken over all completion tokens of the batch.
    ``baseline="group_mean"`` is REINFORCE++-baseline: ``r_i`` is first replaced
    by ``r_i - mean(group of i)``.

    Args:
        rewards: [N] outcome rewards.
        group_size: G (only used by ``baseline="group_mean"``; N must divide).
        mask: [N, T] completion mask.  When ``None`` the result is per sequence
            ([N], batch-whitened rewards) and ``kl`` must be ``None``.
        kl: [N, T] per-token KL estimates between the sampling policy and the
            reference (e.g. :func:`rlvr.algorithms.kl.kl_estimate` with ``"k1"``
            on the rollout log-probs), treated as constants.
        kl_coef: beta >= 0.
        baseline: ``"none"`` or ``"group_mean"``.

    Returns:
        [N] (no ``mask``) or [N, T] advantages, 0 where ``mask`` is 0.
    """
    from rlvr.algorithms.gae import masked_whiten
    from rlvr.algorithms.kl import kl_in_reward

    if baseline not in ("none", "group_mean"):
        raise ValueError(f"baseline must be 'none' or 'group_mean', got {baseline!r}")
    r = _grouped(rewards, group_size)
    if baseline == "group_mean":
        r = r - r.mean(dim=1, keepdim=True)
    r = r.reshape(-1)
    if mask is None:
        if kl is not None and kl_coef != 0:
            raise ValueError("a per-token kl needs the completion mask")
        return masked_whiten(r, torch.ones_like(r), eps)
    if mask.dim() != 2 or mask.shape[0] != r.shape[0]:
        raise ValueError(f"mask must be [N={r.shape[0]}, T], got {tuple(mask.shape)}")
    token_rewards = kl_in_reward(r, mask, kl=kl, kl_coef=kl_coef)
    returns = _masked_reverse_cumsum(token_rewards, mask)
    return masked_whiten(returns, mask, eps)


# --------------------------------------------------------------------------- pass@k
def _binary(r: Tensor, what: str) -> Tensor:
    if not bool(((r == 0) | (r == 1)).all()):
        raise ValueError(f"{what} needs binary rewards in {{0, 1}}")
    return r


def passk_advantages(rewards: Tensor, group_size: int, *, k: int = 4) -> Tensor:
    """Pass@k training advantages, analytic form (Chen et al. 2025, "Pass@k Training for Adaptively
    Balancing Exploration and Exploitation of Large Reasoning Models", Sec. 4).

    A group of ``n = G`` binary rewards with ``n_neg`` failures is read as all
    ``C(n, k)`` subsets of size ``k``, each rewarded with its max (pass@k).  The
    group's mean subset reward, its std, and the per-response advantages (each
    response's share of the subsets it belongs to) are::

        R    = 1 - C(n_neg, k) / C(n, k)
        std  = sqrt(R * (1 - R))
        A_pos = (1 - R) / std
        A_neg = (1 - R - C(n_neg - 1, k - 1) / C(n - 1, k - 1)) / std

    With ``k = 1`` this is GRPO with the population std.  Groups where every
    size-k subset passes (``n_neg < k``) or none does get 0.

    Returns:
        [N] advantages.
    """
    if not isinstance(k, int) or k < 1 or k > group_size:
        raise ValueError(f"need 1 <= k <= group_size ({group_size}), got {k!r}")
    r = _binary(_grouped(rewards, group_size), "pass@k")
    n = group_size
    adv = torch.zeros_like(r)
    for g in range(r.shape[0]):
        n_neg = int((r[g] == 0).sum())
        mean = 1.0 - math.comb(n_neg, k) / math.comb(n, k)
        if mean <= 0.0 or mean >= 1.0:
            continue
        std = math.sqrt(mean * (1.0 - mean))
        a_pos = (1.0 - mean) / std
        a_neg = (1.0 - mean - math.comb(n_neg - 1, k - 1) / math.comb(n - 1, k - 1)) / std
        adv[g] = torch.where(r[g] == 1, torch.tensor(a_pos, dtype=r.dtype), torch.tensor(a_neg, dtype=r.dtype))
    return adv.reshape(-1)


# --------------------------------------------------------------------------- sign-based (PSR / NSR / W-REINFORCE)
def _correct(rewards: Tensor, group_size: int, threshold: float) -> Tensor:
    return _grouped(rewards, group_size).reshape(-1) > threshold


def psr_advantages(rewards: Tensor, group_size: int, *, threshold: float = 0.5) -> Tensor:
    """Positive-sample reinforcement (Zhu et al. 2025, "The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning"): ``A_i = 1[r_i > threshold]`` (correct samples only, like SFT on them)."""
    c = _correct(rewards, group_size, threshold)
    return c.to(torch.get_default_dtype())


def nsr_advantages(rewards: Tensor, group_size: int, *, threshold: float = 0.5) -> Tensor:
    """Negative-sample reinforcement (Zhu et al. 2025): ``A_i = -1[r_i <= threshold]``.

    Only incorrect samples get a (negative) signal; their probability mass is
    redistributed by the softmax towards the other candidates the model already
    ranks high, which the paper shows preserves pass@k.
    """
    c = _correct(rewards, group_size, threshold)
    return -(~c).to(torch.get_default_dtype())


def w_reinforce_advantages(rewards: Tensor, group_size: int, *, lam: float = 0.1,
                           threshold: float = 0.5) -> Tensor:
    """Weighted REINFORCE, W-REINFORCE (Zhu et al. 2025): ``L = lam * L_PSR + L_NSR``, i.e.::

        A_i = +lam   if r_i > threshold  (correct; the paper uses lam = 0.1)
        A_i = -1     otherwise
    """
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    c = _correct(rewards, group_size, threshold)
    dt = torch.get_default_dtype()
    return torch.where(c, torch.tensor(lam, dtype=dt), torch.tensor(-1.0, dtype=dt))


# --------------------------------------------------------------------------- quantile baseline
def quantile_advantages(rewards: Tensor, group_size: int, *, quantile: float = 0.5, scale_by_std: bool = True,
                        eps: float = 1e-6) -> Tensor:
    """Quantile Advantage Estimation, QAE (Wu et al. 2025, "Quantile Advantage Estimation for
    Entropy-Safe Reasoning"): GRPO with the group mean replaced by the group's K-quantile::

        b   = Q_K(r) = min{ x in r : #{j : r_j <= x} / G >= K }     (K = ``quantile``)
        A_i = (r_i - b) / (std(r) + eps)       (or r_i - b with scale_by_std=False)

    ``Q_K`` is the lower empirical quantile (the inverse CDF, sorted index
    ``ceil(K G) - 1``), which gives the paper's two regimes for binary rewards
    with pass rate p: ``p <= 1 - K`` -> b = 0, only successes are reinforced;
    ``p > 1 - K`` -> b = 1, only failures are penalised.  ``std`` is the sample
    std as in :func:`group_normalized_advantages`; all-equal groups get 0.
    """
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    r = _grouped(rewards, group_size)
    idx = max(math.ceil(quantile * group_size - 1e-9) - 1, 0)
    b = r.sort(dim=1).values[:, idx:idx + 1]
    adv = r - b
    if scale_by_std:
        adv = adv / (_group_std(r).unsqueeze(1) + eps)
    adv = torch.where(_zero_variance(r).unsqueeze(1), torch.zeros_like(adv), adv)
    return adv.reshape(-1)


# --------------------------------------------------------------------------- entropy-guided (zero-variance groups)
def entropy_guided_advantages(rewards: Tensor, group_size: int, *, entropy: Tensor, mask: Tensor,
                              alpha: float = 0.1, threshold: float = 0.5, base: str = "grpo") -> Tensor:
    """Entropy-guided advantage shaping for zero-variance groups, RL-ZVP (Le et al. 2025, "No Prompt
    Left Behind: Exploiting Zero-Variance Prompts in LLM Reinforcement Learning via Entropy-Guided
    Advantage Shaping").

    Groups with reward variance keep the ``base`` estimator's advantage
    (broadcast over tokens).  In a zero-variance group (all rewards equal) every
    token ``t`` of response ``i`` gets, with ``H`` the (detached) token entropy::

        all correct (r > threshold):  A_{i,t} =  alpha * H_{i,t}
        all wrong:                    A_{i,t} = -alpha * (max_s H_{i,s} - H_{i,t})

    so correct answers are reinforced most at uncertain ("forking") tokens and
    wrong answers are penalised most where the model was confident.

    Args:
        rewards: [N]; ``entropy``, ``mask``: [N, T] (entropy of the policy at
            each completion token; see ``entropy_from_logits``).
        base: the estimator for groups with variance (a name in
            :data:`ADVANTAGE_ESTIMATORS` that needs no extra inputs).

    Returns:
        [N, T] advantages, 0 where ``mask`` is 0.
    """
    r = _grouped(rewards, group_size)
    if entropy.shape != mask.shape or entropy.dim() != 2 or entropy.shape[0] != r.numel():
        raise ValueError(f"entropy {tuple(entropy.shape)} and mask {tuple(mask.shape)} must both be [N, T] "
                         f"with N = {r.numel()}")
    m = mask.bool()
    h = entropy.detach().to(r.dtype)
    h = torch.where(m, h, torch.zeros_like(h))
    base_adv = get_advantage_estimator(base)(rewards, group_size).to(r.dtype)
    adv = base_adv.unsqueeze(-1).expand_as(h).clone()
    zv = _zero_variance(r).repeat_interleave(group_size)            # [N]
    correct = r.reshape(-1) > threshold                             # [N]
    h_max = torch.where(m, h, torch.full_like(h, -math.inf)).amax(-1, keepdim=True)
    h_max = torch.where(torch.isfinite(h_max), h_max, torch.zeros_like(h_max))
    pos = alpha * h
    neg = -alpha * (h_max - h)
    zv_adv = torch.where(correct.unsqueeze(-1), pos, neg)
    adv = torch.where(zv.unsqueeze(-1), zv_adv, adv)
    return torch.where(m, adv, torch.zeros_like(adv))


# --------------------------------------------------------------------------- registry
def _gae_estimator(rewards: Tensor, group_size: int, *, values: Tensor, mask: Tensor, kl: Tensor | None = None,
                   kl_coef: float = 0.0, **options: Any) -> tuple[Tensor, Tensor]:
    """PPO advantages from a learned value head with GAE, and the returns (the critic's targets): ``(advantages
    [B, T], returns [B, T])``; see :func:`rlvr.algorithms.gae.ppo_gae_advantages`.  ``options`` (gamma, lam,
    whiten) and their defaults are :class:`rlvr.algorithms.gae.GAEParams`."""
    from rlvr.algorithms.gae import GAEParams, ppo_gae_advantages

    p = GAEParams.model_validate(options)
    return ppo_gae_advantages(rewards, values, mask, gamma=p.gamma, lam=p.lam, kl=kl, kl_coef=kl_coef,
                              whiten=p.whiten)


def _noisy_backward(rewards: Tensor, group_size: int, *, rho0: float, rho1: float, base: str = "reinforce",
                    **base_params) -> Tensor:
    """Backward-corrected rewards ``(r - rho0) / (1 - rho0 - rho1)`` fed to ``base``; see :mod:`rlvr.rewards.noisy`."""
    from rlvr.algorithms.noisy import backward_correction

    return get_advantage_estimator(base, **base_params)(backward_correction(rewards, rho0, rho1), group_size)


def _noisy_forward(rewards: Tensor, group_size: int, *, rho1: float) -> Tensor:
    """Forward-correction weights ``r - (1 - rho1)`` as advantages; see :mod:`rlvr.rewards.noisy`."""
    from rlvr.algorithms.noisy import forward_correction_weights

    _grouped(rewards, group_size)
    return forward_correction_weights(rewards, rho1)


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator", skip=2)
"""Advantage estimators by name; each maps ``(rewards [N], group_size, **inputs, **options) -> [N] or [N, T]``.

An entry's ``needs`` are per-call tensors the recipe must supply (``entropy``,
``values``, ``mask``), its ``inputs`` the optional ones (``mask``, ``kl``); its
options (hyper-parameters from ``algorithm.advantage_params``) are the rest of
its keyword parameters and are validated when a config loads.  An entry tagged
``critic`` (``gae``) learns with a critic: it needs ``values`` and returns
``(advantages, returns)``, the returns being the critic's targets.  Register a new
one with ``@ADVANTAGE_ESTIMATORS.register("name")`` on the function.
"""

_A = ADVANTAGE_ESTIMATORS
_A.add("grpo", grpo_advantages)
_A.add("drgrpo", drgrpo_advantages)
_A.add("rloo", rloo_advantages)
_A.add("reinforce", reinforce_advantages, tags={"single_sample"})
# REINFORCE++ whitens every completion token of the batch: the recipe passes the completion mask, and with
# algorithm.kl_in_reward the per-token KL and algorithm.kl_coef (inputs, not advantage_params options)
_A.add("reinforce_pp", reinforce_pp_advantages, inputs={"mask", "kl", "kl_coef"}, tags={"single_sample"})
_A.add("reinforce_pp_baseline", functools.partial(reinforce_pp_advantages, baseline="group_mean"),
       params=params_from_signature(reinforce_pp_advantages, skip=2, exclude={"mask", "kl", "kl_coef", "baseline"}),
       inputs={"mask", "kl", "kl_coef"}, doc="REINFORCE++ with the group mean as baseline")
_A.add("gae", _gae_estimator, params=GAEParams, needs={"values", "mask"}, inputs={"kl", "kl_coef"},
       tags={"single_sample", "critic"})
def _check_passk(params: dict, group_size: int, **_) -> None:
    k = params["k"]  # the option's default filled in by the registry
    if k > group_size:
        raise ValueError(f"k={k} needs at least k samples per group: rollout.group_size={group_size} < k")


_A.add("passk", passk_advantages, check=_check_passk)


def _check_maxk(params: dict, group_size: int, **_) -> None:
    k = params["k"]
    if k > group_size - 1:
        raise ValueError(f"k={k} needs at least k + 1 samples per group (a leave-one-out baseline): "
                         f"rollout.group_size={group_size}")


_A.add("maxk", maxk_advantages, check=_check_maxk,
       doc="max@k (continuous pass@k; PKPO, Best of N Worlds): unbiased gradient weights, leave-one-out baseline")
_A.add("dgpo", dgpo_advantages, doc="DGPO (MathForge): mean-absolute-deviation scaling (DGAE) and softmax "
                                     "question weights favouring harder questions (DQW)")
_A.add("psr", psr_advantages)
_A.add("nsr", nsr_advantages)
_A.add("w_reinforce", w_reinforce_advantages)
_A.add("quantile", quantile_advantages)
_A.add("entropy_guided", entropy_guided_advantages, needs={"entropy", "mask"})

_A.add("disco", disco_advantages, needs={"seq_logprob"},
       doc="DisCO: raise correct answers' scores, lower wrong ones' (mean, or tau-softmax: hardest first)")
_A.add("online_dpo", online_dpo_advantages, needs={"logratio", "mask"},
       doc="online DPO: each group's best vs worst samples, DPO's gradient as sequence weights")
_A.add("tree", tree_advantages, needs={"mask", "forks"},
       doc="rollout-tree credit over branched groups (rollout.branches): fork values")
_A.add("ucas", ucas_advantages, needs={"certainty", "token_logits", "mask"},
       doc="UCAS: advantages scaled by self-confidence, minus a token-logit penalty")
_A.add("noisy_backward", _noisy_backward)
_A.add("noisy_forward", _noisy_forward)
del _A


def get_advantage_estimator(name: str, **params) -> AdvantageEstimator:
    """The estimator registered under ``name`` in :data:`ADVANTAGE_ESTIMATORS`.

    Keyword ``params`` (hyper-parameters from the config, e.g. ``k=8`` for
    ``"passk"``) are bound with :func:`functools.partial`; the result is still
    called as ``estimator(rewards, group_size, **per_call_tensors)``.
    """
    fn = ADVANTAGE_ESTIMATORS.get(name)
    if params:
        ADVANTAGE_ESTIMATORS.validate_params(name, params, key="advantage_params")
    return functools.partial(fn, **params) if params else fn
