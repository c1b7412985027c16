"""Rollout-tree credit: a fork's prefix gets its Monte-Carlo value against the group's, each continuation its reward
against the fork's."""

from __future__ import annotations

import pytest
import torch

from conftest import close
from rl_harness import train_recorded
from rlvr.algorithms.tree import tree_advantages
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig


def test_a_group_by_hand():
    # G = 4: samples 0 and 1 ordinary, 2 branched from 0 at token 1, 3 branched from 1 at token 2
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.float32)
    forks = torch.tensor([[-1, 0], [-1, 0], [0, 1], [1, 2]])
    a = tree_advantages(r, 4, mask=mask, forks=forks)
    root = 0.25
    v0 = 0.5   # fork of sample 0: leaves 0 (1) and 2 (0)
    v1 = 0.0   # fork of sample 1: leaves 1 (0) and 3 (0)
    close(a, [[0, v0 - root, 1 - v0, 1 - v0],     # sample 0: prefix of 1 token, then its own continuation
              [0, v1 - root, v1 - root, 0 - v1],  # sample 1: prefix of 2 tokens
              [0, v0 - root, 0 - v0, 0],          # branch of 0 (2 tokens, padding after)
              [0, v1 - root, v1 - root, 0 - v1]])
    # along every path the segments telescope to r_i - V(root) (first token + last token here)
    for i, (first, last) in enumerate([(1, 3), (2, 3), (1, 2), (2, 3)]):
        assert float(a[i, first] + a[i, last]) == pytest.approx(float(r[i]) - root)
    plain = tree_advantages(r, 4, mask=mask, forks=torch.tensor([[-1, 0]] * 4))
    close(plain, (r - root)[:, None] * mask)  # no branches: Dr. GRPO's mean baseline on every token


def test_through_the_recipe_the_advantages_follow_the_branches(tmp_path):
    r = train_recorded(tmp_path, "rollout.branches=1", "algorithm.advantage=tree", "algorithm.skip_zero_advantage=false")
    for ro, scored in r.seen:
        forks = torch.tensor([[s.info.get("branch_of", -1), s.info.get("branch_at", 0)] for s in ro.samples])
        want = tree_advantages(scored.rewards, 4, mask=scored.batch.completion_mask, forks=forks)
        close(scored.advantages, want)
        assert (forks[:, 0] >= 0).sum() == 2  # one branch per group of 4, two groups


def test_tree_credit_without_branches_is_refused():
    with pytest.raises(ConfigError, match="set rollout.branches > 0"):
        load_config(RunConfig, None, ["algorithm.advantage=tree"])
