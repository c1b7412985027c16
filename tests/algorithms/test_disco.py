"""DisCO's discriminative weights, by hand and through the recipe."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import close
from rl_harness import train_recorded
from rlvr.algorithms.disco import disco_advantages


def test_disco_b_and_disco_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # group 2 has no wrong answer
    s = torch.tensor([-0.5, -1.0, -3.0, -0.2, -1.0, -1.0, -1.0, -1.0])
    close(disco_advantages(r, 4, seq_logprob=s), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    # tau = 1: the wrong answers weighted by softmax(s / tau): exp(-1) / (exp(-1) + exp(-3)) for the likelier
    w = math.exp(-1) / (math.exp(-1) + math.exp(-3))
    close(disco_advantages(r, 4, seq_logprob=s, tau=1.0), [0.5, -w, -(1 - w), 0.5, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="tau"):
        disco_advantages(r, 4, seq_logprob=s, tau=-1)


def test_through_the_recipe_the_scores_are_the_sampler_log_probs(tmp_path):
    r = train_recorded(tmp_path, "algorithm.advantage=disco", "algorithm.advantage_params={tau: 0.5}",
                       "algorithm.loss_agg=seq_mean_token_mean")
    for ro, scored in r.seen:
        s = torch.tensor([sum(x.logprobs) / max(1, len(x.logprobs)) for x in ro.samples])
        want = disco_advantages(torch.tensor([float(v.correct) for v in ro.verdicts]), 4, seq_logprob=s, tau=0.5)
        close(scored.advantages, want, tol=1e-4)
    assert any(float(sc.advantages.abs().sum()) > 0 for _, sc in r.seen)  # some group had both kinds
