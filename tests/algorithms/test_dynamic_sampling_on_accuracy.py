"""DAPO's dynamic sampling keeps the groups with ``0 < #correct < G`` (Yu et al. 2025, Eq. 11; verl's
``filter_groups`` reads ``acc``), not those whose *shaped* reward varies: an all-correct group whose lengths
the soft overlong punishment spreads apart has rewards that differ, yet no sample in it is better or
worse an answer than another.  Also: a negative entropy weight is refused when the config loads."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tokenizer
from rlvr.engines.base import EngineBase
from rlvr.config import ConfigError, load_config
from rlvr.engines import SamplingParams
from rlvr.engines.hf import format_prompt
from rlvr.recipes.config import RunConfig
from rlvr.rollout.collect import collect_rollouts
from rlvr.tasks.sampler import PromptSampler
from rlvr.types import Problem, Sample, Verdict

G = 4


class Fixed(EngineBase):
    """A fake engine: every sample of ``easy`` answers RIGHT with g extra characters (lengths 6..9 tokens with the
    EOS); ``mixed``: samples 0 and 2 right, 1 and 3 wrong."""

    def __init__(self, tok):
        super().__init__(tok)

    def generate(self, problems, params, prefixes=None):
        out = []
        for p in problems:
            group = []
            for g in range(params.n):
                text = "RIGHT" + "x" * g if p.id == "easy" else ("RIGHT" if g % 2 == 0 else "wrong")
                ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
                group.append(Sample(p.id, format_prompt(self.tokenizer, p), ids, [-0.5] * len(ids), text, "stop", g))
            out.append(group)
        return out


def right(completion: str, reference: str) -> Verdict:
    return Verdict(1.0 if "RIGHT" in completion else 0.0, None, "")


def test_dynamic_sampling_drops_an_all_correct_group_whose_shaped_rewards_differ():
    tok = make_tokenizer()
    cfg = load_config(RunConfig, None, ["train.prompts_per_step=2", f"rollout.group_size={G}",
                                        "rollout.max_new_tokens=12", "reward.shaping={overlong: {cache_len: 6}}",
                                        "algorithm.dynamic_sampling=true", "algorithm.max_sampling_rounds=2"])
    problems = [Problem("easy", prompt="1+1?", answer="2"), Problem("mixed", prompt="2+2?", answer="4")]
    ro = collect_rollouts(Fixed(tok), PromptSampler(problems, seed=0), right, SamplingParams(n=G, max_new_tokens=12),
                          cfg.collect_settings(), 0)
    samples, verdicts, rewards, rounds, generated = ro.samples, ro.verdicts, ro.rewards, ro.rounds, ro.generated
    # the easy group's rewards differ (lengths 6..9 past the 12 - 6 = 6 threshold are punished) ...
    easy = torch.tensor([1.0 - max(0, n - 6) / 6 for n in (6, 7, 8, 9)])
    assert len(set(easy.tolist())) == 4
    # ... but all its answers are right: dropped; a second round is drawn and only mixed groups are kept
    assert rounds == 2 and generated == 2 * 2 * G
    assert [s.problem_id for s in samples] == ["mixed"] * (2 * G)
    assert [v.correct for v in verdicts] == [True, False, True, False] * 2
    assert rewards.tolist() == [1.0, 0.0, 1.0, 0.0] * 2


def test_a_negative_entropy_weight_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match="algorithm.entropy_coef: must be >= 0"):
        load_config(RunConfig, None, ["algorithm.entropy_coef=-0.01"])
    load_config(RunConfig, None, ["algorithm.entropy_coef=0.01"])
