"""The credit stage: a batch's rewards (outcome, per turn, per step) -> per-token advantages, in one place.

The recipe hands it the rewards the reward stage made (one training reward per sample) and what the
configured estimator needs (the critic's values, the policy's entropy, the completion mask, the KL
penalty); :meth:`CreditStage.assign` returns the advantages ([B] or [B, T]), the critic's targets
(PPO) and diagnostics.  Three kinds of credit, chosen by the run's settings::

    outcome     the registered estimator (algorithm.advantage: grpo, rloo, gae, ...) on the rewards
    per step    + reward.process_prm's step scores (process rewards; PURE's min-form, filters)
    per turn    algorithm.turn_credit (loo, gigpo) over a multi-turn episode's turn rewards

and, with on-policy distillation (``distill.teacher``), on top of any of them: ``distill.coef`` x the teacher's
minus the student's log-prob of every sampled token, plus ``distill.reward_coef`` x that advantage (KDRL).

Each setting is declared once: the estimators' options in their registry entries (GAE's in
:class:`rlvr.algorithms.gae.GAEParams`), the turn credits' in :data:`~rlvr.credit.turns.TURN_CREDIT`, the
process options in the ``reward`` section, composed by the recipe into a :class:`CreditSettings`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from rlvr.algorithms import ADVANTAGE_ESTIMATORS, get_advantage_estimator
from rlvr.algorithms.distill import distill_advantages, reverse_kl_stats
from rlvr.algorithms.gae import GAEParams, gae_advantages, masked_whiten
from rlvr.algorithms.process import PROCESS_FILTERS, process_advantages, process_token_rewards
from rlvr.algorithms.token_gate import high_entropy_token_mask
from rlvr.credit.settings import CreditSettings
from rlvr.credit.turns import TURN_CREDIT, spread_over_turns, turn_counts, turn_of_token
from rlvr.types import Batch, Sample

__all__ = ["CreditStage", "Credit"]


@dataclass
class Credit:
    """What the credit stage gives a batch."""

    advantages: Tensor
    """[B] (one per sequence, broadcast over its tokens) or [B, T] (per token)."""
    returns: Tensor | None = None
    """[B, T] the critic's targets (PPO), else None."""
    metrics: dict[str, float] = field(default_factory=dict)


class CreditStage:
    """Per-token advantages from a batch's rewards, as :class:`CreditSettings` configures (module docstring)."""

    def __init__(self, settings: CreditSettings):
        self.settings = settings
        self.entry = ADVANTAGE_ESTIMATORS.entry(settings.advantage)
        self.estimator = get_advantage_estimator(settings.advantage, **settings.advantage_params)
        t = settings.turns
        self.turn_credit = None if t.name == "none" else TURN_CREDIT.get(t.name)

    @property
    def takes(self) -> frozenset[str]:
        """The per-call tensors the estimator requires or accepts (``values``, ``entropy``, ``mask``, ``kl``)."""
        return self.entry.needs | self.entry.inputs

    @property
    def wants_entropy(self) -> bool:
        """Whether :meth:`assign` needs the policy's entropy (the estimator takes it, or the entropy gate is on)."""
        return "entropy" in self.takes or self.settings.entropy_token_fraction < 1

    @property
    def critic(self) -> bool:
        """Whether the estimator learns with a critic (PPO's GAE: it also returns the critic's targets)."""
        return "critic" in self.entry.tags

    def assign(self, rewards: Tensor, batch: Batch, *, inputs: dict[str, Any], steps: tuple | None = None,
               samples: Sequence[Sample] | None = None, token_kl: Tensor | None = None,
               distill: tuple[Tensor, Tensor] | None = None) -> Credit:
        """The advantages of ``batch`` from ``rewards`` [B]: per turn (``algorithm.turn_credit``), or the
        estimator's, with the process term of ``steps`` (``(step_scores, step_ends, step_mask)``) when given.

        With on-policy distillation on (``settings.distill``), ``distill`` is ``(teacher_logprobs, student_logprobs)``
        ([B, T] each, of the sampled tokens) and the result is :meth:`distilled`'s per-token advantage.  With
        ``settings.entropy_token_fraction < 1``, ``inputs["entropy"]`` ([B, T]) gates the result
        (:meth:`entropy_gated`)."""
        gate_entropy = inputs.get("entropy")
        inputs = {k: v for k, v in inputs.items() if k in self.takes}
        credit = self._assign(rewards, batch, inputs=inputs, steps=steps, samples=samples, token_kl=token_kl)
        if self.settings.distill is not None:
            if distill is None:
                raise ValueError("on-policy distillation needs the teacher's and the student's log-probs of the batch")
            credit = self.distilled(credit, batch, *distill)
        if self.settings.entropy_token_fraction < 1:
            if gate_entropy is None:
                raise ValueError("algorithm.entropy_token_fraction needs the policy's entropy of the batch")
            credit = self.entropy_gated(credit, batch, gate_entropy)
        return credit

    def entropy_gated(self, credit: Credit, batch: Batch, entropy: Tensor) -> Credit:
        """``credit``'s advantages on the top ``entropy_token_fraction`` of the batch's completion tokens by entropy,
        0 elsewhere (:func:`rlvr.algorithms.token_gate.high_entropy_token_mask`; [B, T]).  Metrics:
        ``credit/entropy_gate_threshold`` (the smallest kept entropy) and ``credit/entropy_gate_kept``."""
        mask = batch.completion_mask
        keep, threshold = high_entropy_token_mask(entropy, mask, self.settings.entropy_token_fraction)
        a = credit.advantages.float()
        a = (a[:, None] if a.dim() == 1 else a) * mask.to(a.dtype)
        metrics = dict(credit.metrics)
        metrics.update({"credit/entropy_gate_threshold": threshold,
                        "credit/entropy_gate_kept": float(keep.sum() / mask.sum().clamp(min=1))})
        return Credit((a * keep.to(a.dtype)).detach(), credit.returns, metrics)

    def _assign(self, rewards: Tensor, batch: Batch, *, inputs: dict[str, Any], steps: tuple | None = None,
                samples: Sequence[Sample] | None = None, token_kl: Tensor | None = None) -> Credit:
        G = self.settings.group_size
        if self.turn_credit is not None:
            if samples is None:
                raise ValueError("turn credit needs the batch's samples (their turn rewards and turn ends)")
            return self.per_turn(rewards, batch, samples)
        if steps is not None:
            outcome = None if self.critic else self.estimator(rewards, G, **inputs)
            adv, returns, m = self.process_credit(outcome, rewards, steps, batch.completion_mask,
                                                  values=batch.values, token_kl=token_kl)
            return Credit(adv, returns, m)
        if self.critic:
            adv, returns = self.estimator(rewards, G, **inputs)
            return Credit(adv, returns)
        return Credit(self.estimator(rewards, G, **inputs))

    # ------------------------------------------------------------------ on-policy distillation
    def distilled(self, credit: Credit, batch: Batch, teacher_logprobs: Tensor, student_logprobs: Tensor) -> Credit:
        """``distill.coef * (log pi_T - log pi_S) + distill.reward_coef * A_rl`` per completion token ([B, T];
        :func:`rlvr.algorithms.distill.distill_advantages`), where ``A_rl`` is ``credit``'s advantage (the
        estimator's, per turn or with process credit); demonstration rows (``batch.off_policy``) keep only the RL
        term.  Metrics over the student's own completion tokens: ``distill/reverse_kl`` (mean ``log pi_S - log
        pi_T``), ``distill/teacher_logprob``, ``distill/student_logprob``."""
        d = self.settings.distill
        mask = batch.completion_mask
        on_policy = None if batch.off_policy is None else ~batch.off_policy.bool()
        adv = distill_advantages(teacher_logprobs, student_logprobs, mask, coef=d.coef, reward_coef=d.reward_coef,
                                 rl_advantages=credit.advantages, on_policy=on_policy)
        counted = mask if on_policy is None else mask * on_policy.to(mask.dtype)[:, None]
        metrics = dict(credit.metrics)
        metrics.update({f"distill/{k}": v for k, v in reverse_kl_stats(teacher_logprobs, student_logprobs,
                                                                       counted).items()})
        if d.reward_coef:
            a = credit.advantages.float()
            a = (a[:, None] if a.dim() == 1 else a) * mask
            metrics["distill/rl_adv_abs_mean"] = float(a.abs().sum() / mask.sum().clamp(min=1))
        return Credit(adv, credit.returns, metrics)

    # ------------------------------------------------------------------ per turn
    def per_turn(self, rewards: Tensor, batch: Batch, samples: Sequence[Sample]) -> Credit:
        """``algorithm.turn_credit``'s advantage of each turn, on that turn's policy tokens ([B, T])."""
        t = self.settings.turns
        A = self.turn_credit(samples, rewards, self.settings.group_size, **t.params)
        start = max(len(s.prompt_ids) for s in samples)
        index = turn_of_token(samples, start, batch.completion_mask.shape[1])
        adv = spread_over_turns(A, index, batch.completion_mask)
        alive = torch.arange(A.shape[1])[None, :] < torch.tensor(turn_counts(samples))[:, None]
        metrics = {"credit/turns_max": float(A.shape[1]),
                   "credit/turn_adv_abs_mean": float(A[alive].abs().mean()) if bool(alive.any()) else 0.0}
        return Credit(adv.detach(), None, metrics)

    # ------------------------------------------------------------------ per step (process rewards)
    def process_credit(self, outcome_adv: Tensor | None, rewards: Tensor, steps: tuple, mask: Tensor, *,
                       values: Tensor | None = None, token_kl: Tensor | None = None) -> tuple[Tensor, Tensor | None,
                                                                                               dict[str, float]]:
        """Token-level advantages [B, T] with the PRM's step scores (``steps``: ``(step_scores [B, K], step_ends
        [B, K], step_mask [B, K])``).

        GRPO family (``values`` None)::

            A_t = outcome_coef * A_est  +  process term of process_advantages(...)      (0 for filtered samples)

        where ``A_est`` is the configured estimator's advantage of the outcome rewards
        ([B] broadcast over the completion, or [B, T]) and the process term is
        :func:`~rlvr.algorithms.process.process_advantages` with ``outcome_coef=0``:
        transforms, the ``process_baseline``, credit (sum | min) and returns-to-go, times
        ``process_coef``.  The filter sees the outcome rewards; its dropped samples get 0.

        PPO (``values`` given): GAE over :func:`~rlvr.algorithms.process.process_token_rewards`
        (credited step rewards on each step's last token, ``outcome_coef * r`` on the
        last token) minus the KL penalty, whitened if GAE's ``whiten``; filtered
        samples get advantage 0 (their returns still train the critic).

        Returns ``(advantages [B, T], returns [B, T] or None, metrics)``.
        """
        p, G = self.settings.process, self.settings.group_size
        scores, ends, smask = steps
        m = mask.to(torch.float32)
        keep = PROCESS_FILTERS[p.filter](scores, smask, rewards, **p.filter_params).bool()
        returns = None
        if values is None:
            proc, info = process_advantages(scores, ends, smask, rewards, G, mask, transforms=list(p.transforms),
                                            credit=p.credit, credit_params=p.credit_params, filter=p.filter,
                                            filter_params=p.filter_params, baseline=p.baseline, outcome_coef=0.0,
                                            process_coef=p.process_coef)
            out = outcome_adv.float()
            out = out * m if out.dim() == 2 else out[:, None] * m
            adv = p.outcome_coef * out * keep[:, None].to(out.dtype) + proc.float()
        else:
            adv, returns, info = self._process_gae(steps, rewards, mask, keep, values, token_kl)
        info = {k: v for k, v in info.items() if not (isinstance(v, float) and math.isnan(v))}
        info["process/step_score_mean"] = float(scores[smask].mean()) if bool(smask.any()) else 0.0
        info["process/steps_per_sample"] = float(smask.sum(1).float().mean())
        return adv.detach(), returns, info

    def _process_gae(self, steps: tuple, rewards: Tensor, mask: Tensor, keep: Tensor, values: Tensor,
                     token_kl: Tensor | None):
        """PPO's process credit: GAE over the credited token rewards (see :meth:`process_credit`)."""
        p, s = self.settings.process, self.settings
        scores, ends, smask = steps
        m = mask.to(torch.float32)
        tok = process_token_rewards(scores, ends, smask, mask, rewards, group_size=s.group_size,
                                    transforms=list(p.transforms), credit=p.credit, credit_params=p.credit_params,
                                    process_coef=p.process_coef, outcome_coef=p.outcome_coef).float()
        if token_kl is not None and s.kl_coef:
            tok = tok - s.kl_coef * token_kl.float() * m
        gp = GAEParams.model_validate(s.advantage_params)
        adv, returns = gae_advantages(tok, values.float(), m, gamma=gp.gamma, lam=gp.lam)
        if gp.whiten:
            adv = masked_whiten(adv, m)
        adv = adv * keep[:, None].to(adv.dtype)
        has = smask.any(dim=1)
        info = {"process/kept_share": float(keep.float().mean()),
                "process/min_step_mean": float(torch.where(smask, scores, torch.full_like(scores, math.inf))
                                               .amin(1)[has].mean()) if bool(has.any()) else math.nan}
        return adv, returns, info
