"""The ``unlikeliness`` reward function: up-weighting rare correct solutions (Rewarding the Unlikely)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.rewards.rubric import reward_function
from rlvr.types import Sample

__all__ = ["unlikeliness_reward", "mean_sampler_logprob", "likelihood_ranks"]


def mean_sampler_logprob(sample: Sample) -> float:
    """The mean of the sampler's log-probs over the policy's own tokens (the mask; all tokens without one)."""
    lps = sample.logprobs
    mask = sample.mask if sample.mask is not None else [1] * len(lps)
    picked = [lp for lp, m in zip(lps, mask) if m]
    return sum(picked) / len(picked) if picked else 0.0


def likelihood_ranks(mean_logprobs: Tensor) -> Tensor:
    """[G] ranks in ``0 .. G-1`` by ascending mean log-prob: the least likely sample is 0, the most likely G-1.

    Ties keep group order (a stable sort), so the ranks are a permutation whatever the values."""
    order = torch.sort(mean_logprobs, stable=True).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(order.numel())
    return ranks


@reward_function("unlikeliness", scope="group", tags={"bounded"})
def unlikeliness_reward() -> Callable[..., Tensor]:
    """Rewarding the Unlikely's rank penalty: ``-c_i * rank_i / G``; the weight is the paper's ``beta_rank``.

    He, Fried and Welleck 2025 ("Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening",
    arXiv 2506.02355): GRPO's rank bias reinforces the correct samples the policy already finds likely; the
    unlikeliness reward scales a correct sample's reward by ``1 - beta_rank * rank_i / G``, where ``rank_i`` ranks
    the group's G samples by their mean token log-prob under the sampling policy, least likely first
    (``rank = 0``) — the ranking of the authors' release (``argsort(argsort(mean log-prob))``, divided by G).

    As a rubric term beside a binary ``verifier`` function of weight 1, this function returns
    ``-c_i * rank_i / G`` (``c_i``: 1 when correct) and its weight is ``beta_rank``, so the sum is the paper's
    ``c_i * (1 - beta_rank * rank_i / G)``: the rarest correct sample keeps its full reward, the most likely one
    loses ``beta_rank * (G - 1) / G``, and incorrect samples are untouched.  The log-probs are the sampler's
    (``Sample.logprobs`` on the policy's tokens), i.e. the paper's ``pi_old``.
    """

    def score(samples: Sequence[Sample], correct: Tensor) -> Tensor:
        G = len(samples)
        mean_lp = torch.tensor([mean_sampler_logprob(s) for s in samples], dtype=torch.float64)
        ranks = likelihood_ranks(mean_lp).to(torch.float32)
        return -(correct > 0).to(torch.float32) * ranks / G

    return score
