"""Turn-level credit for multi-turn episodes: per-turn returns and baselines, spread over each turn's tokens.

An episode of K_i policy turns has turn rewards ``r_{i,0..K_i-1}`` (the environment's, ``Sample.info
["turn_rewards"]``; what the reward stage adds to the environment's return, e.g. a rubric's format term, is
counted at the last turn, so the turn rewards sum to the sample's training reward).  Its discounted
return from turn k is ::

    G_{i,k} = sum_{j >= k} gamma^(j-k) r_{i,j}

and the policy tokens of turn k get advantage ``A_{i,k}``.  Two ways to form it are registered in
:data:`TURN_CREDIT` (``algorithm.turn_credit``):

* ``loo`` - ``A_{i,k} = G_{i,k} - b_{i,k}`` with the **leave-one-out per-turn baseline** of
  :func:`loo_turn_baseline`, unbiased when the episodes of a group have different numbers of turns;
  with one turn per episode it is RLOO exactly.
* ``gigpo`` - GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
  Eq. 5-8): the episode-level group advantage ``A^E_i = (R_i - mean(R)) / std(R)`` plus
  ``step_weight`` times a step-level one, ``A^S_{i,k} = (G_{i,k} - mean) / std`` over the **step group**
  of turns in the same group that start from the same environment state (an anchor state: here the
  environment's observation tokens just before the turn; every first turn starts from the prompt).
"""

from __future__ import annotations

from typing import Annotated, Callable, Hashable, Sequence

import torch
from pydantic import Field, NonNegativeFloat
from torch import Tensor

from rlvr.registry import Registry
from rlvr.types import Sample

__all__ = ["TURN_CREDIT", "turn_counts", "turn_rewards", "discounted_turn_returns", "loo_turn_baseline", "loo_turn_advantages",
           "gigpo_turn_advantages", "anchor_keys", "turn_of_token", "spread_over_turns", "turn_credit_estimator"]


# --------------------------------------------------------------------------- the episodes' turns
def turn_counts(samples: Sequence[Sample]) -> list[int]:
    """Each episode's policy turns (its ``turn_ends``; a sample without turn facts is one turn)."""
    return [max(len(s.info.get("turn_ends") or [0]), 1) for s in samples]


def turn_rewards(samples: Sequence[Sample], rewards: Tensor) -> tuple[Tensor, Tensor]:
    """``(r [B, K], alive [B, K] bool)``: each episode's per-turn rewards, K the most policy turns in the batch.

    Turn k's reward is the environment's reward after policy turn k (a reward the runner's close adds after the
    last turn counts at the last turn); the sample's training reward minus the environment's return is added at
    the last turn, so ``r.sum(1) == rewards``.  A sample without turn facts is one turn with its reward.
    """
    turns = turn_counts(samples)
    B, K = len(samples), max(turns, default=1)
    r = torch.zeros(B, K, dtype=torch.float64)
    alive = torch.zeros(B, K, dtype=torch.bool)
    for i, (s, k) in enumerate(zip(samples, turns)):
        env = [float(x) for x in (s.info.get("turn_rewards") or [])]
        per = env[:k] + [0.0] * max(0, k - len(env))
        per[-1] += sum(env[k:])  # the close reward after the last turn
        per[-1] += float(rewards[i]) - sum(per)  # what the reward stage adds beyond the environment's return
        r[i, :k] = torch.tensor(per, dtype=torch.float64)
        alive[i, :k] = True
    return r, alive


def discounted_turn_returns(r: Tensor, alive: Tensor, gamma: float = 1.0) -> Tensor:
    """``G [B, K]``: ``G_k = r_k + gamma * G_{k+1}`` over each episode's own turns (0 past its last)."""
    G = torch.zeros_like(r)
    nxt = torch.zeros(r.shape[0], dtype=r.dtype)
    for k in range(r.shape[1] - 1, -1, -1):
        nxt = torch.where(alive[:, k], r[:, k] + gamma * nxt, torch.zeros_like(nxt))
        G[:, k] = nxt
    return G


def loo_turn_baseline(G: Tensor, alive: Tensor, group_size: int) -> Tensor:
    """The leave-one-out per-turn baseline ``b [B, K]``: for episode i at turn k, the mean of ``G_{j,k}`` over the
    *other* episodes j of its group that reached turn k (0 when none did).

    **Why it is unbiased when episodes have different numbers of turns.**  The policy-gradient estimator
    ``sum_k grad log pi(a_{i,k} | s_{i,k}) (G_{i,k} - b_{i,k})`` is unbiased iff
    ``E[grad log pi(a_{i,k} | s_{i,k}) b_{i,k}] = 0`` for every k.  That holds when ``b_{i,k}`` is, given
    ``s_{i,k}``, independent of ``a_{i,k}``: then ``E[grad log pi * b | s] = b E[grad log pi | s] = 0``.  The
    episodes of a group are sampled independently from the same prompt, so anything computed from the *other*
    episodes (which of them reached turn k, and their returns there) is independent of episode i's actions;
    whether episode i reached turn k is part of ``s_{i,k}``.  So this baseline adds no bias, whatever the
    horizons.  The group mean that *includes* episode i (GRPO's, per turn) does not: its share
    ``G_{i,k} / n_k`` correlates with ``a_{i,k}``, which shrinks turn k's gradient by ``1 - 1/n_k``, and
    ``n_k`` (the episodes alive at turn k) changes from turn to turn when horizons differ, so later turns are
    shrunk more than earlier ones: a biased direction, not only a scale.  Dividing by a per-turn std estimated
    from the same episodes biases it too, so this baseline is not normalised.
    ``tests/credit/test_turns.py`` checks both claims by simulation on a toy MDP with variable horizons.
    """
    B, K = G.shape
    if B % group_size:
        raise ValueError(f"batch of {B} is not a whole number of groups of {group_size}")
    g = G.reshape(-1, group_size, K)
    a = alive.reshape(-1, group_size, K).to(G.dtype)
    total = (g * a).sum(1, keepdim=True)
    n = a.sum(1, keepdim=True)
    others = n - a  # episodes of the group other than i that reached turn k
    b = torch.where(others > 0, (total - g * a) / others.clamp_min(1), torch.zeros_like(g))
    return (b * a).reshape(B, K)


def loo_turn_advantages(G: Tensor, alive: Tensor, group_size: int) -> Tensor:
    """``A [B, K] = G - b`` with :func:`loo_turn_baseline` (0 past an episode's last turn)."""
    return (G - loo_turn_baseline(G, alive, group_size)) * alive.to(G.dtype)


def gigpo_turn_advantages(R: Tensor, G: Tensor, alive: Tensor, keys: Sequence[Sequence[Hashable]], group_size: int,
                          *, step_weight: float = 1.0, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GiGPO's ``A [B, K] = A^E_i + step_weight * A^S_{i,k}`` (Feng et al. 2025, Eq. 5-8).

    ``A^E``: the episode returns ``R [B]`` normalised within each group of ``group_size``; ``A^S``: each turn's
    discounted return ``G_{i,k}`` normalised within its step group, the turns of the same group whose anchor
    state ``keys[i][k]`` is equal (a singleton step group contributes 0).  ``scale_by_std`` False keeps the mean
    subtraction only (GiGPO's "mean" normalisation, as Dr. GRPO).
    """
    B, K = G.shape
    R = R.to(G.dtype)
    rg = R.reshape(-1, group_size)
    ep = rg - rg.mean(1, keepdim=True)
    if scale_by_std:
        ep = ep / (rg.std(1, keepdim=True, unbiased=True).nan_to_num(0.0) + eps)
    A = ep.reshape(B, 1).expand(B, K).clone()
    step = torch.zeros_like(G)
    for g0 in range(0, B, group_size):
        groups: dict[Hashable, list[tuple[int, int]]] = {}
        for i in range(g0, g0 + group_size):
            for k in range(K):
                if alive[i, k]:
                    groups.setdefault(keys[i][k], []).append((i, k))
        for members in groups.values():
            if len(members) < 2:
                continue
            vals = torch.stack([G[i, k] for i, k in members])
            dev = vals - vals.mean()
            if scale_by_std:
                dev = dev / (vals.std(unbiased=True) + eps)
            for (i, k), d in zip(members, dev):
                step[i, k] = d
    return (A + step_weight * step) * alive.to(G.dtype)


def anchor_keys(samples: Sequence[Sample]) -> list[list[Hashable]]:
    """Each episode's anchor state per policy turn: ``()`` for the first (the prompt), then the environment's
    tokens between the previous policy turn and this one (the observation it answered)."""
    out = []
    for s in samples:
        ends = list(s.info.get("turn_ends") or [len(s.completion_ids)])
        mask = s.mask or [1] * len(s.completion_ids)
        keys: list[Hashable] = [("turn", 0)]
        for k in range(1, len(ends)):
            j = ends[k - 1]
            obs = []
            while j < len(mask) and not mask[j]:
                obs.append(s.completion_ids[j])
                j += 1
            keys.append(tuple(obs))
        out.append(keys)
    return out


def turn_of_token(samples: Sequence[Sample], start: int, width: int) -> Tensor:
    """``[B, width]`` long: the policy turn each batch column belongs to (completions start at column ``start``;
    column ``start + t`` is in turn k when ``turn_ends[k-1] <= t < turn_ends[k]``), -1 outside completions."""
    out = torch.full((len(samples), width), -1, dtype=torch.long)
    for i, s in enumerate(samples):
        c = len(s.completion_ids)
        if not c:
            continue
        ends = torch.tensor(list(s.info.get("turn_ends") or [c]), dtype=torch.long)
        t = torch.arange(c)
        k = torch.searchsorted(ends, t, right=True).clamp_max(len(ends) - 1)
        out[i, start:start + c] = k
    return out


def spread_over_turns(A: Tensor, turn_index: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]``: each counted token gets its turn's advantage ``A[i, turn]``; 0 where ``mask`` is 0."""
    idx = turn_index.clamp_min(0)
    out = torch.gather(A.to(torch.float32), 1, idx)
    return out * mask.to(torch.float32) * (turn_index >= 0).to(torch.float32)


# --------------------------------------------------------------------------- registry
Discount = Annotated[float, Field(ge=0, le=1)]
"""A discount per turn, in [0, 1]."""

TURN_CREDIT: Registry[Callable[..., Tensor]] = Registry("turn credit", skip=3)
"""Turn-level credit by name (``algorithm.turn_credit``): ``fn(samples, rewards [B], group_size, **options) ->
A [B, K]`` (K: the most turns in the batch)."""


@TURN_CREDIT.register("loo", tags={"estimator:rloo"})
def loo_credit(samples: Sequence[Sample], rewards: Tensor, group_size: int, *, gamma: Discount = 1.0) -> Tensor:
    """Per-turn discounted returns minus the leave-one-out per-turn baseline (unbiased with variable numbers of
    turns; RLOO when every episode has one turn)."""
    r, alive = turn_rewards(samples, rewards)
    return loo_turn_advantages(discounted_turn_returns(r, alive, gamma), alive, group_size)


@TURN_CREDIT.register("gigpo", tags={"estimator:grpo"})
def gigpo_credit(samples: Sequence[Sample], rewards: Tensor, group_size: int, *, gamma: Discount = 0.95,
                 step_weight: NonNegativeFloat = 1.0, scale_by_std: bool = True) -> Tensor:
    """GiGPO: the episode's group-normalised return plus ``step_weight`` times its turn's return normalised over
    the turns of the group that start from the same environment state (gamma 0.95 and weight 1 as in the paper)."""
    r, alive = turn_rewards(samples, rewards)
    G = discounted_turn_returns(r, alive, gamma)
    return gigpo_turn_advantages(rewards.to(G.dtype), G, alive, anchor_keys(samples), group_size,
                                 step_weight=step_weight, scale_by_std=scale_by_std)


def turn_credit_estimator(name: str) -> str | None:
    """The outcome estimator a turn credit extends (its tag ``estimator:<name>``): the run must name it."""
    tags = [t for t in TURN_CREDIT.entry(name).tags if t.startswith("estimator:")]
    return tags[0].split(":", 1)[1] if tags else None


