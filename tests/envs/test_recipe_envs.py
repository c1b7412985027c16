"""Environments in the recipe: multi-turn tool episodes train, the curriculum moves, logs and resumes exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import make_model, tiny_run_config
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import train
from rlvr.tasks.curriculum import CurriculumSampler
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict


def _cfg(out: Path, *extra: str) -> RunConfig:
    return tiny_run_config(out, "rollout.max_new_tokens=6", "train.save_every=2", "eval.before_training=true",
                           "eval.after_training=true", "eval.num_problems=3", "eval.max_new_tokens=6", *extra)


def _parity(completion: str, reference: str) -> Verdict:
    """Even-length completions are 'correct': a signal a random tiny model can learn from."""
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


PROBS = ([Problem(f"t{i}", prompt=f"{i}*3", answer=str(3 * i)) for i in range(8)],
         [Problem(f"h{i}", prompt=f"{i}*7", answer=str(7 * i)) for i in range(3)])


def test_multi_turn_episodes_train_and_log(tmp_path, tiny_tokenizer):
    model = make_model(tiny_tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # train.seed=4: a draw in which every step has wrong first attempts (with the default seed 3 a step can have
    # none, and then no second turn: since evaluation stopped reseeding training, train.seed picks the draw)
    summary = train(_cfg(tmp_path, "env.name=retry", "env.params={attempts: 2}", "train.steps=2", "train.seed=4"),
                    model=model, tokenizer=tiny_tokenizer, problems=PROBS, verifier=_parity)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(1 < r["env/turns"] <= 2 for r in rows)  # some wrong first attempts got a second one
    assert "env/correct_at_turn_2" in rows[0]
    assert len(summary["eval_after"]["greedy"]["episodes"]["accuracy_by_turn"]) == 2
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_tool_environment_runs_in_the_recipe(tmp_path, tiny_tokenizer):
    summary = train(_cfg(tmp_path, "env.name=tools", "env.params={max_turns: 2}", "train.steps=1"),
                    model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=PROBS)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[0]["env/tool_call_rate"] >= 0 and "tool_call_rate" in summary["eval_after"]["greedy"]["episodes"]


def test_curriculum_sampler_moves_within_the_band():
    levels = [[Problem(f"L{lv}-{i}", prompt="x", answer="1") for i in range(5)] for lv in range(3)]
    cs = CurriculumSampler(levels, low=0.2, high=0.8, window=4, min_groups=2)
    assert cs.next(2)[0].id.startswith("L0")
    assert cs.observe([1.0]) == 0  # fewer than min_groups
    assert cs.observe([0.9]) == 1 and cs.level == 1 and cs.pass_rate is None  # window restarts
    assert cs.next(1)[0].id.startswith("L1")
    assert cs.observe([0.5, 0.5, 0.5]) == 0
    assert cs.observe([0.0, 0.0, 0.0]) == -1 and cs.level == 0  # mean of the last 4 = 0.125 < 0.2
    cs.observe([1.0, 1.0]); cs.observe([1.0, 1.0])  # noqa: E702
    assert cs.level == 2
    cs.observe([1.0] * 4)
    assert cs.level == 2  # no level above the hardest
    state = cs.state_dict()
    other = CurriculumSampler(levels, low=0.2, high=0.8, window=4, min_groups=2)
    other.load_state_dict(state)
    assert [p.id for p in other.next(3)] == [p.id for p in cs.next(3)]


def _curriculum_run(out, *extra):
    model = make_model(__import__("conftest").make_tokenizer())
    return model, train(_cfg(out, "curriculum.levels=[{max_value: 9}, {max_value: 30}, {max_value: 300}]",
                             "curriculum.window=2", "curriculum.min_groups=2", "curriculum.low=0.0",
                             "curriculum.high=0.01", "task.params.num_train=30", "task.num_heldout=5", *extra),
                        model=model, tokenizer=__import__("conftest").make_tokenizer(), verifier=_parity)


def test_curriculum_logs_its_level_every_step_and_resumes_exactly(tmp_path):
    # parity reward (~half right) and high=0.01: the level moves up as soon as min_groups groups are seen
    full_model, _ = _curriculum_run(tmp_path / "full")
    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert [r["curriculum/level"] for r in full] == [1.0, 2.0, 2.0, 2.0]
    _curriculum_run(tmp_path / "split", "train.steps=2")
    resumed_model, _ = _curriculum_run(tmp_path / "split", "train.resume=true")
    split = read_metrics(tmp_path / "split" / "metrics.jsonl")
    keys = ("reward_mean", "curriculum/level", "accuracy")
    assert [[r[k] for k in keys if k in r] for r in split] == [[r[k] for k in keys if k in r] for r in full]
    for a, b in zip(full_model.state_dict().values(), resumed_model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_curriculum_levels_are_checked_when_the_config_loads(tmp_path):
    small = ["task.params.num_train=4", "task.num_heldout=2"]  # 1..3 + 1..3 holds 9 distinct expressions
    with pytest.raises(ValueError, match=r"curriculum.levels\[1\]"):
        _cfg(tmp_path, *small, "curriculum.levels=[{max_value: 3}, {max_valu: 30}]")
    # a level whose expression space cannot hold the train and held-out problems fails at load, not when reached
    with pytest.raises(ValueError, match=r"curriculum.levels\[1\]: the arithmetic spec allows only 4 distinct "
                                         r"expressions but num_train \+ num_heldout = 6"):
        _cfg(tmp_path, *small, "curriculum.levels=[{max_value: 3}, {max_value: 2}]")
    with pytest.raises(ValueError, match="start_level / eval_level"):
        _cfg(tmp_path, "curriculum.levels=[{max_value: 3}]", "curriculum.start_level=2")


def test_multi_turn_episodes_with_lora(tmp_path, tiny_tokenizer):
    pytest.importorskip("peft")
    model = make_model(tiny_tokenizer)
    summary = train(_cfg(tmp_path, "env.name=retry", "train.steps=2", "model.lora.enabled=true", "model.lora.r=4",
                         "model.lora.alpha=8", "train.seed=4"), model=model, tokenizer=tiny_tokenizer, problems=PROBS,
                    verifier=_parity)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2 and all(r["env/turns"] > 1 for r in rows)
    assert rows[-1]["logprob_mismatch"] < 1e-3  # the merged sampler copy and the adapters agree on every turn
    assert "episodes" in summary["eval_after"]["greedy"]
