"""UCAS (Xie et al. 2025): response-level self-confidence modulation and a token-level logit penalty, by hand and
through the recipe."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import close
from rl_harness import train_recorded
from rlvr.algorithms import get_advantage_estimator
from rlvr.algorithms.ucas import minmax_over_mask, ucas_advantages
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_two_samples_by_hand():
    # one group of 2: rewards 1, 0 -> GRPO advantages +-(0.5 / std), std = sqrt(0.5) (sample std of [1, 0])
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1., 1.], [1., 0.]])
    certainty = torch.tensor([[1.0, 2.0], [0.5, 9.0]])  # sums over the mask: 3.0 and 0.5 (the 9.0 is padding)
    logits = torch.tensor([[2.0, 4.0], [6.0, 100.0]])    # min-max over the mask: 2 -> 0, 4 -> 0.5, 6 -> 1
    a = 0.5 / math.sqrt(0.5)
    z = 1.25 / math.sqrt(3.125)  # certainty sums 3.0, 0.5: mean 1.75, sample std sqrt(3.125)
    want_pos = a * math.exp(-0.25 * z)           # sample 0: A > 0, confident: reinforced less
    want_neg = -a * math.exp(0.35 * -z)          # sample 1: A < 0, unconfident (z < 0): pushed down less
    got = ucas_advantages(rewards, 2, certainty=certainty, token_logits=logits, mask=mask, eps=0.0)
    # stage 2: minus 0.05 x the normalised logit; sample 0 stays >= 0 (floored), sample 1 goes further down
    close(got, [[max(want_pos - 0.05 * 0.0, 0), max(want_pos - 0.05 * 0.5, 0)],
                [want_neg - 0.05 * 1.0, 0.0]], tol=1e-6)


def test_a_positive_trajectory_never_turns_negative_and_equal_logits_are_neutral():
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.ones(2, 3)
    got = ucas_advantages(rewards, 2, certainty=torch.zeros(2, 3), token_logits=torch.tensor(
        [[0.0, 0.0, 1000.0], [0.0, 0.0, 0.0]]), mask=mask, logit_coef=10.0)
    assert (got[0] >= 0).all() and got[0, 2] == 0.0  # floored, not flipped
    close(minmax_over_mask(torch.full((2, 3), 7.0), mask), torch.full((2, 3), 0.5))


def test_through_the_registry_and_the_recipe(tmp_path, monkeypatch):
    """The recipe's advantages are UCAS's formula on the certainty and logits its passes computed."""
    import rlvr.recipes.rl as rl

    fn = get_advantage_estimator("ucas", beta_pos=0.5)
    assert fn(torch.tensor([1.0, 0.0]), 2, certainty=torch.zeros(2, 1), token_logits=torch.zeros(2, 1),
              mask=torch.ones(2, 1)).shape == (2, 1)
    seen: dict[str, list] = {"certainty": [], "logits": []}
    real = rl.certainty_and_logit_pass

    def spy(*a, **kw):
        c, lg = real(*a, **kw)
        seen["certainty"].append(c)
        seen["logits"].append(lg)
        return c, lg

    monkeypatch.setattr(rl, "certainty_and_logit_pass", spy)
    r = train_recorded(tmp_path, "algorithm.advantage=ucas", "algorithm.advantage_params={beta_neg: 0.5}")
    assert len(seen["certainty"]) == len(seen["logits"]) == len(r.seen) == 2
    for (ro, scored), c, lg in zip(r.seen, seen["certainty"], seen["logits"]):
        m = scored.batch.completion_mask
        assert float((lg * m).abs().sum()) > 0 and float((c * m).abs().sum()) > 0  # real passes reached it
        want = ucas_advantages(scored.rewards, 4, certainty=c, token_logits=lg, mask=m, beta_neg=0.5)
        close(scored.advantages, want)


def test_bad_options_are_refused_at_load():
    with pytest.raises(ConfigError, match="algorithm.advantage_params"):
        load_config(RunConfig, None, ["algorithm.advantage=ucas", "algorithm.advantage_params={beta: 1}"])
