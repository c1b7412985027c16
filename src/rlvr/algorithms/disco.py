"""DisCO: discriminative objectives instead of group-relative advantages."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["disco_advantages"]


def disco_advantages(rewards: Tensor, group_size: int, *, seq_logprob: Tensor, tau: float = 0.0,
                     threshold: float = 0.5) -> Tensor:
    """Per-sequence weights [N] of DisCO's discriminative objective (Li et al. 2025, "DisCO: Reinforcing Large
    Reasoning Models with Discriminative Constrained Optimization", arXiv 2505.12366).

    For each prompt DisCO raises the score of its correct answers and lowers that of its wrong ones::

        J = E_{o+}[s(o+)] - E_{o-}[s(o-)]                          (DisCO-b)
        J = E_{o+}[s(o+)] - tau log E_{o-}[exp(s(o-) / tau)]       (DisCO, tau > 0: the hardest negatives first)

    with ``s`` the policy's (length-normalised) log-likelihood of the answer.  Its gradient is the policy gradient
    with weights ``A_i = 1 / n+`` on each correct sample and ``A_j = -1 / n-`` (DisCO-b) or ``A_j = -softmax_j(s_j /
    tau)`` over the wrong ones (DisCO) on each wrong sample, ``s_j`` here ``seq_logprob`` (the sampler's mean token
    log-prob, the policy's at ratio 1): no division by the reward's standard deviation, so no question-level
    difficulty bias (the paper's point); a group without both kinds gets 0.  Use with
    ``loss_agg=seq_mean_token_mean`` (``s`` length-normalised).  DisCO's constraint (a squared hinge on the KL to
    the old policy) is not part of this estimator; ``algorithm.kl_coef`` adds a KL penalty instead.
    ``threshold``: rewards above it are correct.
    """
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    r = rewards.float().view(-1, group_size)
    s = seq_logprob.float().view(-1, group_size)
    pos = r > threshold
    out = torch.zeros_like(r)
    for g in range(r.shape[0]):
        p, n = pos[g], ~pos[g]
        if not p.any() or not n.any():
            continue
        out[g, p] = 1.0 / int(p.sum())
        if tau > 0:
            out[g, n] = -torch.softmax(s[g, n] / tau, dim=0)
        else:
            out[g, n] = -1.0 / int(n.sum())
    return out.view(-1)
