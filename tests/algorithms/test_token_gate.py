"""The high-entropy token mask (Beyond the 80/20 Rule) by hand, and its refusals."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms.token_gate import high_entropy_token_mask
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_by_hand():
    e = torch.tensor([[0.5, 2.0, 1.0, 0.0], [3.0, 0.1, 0.2, 9.0]])
    m = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])  # the 9.0 is padding: never kept
    keep, threshold = high_entropy_token_mask(e, m, 0.5)  # 6 tokens -> the 3 of highest entropy: 3.0, 2.0, 1.0
    assert keep.tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]] and threshold == 1.0
    keep, _ = high_entropy_token_mask(e, m, 0.2)  # ceil(1.2) = 2
    assert keep.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    keep, threshold = high_entropy_token_mask(e, m, 1.0)
    assert torch.equal(keep, m.float()) and threshold == pytest.approx(0.1)
    keep, threshold = high_entropy_token_mask(e, torch.zeros_like(m), 0.5)
    assert keep.sum() == 0 and threshold == math.inf


def test_ties_keep_the_earlier_token():
    keep, _ = high_entropy_token_mask(torch.ones(1, 4), torch.ones(1, 4), 0.5)
    assert keep.tolist() == [[1, 1, 0, 0]]


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2"])
def test_a_fraction_outside_0_1_is_refused_at_load(tmp_path, value):
    with pytest.raises(ConfigError, match="algorithm.entropy_token_fraction"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", f"algorithm.entropy_token_fraction={value}"])
