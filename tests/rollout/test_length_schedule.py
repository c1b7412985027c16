"""rollout.length_schedule: the cap on new tokens by step (context-length stages, shrinking budgets)."""

from __future__ import annotations

import pytest

from rlvr.rollout.settings import length_cap


def test_the_cap_by_hand():
    schedule = [(3, 16), (5, 32), (9, 8)]
    # 0-based steps 0..9 are the metrics' steps 1..10; before step 3 the default (64) applies
    assert [length_cap(schedule, s, 64) for s in range(10)] == [64, 64, 16, 16, 32, 32, 32, 32, 8, 8]
    assert length_cap([], 5, 64) == 64


@pytest.mark.parametrize("value, match", [
    ("[[2, 4], [2, 6]]", "strictly increasing"),
    ("[[0, 4]]", "strictly increasing"),
    ("[[1, 9]]", r"in \[1, rollout.max_new_tokens=8\]"),
    ("[[1, 0]]", r"in \[1, rollout.max_new_tokens=8\]"),
    ("[[1, 4, 2]]", r"\[from_step, cap\]"),
])
def test_a_bad_schedule_fails_when_the_config_loads(value, match):
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ConfigError, match=match) as e:
        load_config(RunConfig, None, ["rollout.max_new_tokens=8", f"rollout.length_schedule={value}"])
    assert "rollout.length_schedule" in str(e.value)


def test_each_step_samples_under_its_cap_through_the_recipe(tmp_path, tiny_tokenizer, monkeypatch):
    from conftest import make_model, tiny_run_config
    import rlvr.recipes.rl as recipe
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics
    from rlvr.types import Problem, Verdict

    lengths: list[list[int]] = []
    orig = recipe.collect_rollouts

    def spy(*a, **kw):
        out = orig(*a, **kw)
        lengths.append([s.num_tokens for s in out.samples])
        return out

    monkeypatch.setattr(recipe, "collect_rollouts", spy)
    problems = [Problem(f"p{i}", prompt=f"{i}+{i}", answer=str(2 * i)) for i in range(4)]
    cfg = tiny_run_config(tmp_path, "train.steps=3", "rollout.max_new_tokens=8",
                          "rollout.length_schedule=[[2, 3], [3, 6]]",
                          "reward.shaping={overlong: {cache_len: 2}}")
    train(cfg, model=make_model(tiny_tokenizer), tokenizer=tiny_tokenizer, problems=(problems, []),
          verifier=lambda c, r: Verdict(1.0, None, ""))
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["max_new_tokens"] for r in rows] == [8, 3, 6]
    assert [max(x) for x in lengths] == [8, 3, 6]  # the tiny model rarely stops: its longest reach each cap
    # DAPO's overlong shaping counts from the step's cap: with cache_len 2, a 3-token answer at cap 3 loses
    # (3 - (3 - 2)) / 2 = 1.0, at cap 8 nothing (it would at cap 8 from 7 tokens on)
    assert rows[1]["reward_mean"] < 1.0 - 0.5 * 0.5  # most answers of step 2 reach the cap: reward 0


def test_a_length_window_wider_than_a_scheduled_cap_fails_at_load():
    from rlvr.config import ConfigError, load_config
    from rlvr.recipes.config import RunConfig

    with pytest.raises(ConfigError, match=r"cache_len=4 .* smallest cap of rollout.length_schedule, 3"):
        load_config(RunConfig, None, ["rollout.max_new_tokens=8", "rollout.length_schedule=[[2, 3]]",
                                      "reward.shaping={overlong: {cache_len: 4}}"])
