"""SWE-RL's patch-similarity reward and the diversity bonus, by hand and through the recipe."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import close
from rl_harness import train_recorded
from rlvr.config import ConfigError, load_config
from rlvr.recipes.config import RunConfig
from rlvr.rewards.functions.diversity import jaccard, ngram_set
from rlvr.rewards.functions.patch_similarity import extract_patch
from rlvr.rewards.pipeline import GroupScores
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardFunctionSpec
from rlvr.types import Problem, Sample, Verdict

ORACLE = "@@ -1 +1 @@\n-a\n+c"


def _group(texts: list[str], correct: list[int], answer: str = ORACLE) -> GroupScores:
    problem = Problem("p", prompt="fix it", answer=answer)
    samples = [Sample("p", [1], [5], [-1.0], t, "stop", i, verdict=Verdict(float(c), None, "hand"),
                      env_return=float(c)) for i, (t, c) in enumerate(zip(texts, correct))]
    return GroupScores.of(problem, samples, max_new_tokens=8)


def _diff(body: str) -> str:
    return f"Here is the fix.\n```diff\n{body}\n```\n"


def test_patch_similarity_by_hand():
    # predicted "@@ -1 +1 @@\n-a\n+b" vs oracle "@@ -1 +1 @@\n-a\n+c": 17 characters each, 16 match:
    # SequenceMatcher's ratio 2 M / T = 2 * 16 / 34
    r = Rubric.from_specs([RewardFunctionSpec(kind="patch_similarity")])
    got = r.score(_group([_diff("@@ -1 +1 @@\n-a\n+b"), _diff(ORACLE), "no patch here",
                          _diff("@@\n-a\n+c") + _diff(ORACLE), "```diff\njust words\n```"], [0] * 5))
    close(got.reward, [2 * 16 / 34, 1.0, -1.0, -1.0, -1.0])  # none / two blocks / no hunk line: the format error


@settings(max_examples=80, deadline=None)
@given(pred=st.text(alphabet="ab+-@ \n", min_size=1, max_size=40), oracle=st.text(alphabet="ab+-@ \n", max_size=40))
def test_patch_reward_is_in_its_range_and_one_only_for_the_oracle(pred, oracle):
    """Property: the reward is -1 or in [0, 1], and 1 only when the extracted patch is the oracle's text."""
    r = Rubric.from_specs([RewardFunctionSpec(kind="patch_similarity")])
    v = float(r.score(_group([_diff(pred)], [0], answer=oracle)).reward[0])
    patch = extract_patch(_diff(pred))
    if patch is None:
        assert v == -1.0
    else:
        assert 0.0 <= v <= 1.0
        assert (v == 1.0) == (patch == oracle.strip("\n"))
        assert v == pytest.approx(difflib.SequenceMatcher(None, patch, oracle.strip("\n"), autojunk=False).ratio())


def test_patch_options_refused_at_load(tmp_path):
    with pytest.raises(ConfigError, match="format_penalty must be in"):
        load_config(RunConfig, None, [f"train.output_dir={tmp_path}",
                                      "reward.functions=[{kind: patch_similarity, params: {format_penalty: 2}}]"])


def test_diversity_by_hand():
    assert ngram_set("A b, c", 2) == {("a", "b"), ("b", ","), (",", "c")}
    assert jaccard(frozenset("abc"), frozenset("abd")) == 0.5
    texts = ["a b c", "a b c", "x y z", "a b d"]
    # unigram sets: s0 = s1, s2 disjoint, s3 shares {a, b} with s0 / s1: J = 2/4
    # d = 1 - max_j J = [0, 0, 1, 0.5]
    both = Rubric.from_specs([RewardFunctionSpec(kind="verifier"),
                              RewardFunctionSpec(kind="diversity", weight=0.5, params={"n": 1})])
    got = both.score(_group(texts, [1, 1, 0, 1], answer="x"))
    close(got.parts["diversity"], [0, 0, 0, 0.5])  # the incorrect s2 earns no bonus
    close(got.reward, [1, 1, 0, 1.25])
    every = Rubric.from_specs([RewardFunctionSpec(kind="diversity", params={"n": 1, "correct_only": False})])
    close(every.score(_group(texts, [1, 1, 0, 1], answer="x")).reward, [0, 0, 1, 0.5])
    close(every.score(_group(["alone"], [1], answer="x")).reward, [0])  # a group of one


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(alphabet="ab c", max_size=12), min_size=2, max_size=6),
       correct=st.lists(st.booleans(), min_size=6, max_size=6))
def test_diversity_never_pays_a_wrong_answer_nor_a_copy(texts, correct):
    """Properties: incorrect samples earn 0; a sample whose n-grams equal another's earns 0; all in [0, 1]."""
    c = [int(x) for x in correct[:len(texts)]]
    r = Rubric.from_specs([RewardFunctionSpec(kind="diversity")])
    d = r.score(_group(texts, c, answer="x")).reward
    for i, t in enumerate(texts):
        assert 0.0 <= float(d[i]) <= 1.0
        if not c[i] or any(j != i and ngram_set(u, 2) == ngram_set(t, 2) for j, u in enumerate(texts)):
            assert float(d[i]) == 0.0


def test_through_the_recipe_the_diversity_bonus_is_in_the_training_reward(tmp_path: Path):
    r = train_recorded(tmp_path, "reward.functions=[verifier, {kind: diversity, weight: 0.5, params: {n: 1}}]")
    G, paid = 4, 0
    for ro, scored in r.seen:
        want = []
        for start in range(0, len(ro.samples), G):
            sets = [ngram_set(s.text, 1) for s in ro.samples[start:start + G]]
            for i in range(G):
                c = float(ro.verdicts[start + i].correct)
                d = 1 - max(jaccard(sets[i], sets[j]) for j in range(G) if j != i)
                want.append(c * (1 + 0.5 * d))
                paid += int(c > 0 and d > 0)
        close(scored.rewards, want)
    assert paid > 0  # the bonus acted on some correct sample
