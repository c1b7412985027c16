"""The unlikeliness reward (He, Fried and Welleck 2025): rare correct samples keep more of their reward."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close
from rl_harness import LOOP_PROBLEMS, train_recorded
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict

PROBLEM = Problem("p", prompt="What is 1 + 1?", answer="2")


def _group(correct: list[int], logprobs: list[list[float]], masks: list[list[int]] | None = None) -> GroupScores:
    samples = [Sample("p", [1], [5] * len(lp), lp, f"s{i}", "stop", i, mask=None if masks is None else masks[i],
                      verdict=Verdict(float(c), None, "hand"), env_return=float(c))
               for i, (c, lp) in enumerate(zip(correct, logprobs))]
    return GroupScores.of(PROBLEM, samples, max_new_tokens=8)


def _rubric(beta: float) -> Rubric:
    return Rubric.from_specs([RewardFunctionSpec(kind="verifier"),
                              RewardFunctionSpec(kind="unlikeliness", weight=beta)])


def test_the_rank_penalty_by_hand():
    # mean log-probs: -1.0, -0.25, -3.0, -0.5  ->  ascending order: s2 (-3.0) rank 0, s0 rank 1, s3 rank 2, s1 rank 3
    g = _group([1, 1, 1, 0], [[-1.0, -1.0], [-0.5, 0.0], [-3.0], [-0.5, -0.5, -0.5]])
    r = _rubric(0.25).score(g)
    close(r.parts["unlikeliness"], [-1 / 4, -3 / 4, 0.0, 0.0])  # the incorrect sample is untouched
    # the paper's c_i * (1 - beta * rank_i / G) with beta = 0.25, G = 4
    close(r.reward, [1 - 0.25 * 1 / 4, 1 - 0.25 * 3 / 4, 1.0, 0.0])


def test_only_the_policys_tokens_count_in_the_likelihood():
    # s0's environment tokens (mask 0) carry log-prob 0 and must not make it look likely
    g = _group([1, 1], [[-2.0, 0.0, 0.0, 0.0], [-1.0]], masks=[[1, 0, 0, 0], [1]])
    r = _rubric(1.0).score(g)
    close(r.parts["unlikeliness"], [0.0, -1 / 2])  # s0 mean -2 (rank 0), s1 mean -1 (rank 1)


@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.tuples(st.booleans(), st.floats(-20, 0, allow_nan=False)), min_size=2, max_size=12),
       beta=st.floats(0.0, 1.0))
def test_a_rarer_correct_sample_never_earns_less_and_no_incorrect_one_earns_anything(data, beta):
    """Properties: the reward of a correct sample does not increase with its likelihood; incorrect ones get 0;
    every reward stays in [1 - beta, 1] for correct samples."""
    correct = [int(c) for c, _ in data]
    g = _group(correct, [[lp] for _, lp in data])
    reward = _rubric(beta).score(g).reward
    for i, (ci, lpi) in enumerate(data):
        if not ci:
            assert float(reward[i]) == 0.0
            continue
        assert 1 - beta - 1e-6 <= float(reward[i]) <= 1 + 1e-6
        for j, (cj, lpj) in enumerate(data):
            if cj and lpj < lpi:
                assert float(reward[j]) >= float(reward[i]) - 1e-6


def test_through_the_recipe_the_training_reward_is_the_papers_formula(tmp_path: Path):
    r = train_recorded(tmp_path, "reward.functions=[verifier, {kind: unlikeliness, weight: 0.5}]")
    assert all(len(ro.samples) == 2 * 4 for ro, _ in r.seen)  # 2 prompts x G = 4
    G = 4  # tiny_run_config's rollout.group_size
    penalised = 0
    for ro, scored in r.seen:
        want = []
        for start in range(0, len(ro.samples), G):
            group = ro.samples[start:start + G]
            means = [sum(lp for lp, m in zip(s.logprobs, s.mask or [1] * len(s.logprobs)) if m) /
                     max(1, sum(s.mask or [1] * len(s.logprobs))) for s in group]
            for i, s in enumerate(group):  # rank: how many in the group are less likely (ties: earlier first)
                rank = sum(1 for j, m in enumerate(means) if m < means[i] or (m == means[i] and j < i))
                c = float(ro.verdicts[start + i].correct)
                want.append(c * (1 - 0.5 * rank / G))
                penalised += int(c > 0 and rank > 0)
        close(scored.rewards, want)
    assert penalised > 0  # the term acted on some correct sample


def test_a_negative_weight_is_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="weight: must be >= 0"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}",
                                      "reward.functions=[verifier, {kind: unlikeliness, weight: -0.5}]"])
