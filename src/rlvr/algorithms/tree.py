"""Advantages on a rollout tree: each segment credited with its node's Monte-Carlo value against its parent's."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["tree_advantages"]


def tree_advantages(rewards: Tensor, group_size: int, *, mask: Tensor, forks: Tensor) -> Tensor:
    """Per-token advantages [N, T] of groups whose samples form a two-level tree (``rollout.branches``).

    Tree-search RL (TreeRL, Hou et al. 2025, arXiv 2506.11902; TEMPO's prefix-tree temporal differences) values
    each node of the rollout tree by Monte Carlo, the mean reward of the leaves below it, and credits a segment
    with the value it adds over its parent rather than one outcome for the whole sequence.  Here the tree of a
    group is: the root (the prompt), a fork node for each ordinary sample that was branched (its tokens before
    the fork, shared by the sample and its branches), and the leaves.  With ``V(root)`` the group's mean reward
    and ``V(fork)`` the mean reward of the fork's leaves (the source and its branches)::

        tokens before the fork:   A = V(fork) - V(root)      (the shared prefix: what reaching it is worth)
        tokens after it:          A = r_i - V(fork)          (what this continuation adds)
        a sample never branched:  A = r_i - V(root)          (one segment, Dr. GRPO's mean baseline)

    Along any path the segments' advantages telescope to ``r_i - V(root)``.  ``forks`` is [N, 2]: the group-local
    index of the sample a branch was cut from (``-1`` for an ordinary sample) and the completion token it was cut
    at; ``mask`` [N, T] marks each row's completion tokens (the ``t``-th of them is the row's ``t``-th marked
    column).
    """
    n = rewards.numel()
    if n % group_size:
        raise ValueError(f"{n} rewards are not groups of {group_size}")
    r = rewards.float()
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for g0 in range(0, n, group_size):
        rows = range(g0, g0 + group_size)
        root = float(r[g0:g0 + group_size].mean())
        leaves: dict[int, list[int]] = {}  # source (global row) -> its branches
        fork_at: dict[int, int] = {}
        for i in rows:
            src = int(forks[i, 0])
            if src >= 0:
                leaves.setdefault(g0 + src, []).append(i)
                fork_at.setdefault(g0 + src, int(forks[i, 1]))
        for i in rows:
            cols = mask[i].nonzero().flatten()
            src = int(forks[i, 0])
            node = g0 + src if src >= 0 else (i if i in leaves else None)
            if node is None:
                out[i, cols] = float(r[i]) - root
                continue
            members = [node] + leaves[node]
            v = float(r[members].mean())
            t = fork_at[node] if src < 0 else int(forks[i, 1])
            out[i, cols[:t]] = v - root
            out[i, cols[t:]] = float(r[i]) - v
    return out
