"""DGPO's advantages (MathForge, Dai et al. 2026): DGAE and DQW by hand, their properties, bad options at load."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.dgpo import dgpo_advantages
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_by_hand():
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1])
    # DGAE: group 1 mean 1/4, |deviations| sum 1.5 -> 4 * (3/4, -1/4 x3) / 1.5001; group 2: 4 * (+-1/2) / 2.0001
    g1 = [4 * d / (1.5 + 1e-4) for d in (0.75, -0.25, -0.25, -0.25)]
    g2 = [4 * d / (2.0 + 1e-4) for d in (0.5, 0.5, -0.5, -0.5)]
    torch.testing.assert_close(dgpo_advantages(r, 4, question_weighting=False), torch.tensor(g1 + g2 + [0.0] * 4))
    # DQW over the two groups with a spread: 2 * softmax(-(1/4, 1/2) / 2); the all-correct group keeps weight 1
    w1 = 2 * math.exp(-0.125) / (math.exp(-0.125) + math.exp(-0.25))
    w2 = 2 - w1
    want = [w1 * x for x in g1] + [w2 * x for x in g2] + [0.0] * 4
    torch.testing.assert_close(dgpo_advantages(r, 4, temperature=2.0), torch.tensor(want))


@settings(max_examples=80, deadline=None)
@given(groups=st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=4, max_size=4), min_size=1,
                       max_size=6), temperature=st.floats(0.1, 10.0))
def test_every_question_moves_the_same_total_and_harder_ones_weigh_more(groups, temperature):
    r = torch.tensor([x for g in groups for x in g])
    plain = dgpo_advantages(r, 4, question_weighting=False, eps=0.0).view(-1, 4)
    weighted = dgpo_advantages(r, 4, temperature=temperature, eps=0.0).view(-1, 4)
    spread = [len(set(g)) > 1 for g in groups]
    for q, g in enumerate(groups):
        if spread[q]:
            assert float(plain[q].abs().sum()) == pytest.approx(4.0, rel=1e-5)  # DGAE: the same total per question
            assert float(plain[q].sum()) == pytest.approx(0.0, abs=1e-5)
        else:
            assert torch.all(weighted[q] == 0)
    totals = [float(weighted[q].abs().sum()) / 4 for q in range(len(groups)) if spread[q]]  # = the DQW weight
    if totals:
        assert sum(totals) / len(totals) == pytest.approx(1.0, rel=1e-5)  # the weights average 1
        means = [sum(g) / 4 for q, g in enumerate(groups) if spread[q]]
        for a in range(len(totals)):
            for b in range(len(totals)):
                if means[a] < means[b]:
                    assert totals[a] > totals[b]  # a harder question weighs more


@pytest.mark.parametrize("params", ["{temperature: 0}", "{temperature: -1}", "{eps: -0.1}", "{temp: 1}"])
def test_bad_options_are_refused_at_load(tmp_path, params):
    with pytest.raises(ConfigError, match="algorithm.advantage_params"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "algorithm.advantage=dgpo",
                                      f"algorithm.advantage_params={params}"])
