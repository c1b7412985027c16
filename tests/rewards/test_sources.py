"""Reward sources (rlvr.rewards.sources) against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.registry import RegistryError
from rlvr.rewards.sources import (
    REWARD_SOURCES,
    GroupInput,
    compute_group_rewards,
    majority_answer,
    token_self_certainty,
)
from rlvr.types import Verdict

from conftest import close

T = torch.tensor


def V(score, extracted):
    return Verdict(score=score, extracted=extracted)


def test_registry_names_needs_and_checks():
    assert set(REWARD_SOURCES.names()) == {"verifier", "majority_vote", "self_certainty", "reference_likelihood",
                                           "random", "format_only"}
    assert REWARD_SOURCES.entry("self_certainty").needs == {"token_self_certainty", "mask"}
    assert "label_free" in REWARD_SOURCES.entry("majority_vote").tags
    # label-free answer-based sources refused where no answers are parsed
    with pytest.raises(RegistryError, match="parseable final answers.*code_stdio"):
        REWARD_SOURCES.check("majority_vote", {}, key="reward.source_params", verifier="code_stdio")
    with pytest.raises(RegistryError, match="parseable"):
        REWARD_SOURCES.check("format_only", {}, extracts_answers=False)
    REWARD_SOURCES.check("majority_vote", {"min_share": 0.5}, verifier="math")
    # sources reading the reference refused on a task without one
    for name in ("verifier", "reference_likelihood"):
        with pytest.raises(RegistryError, match="needs reference answers"):
            REWARD_SOURCES.check(name, {}, has_reference=False)
    REWARD_SOURCES.check("self_certainty", {}, has_reference=False)
    with pytest.raises(RegistryError, match="aggregate"):
        REWARD_SOURCES.check("reference_likelihood", {"aggregate": "median"})
    with pytest.raises(RegistryError, match="p"):
        REWARD_SOURCES.check("random", {"p": 1.5})
    with pytest.raises(RegistryError, match="not an option"):
        REWARD_SOURCES.check("verifier", {"scale": 2})


def test_verifier_source():
    g = GroupInput(["a", "b", "c"], reference="3", verdicts=[V(1.0, "3"), V(0.0, "4"), V(0.5, "3")])
    res = REWARD_SOURCES["verifier"](g)
    close(res.rewards, [1.0, 0.0, 0.5])
    assert res.metrics["reward/verifier_accuracy"] == pytest.approx(2 / 3)


def test_majority_answer_ties_and_none():
    assert majority_answer(["4", None, "3", "3", "4"]) == ("4", 2)  # tie: the first seen
    assert majority_answer([None, None]) == (None, 0)


def test_majority_vote_ttrl_by_hand():
    # answers [5, 5, 7, None]: majority 5 (2 of 4); the truth is 7
    verdicts = [V(0.0, "5"), V(0.0, "5"), V(1.0, "7"), V(0.0, None)]
    g = GroupInput(["."] * 4, reference="7", verdicts=verdicts)
    res = REWARD_SOURCES["majority_vote"](g)
    close(res.rewards, [1.0, 1.0, 0.0, 0.0])
    assert res.metrics["ttrl/majority_share"] == 0.5
    assert res.metrics["ttrl/label_accuracy"] == 0.0
    # pseudo-rewards [1, 1, 0, 0] vs true [0, 0, 1, 0]: only the last agrees
    assert res.metrics["ttrl/reward_accuracy"] == 0.25
    assert res.metrics["ttrl/no_answer_share"] == 0.25
    # min_share 0.6 > 0.5: no confident label, all get wrong_reward
    res = REWARD_SOURCES["majority_vote"](g, min_share=0.6, wrong_reward=-1.0)
    close(res.rewards, [-1.0] * 4)
    # no verdicts (unlabelled): canonical answers given; label accuracy from the reference when known
    g = GroupInput(["."] * 3, reference="1/2", answers=["1/2", "1/2", "2"])
    res = REWARD_SOURCES["majority_vote"](g)
    close(res.rewards, [1.0, 1.0, 0.0])
    assert res.metrics["ttrl/label_accuracy"] == 1.0 and math.isnan(res.metrics["ttrl/reward_accuracy"])
    res = REWARD_SOURCES["majority_vote"](GroupInput(["."] * 2, answers=["1", "2"]))
    assert math.isnan(res.metrics["ttrl/label_accuracy"])


def test_token_self_certainty_by_hand():
    # V = 2, logits [0, 0]: uniform -> 0.  logits [log 3, 0]: p = [3/4, 1/4]
    # KL(U||p) = 1/2 log(1/2 / 3/4) + 1/2 log(1/2 / 1/4) = 1/2 log(2/3) + 1/2 log 2 = 1/2 log(4/3)
    sc = token_self_certainty(T([[0.0, 0.0], [math.log(3), 0.0]]))
    close(sc, [0.0, 0.5 * math.log(4 / 3)])
    # the formula lse - mean - log V against the definition on random logits
    z = torch.randn(3, 7)
    p = z.softmax(-1)
    close(token_self_certainty(z), (1 / 7 * torch.log((1 / 7) / p)).sum(-1), tol=1e-5)


def test_self_certainty_source_masked_mean():
    sc = T([[1.0, 3.0, 9.0], [2.0, 2.0, 2.0]])
    m = T([[1, 1, 0], [1, 0, 0]])
    res = REWARD_SOURCES["self_certainty"](GroupInput(["a", "b"], token_self_certainty=sc, mask=m))
    close(res.rewards, [2.0, 2.0])  # (1 + 3) / 2, 2 / 1
    with pytest.raises(ValueError, match="needs token_self_certainty"):
        REWARD_SOURCES["self_certainty"](GroupInput(["a"]))


def test_reference_likelihood_rlpr_by_hand():
    # reference of 2 tokens; sample 0: probs [0.5, 0.9], sample 1: [0.2, 0.4]; no reasoning: [0.3, 0.5]
    lp = torch.log(T([[0.5, 0.9], [0.2, 0.4]]))
    base = torch.log(T([0.3, 0.5]))
    g = GroupInput(["a", "b"], reference="x", reference_logprobs=lp, reference_logprobs_no_reasoning=base)
    res = REWARD_SOURCES["reference_likelihood"](g)
    # mean_prob: [0.7, 0.3]; p0 = 0.4 -> [0.3, -0.1] -> clipped [0.3, 0.0]
    close(res.rewards, [0.3, 0.0])
    assert res.metrics["rlpr/prob_no_reasoning"] == pytest.approx(0.4)
    assert res.keep is None
    res = REWARD_SOURCES["reference_likelihood"](g, clip=False)
    close(res.rewards, [0.3, -0.1])
    # VeriFree's sequence probability without debiasing: [0.45, 0.08]; geo mean: [sqrt .45, sqrt .08]
    close(REWARD_SOURCES["reference_likelihood"](g, aggregate="seq_prob", debias=False).rewards, [0.45, 0.08])
    close(REWARD_SOURCES["reference_likelihood"](g, aggregate="geo_mean", debias=False).rewards,
          [math.sqrt(0.45), math.sqrt(0.08)])
    # std filter: rewards [0.3, 0.0] have sample std 0.3 / sqrt 2 = 0.2121 -> kept at 0.2, dropped at 0.25
    assert REWARD_SOURCES["reference_likelihood"](g, std_threshold=0.2).keep.tolist() == [True, True]
    res = REWARD_SOURCES["reference_likelihood"](g, std_threshold=0.25)
    assert res.keep.tolist() == [False, False] and res.metrics["rlpr/kept"] == 0.0
    # reference mask: a padded second token is ignored -> sample probs [0.5, 0.2]; p0 = 0.3 -> [0.2, 0]
    g.reference_mask = T([[1, 0], [1, 0]])
    close(REWARD_SOURCES["reference_likelihood"](g).rewards, [0.2, 0.0])
    with pytest.raises(ValueError, match="no_reasoning"):
        REWARD_SOURCES["reference_likelihood"](GroupInput(["a"], reference_logprobs=lp[:1]))


def test_reference_log_likelihood_by_hand():
    # sample 0: probs [0.5, 0.9], sample 1: [0.2, 0.4]; no reasoning: [0.3, 0.5]
    lp = torch.log(T([[0.5, 0.9], [0.2, 0.4]]))
    base = torch.log(T([0.3, 0.5]))
    g = GroupInput(["a", "b"], reference="x", reference_logprobs=lp, reference_logprobs_no_reasoning=base)
    src = REWARD_SOURCES["reference_likelihood"]
    close(src(g, aggregate="mean_logprob", debias=False, clip=False).rewards,
          [(math.log(0.5) + math.log(0.9)) / 2, (math.log(0.2) + math.log(0.4)) / 2])
    close(src(g, aggregate="seq_logprob", debias=False, clip=False).rewards, [math.log(0.45), math.log(0.08)])
    # debiased: the log-ratio against the reference without reasoning, log(0.45 / 0.15) and log(0.08 / 0.15)
    close(src(g, aggregate="seq_logprob", clip=False).rewards, [math.log(3.0), math.log(0.08 / 0.15)])
    with pytest.raises(ValueError, match="clip=false"):
        src(g, aggregate="mean_logprob")


def test_a_clipped_log_likelihood_is_refused_when_the_config_loads(tmp_path):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ConfigError, match="set clip=false"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "reward.source=reference_likelihood",
                                      "reward.source_params={aggregate: mean_logprob}"])
    load_config(RunConfig, None, [f"train.output_dir={tmp_path}", "reward.source=reference_likelihood",
                                  "reward.source_params={aggregate: mean_logprob, clip: false}"])


def test_random_control_is_seeded():
    g = GroupInput(["."] * 64, key=(3, 1))
    a = REWARD_SOURCES["random"](g, p=0.25, seed=7).rewards
    b = REWARD_SOURCES["random"](g, p=0.25, seed=7).rewards
    assert torch.equal(a, b) and set(a.tolist()) <= {0.0, 1.0}
    assert not torch.equal(a, REWARD_SOURCES["random"](GroupInput(["."] * 64, key=(3, 2)), p=0.25, seed=7).rewards)
    assert 4 <= a.sum() <= 28  # Bernoulli(0.25) x 64: mean 16
    close(REWARD_SOURCES["random"](g, p=0.0).rewards, [0.0] * 64)
    close(REWARD_SOURCES["random"](g, p=1.0).rewards, [1.0] * 64)


def test_format_only_control():
    g = GroupInput(["a", "b", "c"], verdicts=[V(0.0, "12"), V(0.0, None), V(1.0, " ")])
    close(REWARD_SOURCES["format_only"](g).rewards, [1.0, 0.0, 0.0])


def test_compute_group_rewards_concatenates_and_averages_metrics():
    groups = [GroupInput(["."] * 2, answers=["1", "1"], reference="1"),
              GroupInput(["."] * 2, answers=["2", None], reference="3")]
    r, keep, metrics = compute_group_rewards("majority_vote", groups)
    close(r, [1.0, 1.0, 1.0, 0.0])
    assert keep.all()
    assert metrics["ttrl/label_accuracy"] == 0.5 and metrics["ttrl/majority_share"] == 0.75
    with pytest.raises(RegistryError):
        compute_group_rewards("majority_vote", groups, min_share=2.0)
