"""Branching rollouts (CURE / ARPO): part of each group re-sampled from an earlier sample's critical token."""

from __future__ import annotations

import pytest

from conftest import make_tokenizer
from rl_harness import train_recorded
from rlvr.config import ConfigError, load_config
from rlvr.engines import SamplingParams
from rlvr.envs import SingleTurnEnvironment
from rlvr.recipes.config import RunConfig
from rlvr.rollout.branching import add_branches, critical_position
from rlvr.types import Problem, Sample, Verdict


class Forking:
    """A fake engine: a fresh sample is "abcd" with log-probs [-0.1, -2.0, -0.3, -0.2]; a continuation from a prefix
    is "XY" with log-probs [-0.5, -0.6]."""

    def __init__(self, tok):
        self.tokenizer, self.prefixes = tok, []

    def generate(self, problems, params, prefixes=None):
        out = []
        for i, p in enumerate(problems):
            if prefixes is None:
                ids, lps, text = self.tokenizer.encode("abcd", add_special_tokens=False), [-0.1, -2.0, -0.3, -0.2], "abcd"
            else:
                self.prefixes.append(list(prefixes[i]))
                ids, lps, text = self.tokenizer.encode("XY", add_special_tokens=False), [-0.5, -0.6], "XY"
            out.append([Sample(p.id, [7], list(ids), list(lps), text, "stop", g) for g in range(params.n)])
        return out


def test_branches_fork_at_the_least_likely_token_by_hand():
    tok = make_tokenizer()
    assert critical_position([-0.1, -2.0, -0.3, -2.0]) == 1 and critical_position([]) == 0
    eng = Forking(tok)
    env = SingleTurnEnvironment(lambda text, ref: Verdict(float("XY" in text), None, "has XY"))
    problems = [Problem("p", prompt="q", answer="")]
    groups = eng.generate(problems, SamplingParams(n=2))
    out = add_branches(eng, env, problems, groups, SamplingParams(n=4, max_new_tokens=8), 2)
    g = out[0]
    assert len(g) == 4 and [s.group_index for s in g] == [0, 1, 2, 3]
    a, b = tok.encode("a", add_special_tokens=False), tok.encode("XY", add_special_tokens=False)
    assert eng.prefixes == [a, a]  # the fork is token 1 ("b", log-prob -2.0): the prefix keeps "a"
    for k, s in enumerate(g[2:]):
        assert s.completion_ids == a + b and s.text == "aXY" and s.prompt_ids == [7]
        assert s.logprobs == [-0.1, -0.5, -0.6]  # the kept token's own log-prob, then the new suffix's
        assert s.info["branch_of"] == k and s.info["branch_at"] == 1 and s.verdict.correct and s.env_return == 1.0
    cut = add_branches(eng, env, problems, eng.generate(problems, SamplingParams(n=2)),
                       SamplingParams(n=4, max_new_tokens=2), 1)[0][2]
    assert cut.completion_ids == a + b[:1] and cut.finish_reason == "length" and len(cut.logprobs) == 2


def test_through_the_recipe_each_group_holds_its_branches(tmp_path):
    r = train_recorded(tmp_path, "rollout.branches=2")
    for ro, scored in r.seen:
        assert len(ro.samples) == 2 * 4
        for start in (0, 4):
            group = ro.samples[start:start + 4]
            plain, branched = group[:2], group[2:]
            assert not any("branch_of" in s.info for s in plain)
            for s in branched:
                src, t = group[s.info["branch_of"]], s.info["branch_at"]
                assert t == critical_position(list(src.logprobs))
                assert s.completion_ids[:t] == src.completion_ids[:t] and s.logprobs[:t] == src.logprobs[:t]
                assert len(s.logprobs) == len(s.completion_ids) <= 6  # within rollout.max_new_tokens
        assert scored.batch.input_ids.shape[0] == 8


def test_bad_branch_counts_are_refused():
    with pytest.raises(ConfigError, match="must be below rollout.group_size"):
        load_config(RunConfig, None, ["rollout.group_size=4", "rollout.branches=4"])
    with pytest.raises(ConfigError, match="single-turn environment"):
        load_config(RunConfig, None, ["rollout.branches=2", "env.name=retry"])
