"""The one reward pipeline (rlvr.rewards.pipeline): each step by hand, their order, and that a shaping term or a
reward source registered from outside the package (here, this test module) trains with no edit elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import close, make_model, make_tokenizer, tiny_run_config
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.noisy import flip_rewards
from rlvr.rewards.pipeline import GroupScores, RewardPipeline, source_stage
from rlvr.rewards.settings import RewardConfig
from rlvr.rewards.shaping import REWARD_SHAPING
from rlvr.rewards.sources import REWARD_SOURCES, GroupInput, SourceResult
from rlvr.types import Problem, Sample, Verdict

PROBLEM = Problem("p", prompt="What is 1 + 1?", answer="2")


def _group(correct: list[int], lengths: list[int], returns: list[float] | None = None, texts=None) -> list[Sample]:
    """Scored samples: a verdict per sample, its environment return (default: the verdict) and its length."""
    returns = [float(c) for c in correct] if returns is None else returns
    texts = texts or [f"answer {i}" for i in range(len(correct))]
    return [Sample("p", [1], [5] * n, [0.0] * n, t, "stop", i, verdict=Verdict(float(c), str(c), "hand"), env_return=r)
            for i, (c, n, r, t) in enumerate(zip(correct, lengths, returns, texts))]


def _pipeline(**reward) -> RewardPipeline:
    return RewardPipeline(RewardConfig(**reward), max_new_tokens=6)


def test_scaling_then_shaping_in_the_order_listed_by_hand():
    # verdicts 1, 0, 1 with lengths 3, 5, 6 (budget 6)
    samples = _group([1, 0, 1], [3, 5, 6])
    noise = torch.Generator().manual_seed(0)
    # scaling: wrong + (correct - wrong) * return = -1 + 3 * [1, 0, 1] = [2, -1, 2]
    g = _pipeline(correct_reward=2.0, wrong_reward=-1.0).score_group(PROBLEM, samples, noise=noise)
    close(g.reward, [2.0, -1.0, 2.0])
    assert g.filter_signal.tolist() == [1.0, 0.0, 1.0] and not g.sourced
    # + overlong (cache 2: no penalty up to 4 tokens, then (4 - L) / 2): [0, -0.5, -1]
    # + LASER (target 3, alpha 0.5): a bonus 0.5 for a correct answer of at most 3 tokens: [0.5, 0, 0]
    g = _pipeline(correct_reward=2.0, wrong_reward=-1.0,
                  shaping={"overlong": {"cache_len": 2}, "laser": {"target_length": 3, "alpha": 0.5}}
                  ).score_group(PROBLEM, samples, noise=noise)
    close(g.reward, [2.5, -1.5, 1.0])
    assert g.filter_signal.tolist() == [1.0, 0.0, 1.0]  # dynamic sampling counts verdicts, not shaped rewards
    # a multi-turn return (0.5: a second-attempt success) is scaled, not the verdict
    g = _pipeline().score_group(PROBLEM, _group([1, 0], [2, 2], returns=[0.5, 0.0]), noise=noise)
    close(g.reward, [0.5, 0.0])


def test_noise_flips_the_verdict_before_it_is_scaled_and_the_filter_sees_the_true_one():
    samples = _group([1, 1, 0, 0, 1, 0, 1, 0], [2] * 8)
    g = _pipeline(flip_false_positive=0.4, flip_false_negative=0.4, correct_reward=3.0).score_group(
        PROBLEM, samples, noise=torch.Generator().manual_seed(7))
    flipped = flip_rewards(torch.tensor([1.0, 1, 0, 0, 1, 0, 1, 0]), 0.4, 0.4, torch.Generator().manual_seed(7))
    assert not torch.equal(flipped, torch.tensor([1.0, 1, 0, 0, 1, 0, 1, 0]))  # the seed flips something
    close(g.reward, 3.0 * flipped)
    assert torch.equal(g.correct, flipped) and g.pass_signal.tolist() == [1.0, 1, 0, 0, 1, 0, 1, 0]


def test_a_collected_source_replaces_the_verdict_and_is_shaped_like_it():
    samples = _group([1, 0, 0], [3, 5, 6], texts=["a", "b", "c"])
    samples[1].verdict = Verdict(0.0, None, "no answer")
    g = _pipeline(source="format_only", shaping={"overlong": {"cache_len": 2}}).score_group(
        PROBLEM, samples, noise=torch.Generator())
    close(g.reward, [1.0 + 0.0, 0.0 - 0.5, 1.0 - 1.0])  # answer extracted or not, then the overlong penalty
    assert g.sourced and torch.equal(g.filter_signal, g.reward)
    close(g.pass_signal, [1.0, 0.0, 1.0])  # the difficulty filter sees the source's reward before shaping
    assert g.metrics == {"reward/format_share": pytest.approx(2 / 3)}


def test_a_policy_source_is_shaped_like_a_collected_one():
    samples = _group([1, 0], [3, 5]) + _group([0, 0], [6, 2])
    sc = torch.tensor([[1.0, 3.0, 0.0], [2.0, 2.0, 2.0], [4.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])

    def inputs(needs):
        assert needs == {"token_self_certainty", "mask"}
        return [GroupInput(["x", "y"], token_self_certainty=sc[i:i + 2], mask=mask[i:i + 2]) for i in (0, 2)]

    pipe = _pipeline(source="self_certainty")
    assert pipe.stage == "policy"
    rewards, keep, metrics = pipe.policy_source(samples, 2, inputs)
    close(rewards, [2.0, 2.0, 4.0, 1.0])  # the mean self-certainty over each completion's tokens
    shaped, _, _ = _pipeline(source="self_certainty", shaping={"overlong": {"cache_len": 2}}).policy_source(
        samples, 2, inputs)
    close(shaped, [2.0 + 0.0, 2.0 - 0.5, 4.0 - 1.0, 1.0 + 0.0])
    assert keep.all() and "reward/self_certainty_mean" in metrics


def test_sources_say_by_their_tag_when_the_loop_computes_them():
    assert {n: source_stage(n) for n in REWARD_SOURCES.names()} == {
        "verifier": "collect", "majority_vote": "collect", "random": "collect", "format_only": "collect",
        "self_certainty": "policy", "reference_likelihood": "policy"}


# --------------------------------------------------------------------------- one file, no edit elsewhere


def _parity(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _train(out: Path, *overrides: str) -> Recorder:
    tok = make_tokenizer()
    problems = ([Problem(f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(6)], [])
    r = Recorder(tiny_run_config(out, "train.steps=2", "rollout.max_new_tokens=6", *overrides),
                 model=make_model(tok), tokenizer=tok, problems=problems, verifier=_parity)
    r.train()
    return r


@pytest.fixture
def brevity():
    """A shaping term registered from this module, as a plugin's file would."""

    @REWARD_SHAPING.register("test_brevity", doc="minus coef per generated token")
    def brevity_term(reward, group: GroupScores, *, coef: float = 0.01):
        return reward - coef * group.lengths

    yield brevity_term
    REWARD_SHAPING.unregister("test_brevity")


def test_a_shaping_term_registered_in_one_file_trains(tmp_path, brevity):
    r = _train(tmp_path, "reward.shaping={test_brevity: {coef: 0.25}}")
    assert len(r.seen) == 2
    for ro, scored in r.seen:
        want = torch.tensor([float(v.correct) - 0.25 * s.num_tokens for s, v in zip(ro.samples, ro.verdicts)])
        close(scored.rewards, want)
        assert any(s.num_tokens for s in ro.samples)  # the term acts
    with pytest.raises(ConfigError, match=r"reward.shaping.test_brevity.cof: not an option"):
        load_config(RunConfig, None, ["reward.shaping={test_brevity: {cof: 1}}"])


def test_an_unregistered_shaping_term_is_refused_at_load():
    with pytest.raises(ConfigError, match="reward.shaping.test_brevity: unknown reward shaping term"):
        load_config(RunConfig, None, ["reward.shaping={test_brevity: {coef: 1}}"])


@pytest.fixture
def length_source():
    """A reward source computed at collection, registered from this module."""

    def length_parity(group: GroupInput) -> SourceResult:
        return SourceResult(torch.tensor([float(len(t) % 2) for t in group.completions]), {"test/groups": 1.0})

    REWARD_SOURCES.add("test_length_parity", length_parity, tags={"collect", "label_free"})
    yield length_parity
    REWARD_SOURCES.unregister("test_length_parity")


def test_a_reward_source_registered_in_one_file_trains(tmp_path, length_source):
    r = _train(tmp_path, "reward.source=test_length_parity")
    for ro, scored in r.seen:
        close(scored.rewards, [float(len(s.text) % 2) for s in ro.samples])
        assert ro.source_metrics == {"test/groups": 1.0}


def test_a_source_without_a_stage_tag_is_refused_at_load():
    REWARD_SOURCES.add("test_untagged", lambda group: SourceResult(torch.zeros(group.size)))
    try:
        with pytest.raises(ConfigError, match="reward.source=test_untagged must be tagged either 'collect' or "
                                              "'policy'"):
            load_config(RunConfig, None, ["reward.source=test_untagged"])
    finally:
        REWARD_SOURCES.unregister("test_untagged")
