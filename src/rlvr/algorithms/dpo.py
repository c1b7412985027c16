"""Online DPO on the groups of an RLVR step, as per-sequence weights of the policy gradient."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["dpo_pairs", "online_dpo_advantages"]


def dpo_pairs(rewards: Tensor, group_size: int) -> list[tuple[int, int]]:
    """``(chosen, rejected)`` row pairs of a batch of groups: in each group whose rewards differ, every sample with
    the group's highest reward against every sample with its lowest."""
    pairs = []
    r = rewards.float().view(-1, group_size)
    for g in range(r.shape[0]):
        hi, lo = r[g].max(), r[g].min()
        if hi > lo:
            w = (r[g] == hi).nonzero().flatten().tolist()
            l_ = (r[g] == lo).nonzero().flatten().tolist()
            pairs += [(g * group_size + i, g * group_size + j) for i in w for j in l_]
    return pairs


def online_dpo_advantages(rewards: Tensor, group_size: int, *, logratio: Tensor, mask: Tensor,
                          beta: float = 0.1) -> Tensor:
    """Per-sequence weights [N] whose policy gradient is the DPO loss's gradient over the step's pairs.

    DPO (Rafailov et al. 2023, Eq. 7): ``L = -1/P sum_pairs log sigmoid(z)``, ``z = beta [(log pi(y_w) - log
    pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))]``, on pairs drawn online from the policy's own samples and
    ranked by the verifier (online DPO: Guo et al. 2024, "Direct Language Model Alignment from Online AI
    Feedback"; here the feedback is the verifiable reward, :func:`dpo_pairs`).  Its gradient is
    ``-1/P sum_pairs beta (1 - sigmoid(z)) (grad log pi(y_w) - grad log pi(y_l))``, so with
    ``A_i = B/P sum_{pairs with i chosen} beta (1 - sigmoid(z)) - B/P sum_{pairs with i rejected} beta (1 -
    sigmoid(z))`` the policy gradient ``-1/B sum_i A_i sum_t grad log pi(y_it)`` (``loss_agg=seq_mean_token_sum``
    at ratio 1) is exactly DPO's.  ``logratio`` is ``log pi_old - log pi_ref`` per completion token ([N, T], the
    policy before this step's update), summed over ``mask``.  Rows in no pair get 0.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    n = rewards.numel()
    seq = (logratio.float() * mask.float()).sum(-1)
    pairs = dpo_pairs(rewards, group_size)
    adv = torch.zeros(n)
    if not pairs:
        return adv
    scale = n / len(pairs)
    for w, l_ in pairs:
        z = beta * (seq[w] - seq[l_])
        g = beta * (1 - torch.sigmoid(z)) * scale
        adv[w] += g
        adv[l_] -= g
    return adv
