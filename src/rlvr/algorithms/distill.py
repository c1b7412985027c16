"""On-policy distillation: the teacher scores every token the student sampled; the per-token reverse KL is the
training signal, optionally mixed with a verifier's RL advantage (KDRL).

Papers:

* Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes"
  (GKD, ICLR 2024): train the student on its own samples against the teacher's token distribution; the
  reverse KL ``KL(pi_S || pi_T)`` is the mode-seeking divergence of that family.
* Thinking Machines Lab 2025, "On-Policy Distillation" (Lu et al., blog post): the negative per-token reverse
  KL, ``log pi_T(y_t | y_<t) - log pi_S(y_t | y_<t)`` on the student's sampled token, used as a per-token
  advantage (discount 0) in an ordinary policy-gradient / importance-sampling loss.
* Xu et al. 2025, "KDRL: Post-Training Reasoning LLMs via Unified Knowledge Distillation and Reinforcement
  Learning": one objective that weights the reverse-KL distillation term against the GRPO term of a verifier
  reward.  Here both enter as advantages of the same policy-gradient loss.

The formula, per completion token ``t`` of sequence ``i``::

    A_{i,t} = coef * (log pi_T(y_{i,t}) - log pi_S(y_{i,t}))  +  reward_coef * A_rl_{i(,t)}

``log pi_S`` is the student before the update (the learner's ``logp_old``, detached) and ``log pi_T`` the
frozen teacher, both of the token the student sampled, under the same temperature.  ``A_rl`` is the credit
stage's advantage of the verifier's reward ([B] broadcast over the sequence's tokens, or [B, T]).  With
``reward_coef = 0`` it is pure on-policy distillation; with ``coef = 0`` it is plain RL.  The policy
gradient of ``-mean_t A_t log pi_S(y_t)`` with the distillation part alone is
``mean_t (log pi_S - log pi_T)(y_t) grad log pi_S(y_t)``: the gradient of the sampled per-token reverse KL,
each token's estimate treated as a constant reward of that token only (no returns to go, as the Thinking
Machines post).  Tokens the student did not sample (off-policy demonstrations, ``on_policy`` False) carry no
distillation term: the reverse-KL estimate is only unbiased on the student's own samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["distill_advantages", "reverse_kl_stats"]


def distill_advantages(teacher_logprobs: Tensor, student_logprobs: Tensor, mask: Tensor, *, coef: float = 1.0,
                       reward_coef: float = 0.0, rl_advantages: Tensor | None = None,
                       on_policy: Tensor | None = None) -> Tensor:
    """Per-token advantages ``coef * (log pi_T - log pi_S) + reward_coef * A_rl`` on ``mask``, 0 elsewhere.

    Args:
        teacher_logprobs: [B, T] ``log pi_T`` of every sampled token (any value off the mask).
        student_logprobs: [B, T] ``log pi_S`` of the same tokens (the policy before the update).
        mask: [B, T] completion mask (1 on the student's tokens).
        coef: weight of the distillation term, >= 0.
        reward_coef: weight of the RL advantage, >= 0 (0: pure distillation; ``rl_advantages`` may be None).
        rl_advantages: [B] (one per sequence) or [B, T] advantages of the verifier reward.
        on_policy: [B] bool, rows the student sampled (None: all); other rows get no distillation term.

    Returns:
        [B, T] float32 advantages, detached.
    """
    if coef < 0 or reward_coef < 0:
        raise ValueError(f"coef and reward_coef must be >= 0, got {coef} and {reward_coef}")
    if coef == 0 and reward_coef == 0:
        raise ValueError("coef and reward_coef are both 0: every advantage would be 0")
    if teacher_logprobs.shape != student_logprobs.shape or teacher_logprobs.shape != mask.shape:
        raise ValueError(f"teacher {tuple(teacher_logprobs.shape)}, student {tuple(student_logprobs.shape)} and "
                         f"mask {tuple(mask.shape)} log-probs must have one shape [B, T]")
    m = mask.to(torch.float32)
    dm = m if on_policy is None else m * on_policy.to(torch.float32)[:, None]
    adv = coef * (teacher_logprobs.float() - student_logprobs.float()) * dm
    if reward_coef:
        if rl_advantages is None:
            raise ValueError("reward_coef > 0 needs the RL advantages")
        a = rl_advantages.float()
        a = a[:, None] if a.dim() == 1 else a
        adv = adv + reward_coef * a * m
    return adv.detach()


def reverse_kl_stats(teacher_logprobs: Tensor, student_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """Means over the masked tokens: ``reverse_kl`` (``log pi_S - log pi_T``, the per-token estimate of
    ``KL(pi_S || pi_T)`` on the student's samples), ``teacher_logprob`` and ``student_logprob``."""
    m = mask.to(torch.float32)
    n = m.sum().clamp(min=1)
    t, s = teacher_logprobs.float(), student_logprobs.float()
    return {"reverse_kl": float(((s - t) * m).sum() / n), "teacher_logprob": float((t * m).sum() / n),
            "student_logprob": float((s * m).sum() / n)}
