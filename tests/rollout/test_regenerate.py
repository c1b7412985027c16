"""``guidance.regenerate``: ExPO's answer-conditioned self-explanations and Critique-GRPO's refinements join a
failing group as off-policy rows of the original prompt."""

from __future__ import annotations

import pytest

from conftest import make_model, make_tokenizer
from rl_harness import Recorder
from rlvr.config import ConfigError, load_config
from rlvr.engines.hf import format_prompt
from rlvr.recipes.config import RunConfig
from rlvr.rollout.guidance import CRITIQUE, EXPLAIN
from rlvr.trackers import read_metrics
from rlvr.types import Sample
from test_guidance import G, PROBS, Scripted, Seen, _by_id, _cfg, _collect, _problems


class Helped(Scripted):
    """Answers RIGHT (sample ``right_at`` of the call only) when the prompt carries the regeneration request."""

    def __init__(self, tok, marker: str, right_at: int = 1):
        super().__init__(tok, {})
        self.marker, self.right_at, self.asked = marker, right_at, []

    def generate(self, problems, params, prefixes=None):
        out = []
        for p in problems:
            helped = self.marker in p.prompt
            if helped:
                self.asked.append((p.prompt, params.n))
            group = []
            for g in range(params.n):
                text = "RIGHT" if helped and g == self.right_at else "wrong"
                ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
                group.append(Sample(p.id, format_prompt(self.tokenizer, p), ids, [-0.5] * len(ids), text, "stop", g))
            out.append(group)
        return out


@pytest.mark.parametrize("mode, marker", [("answer", "The correct answer is 19."), ("critique", "This attempt is incorrect.")])
def test_a_passing_regeneration_becomes_an_off_policy_row_of_the_original_prompt(mode, marker):
    tok = make_tokenizer()
    eng = Helped(tok, marker)
    ro = _collect(eng, _problems(), _cfg(f"guidance.regenerate={mode}", "guidance.regenerate_samples=3"), Seen())
    groups = _by_id(ro.samples)
    for pid in ("p0", "p1"):
        row = groups[pid][-1]
        assert row.info == {"off_policy": True, "guidance": f"regenerate_{mode}", "turn_ends": [len(row.completion_ids)],
                            "turn_rewards": [1.0], "turns": 1, "end": "done"}
        assert row.text == "RIGHT" and row.verdict.correct and row.logprobs == [0.0] * len(row.completion_ids)
        assert row.prompt_ids == groups[pid][0].prompt_ids  # trained as an answer to the original prompt
    assert [n for _, n in eng.asked] == [3, 3]
    prompt = eng.asked[0][0]
    if mode == "answer":  # ExPO: the reference answer is given
        assert prompt == EXPLAIN.format(prompt="What is 0?", answer="19")
    else:  # Critique-GRPO's indicative critique: the failed attempt, no answer revealed
        assert prompt == CRITIQUE.format(prompt="What is 0?", attempt="wrong") and "19" not in prompt
    assert ro.guidance_metrics["guidance/regenerated_groups"] == 1.0
    assert ro.guidance_metrics["guidance/rollouts_extra"] == 6.0  # 3 per failing group, charged to the budget


def test_no_passing_regeneration_keeps_the_group_and_a_demonstration_still_follows():
    tok = make_tokenizer()
    eng = Helped(tok, "never in a prompt")
    ro = _collect(eng, _problems(), _cfg("guidance.regenerate=answer", "guidance.demonstrations=true"), Seen())
    assert ro.guidance_metrics["guidance/regenerated_groups"] == 0.0
    assert all(_by_id(ro.samples)[p][-1].info["guidance"] == "demo" for p in ("p0", "p1"))


def test_through_the_recipe_it_trains(tmp_path):
    tok = make_tokenizer()
    cfg = load_config(RunConfig, None, [
        f"train.output_dir={tmp_path}", "train.steps=2", "train.prompts_per_step=2", f"rollout.group_size={G}",
        "rollout.max_new_tokens=16", "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0",
        "train.save_every=0", "train.progress=false", "eval.before_training=false", "eval.after_training=false",
        "train.seed=3", "guidance.regenerate=answer"])
    r = Recorder(cfg, model=make_model(tok), tokenizer=tok, problems=PROBS)
    r.train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert all("guidance/regenerated_groups" in row for row in rows)
    assert rows[-1]["rollouts"] == 2 * 2 * G + sum(row["guidance/rollouts_extra"] for row in rows)


@pytest.mark.parametrize("extra, match", [
    (["env.name=retry"], "env.name=single_turn"),
    (["distributed.fsdp=true"], "distributed.fsdp"),
    (["guidance.regenerate_samples=0"], "guidance.regenerate_samples"),
])
def test_config_refuses_what_regeneration_cannot_run(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, ["guidance.regenerate=critique", *extra])
    with pytest.raises(ConfigError, match="regeneration is off"):
        load_config(RunConfig, None, ["guidance.regenerate_samples=4"])
    with pytest.raises(ConfigError, match="guidance.regenerate"):
        load_config(RunConfig, None, ["guidance.regenerate=hint"])
