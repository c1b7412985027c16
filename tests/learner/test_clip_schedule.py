"""``algorithm.clip_schedule``: the PPO clip range by step, applied by the learner as the scheduled range."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rl_harness import RecordingSGD, assert_grads_close, batch, tiny, train_recorded
from rlvr.config import ConfigError, load_config
from rlvr.learner.update import update_policy
from rlvr.recipes.config import RunConfig
from test_mini_batches import ADV, COMPLETIONS, reference_sgd

SCHEDULE = "algorithm.clip_schedule=[[3, 0.1, 0.05], [5, 0.3, 0.28]]"


def test_the_range_of_each_step_by_hand():
    s = load_config(RunConfig, None, ["algorithm.mini_batches=2", SCHEDULE]).learner_settings()
    # steps counted from 1 in the schedule; at_step takes the 0-based step
    got = [(s.at_step(k).clip_low, s.at_step(k).clip_high) for k in range(6)]
    assert got == [(0.2, 0.2), (0.2, 0.2), (0.1, 0.05), (0.1, 0.05), (0.3, 0.28), (0.3, 0.28)]
    assert s.at_step(0) is s  # before the first entry: the settings as they are


def test_the_learner_clips_with_the_scheduled_range():
    """At the scheduled step the update equals PPO/DAPO's clipped surrogate with the scheduled eps_low / eps_high
    (the reference of test_mini_batches), and differs from the unscheduled range's."""
    tok, model = tiny()
    b = batch(tok, COMPLETIONS, ADV, model=model)
    ref_model, other_model = copy.deepcopy(model), copy.deepcopy(model)
    cfg = load_config(RunConfig, None, ["train.max_grad_norm=0", "algorithm.mini_batches=2",
                                        "algorithm.clip_schedule=[[2, 0.02, 0.03]]"])
    settings = cfg.learner_settings().at_step(1)  # the second step: the scheduled range
    assert (settings.clip_low, settings.clip_high) == (0.02, 0.03)
    opt = RecordingSGD(model.parameters(), lr=0.5)
    update_policy(model, opt, b, settings)
    want, _ = reference_sgd(ref_model, b, [[0, 1, 2], [3, 4, 5]], lr=0.5, eps_low=0.02, eps_high=0.03)
    for got, ref in zip(opt.seen, want):
        assert_grads_close(got, ref, rtol=2e-4, atol=2e-6)
    # the unscheduled range (0.2 / 0.2) gives another second step: the schedule is what acted
    other, _ = reference_sgd(other_model, b, [[0, 1, 2], [3, 4, 5]], lr=0.5, eps_low=0.2, eps_high=0.2)
    assert any(not torch.allclose(a, o, rtol=1e-3, atol=1e-6) for a, o in zip(opt.seen[1], other[1]))


def test_through_the_recipe_each_step_uses_and_logs_its_range(tmp_path, monkeypatch):
    import rlvr.recipes.rl as rl

    seen = []
    real = rl.update_policy

    def spy(model, optimizer, b, settings, *a, **kw):
        seen.append((settings.clip_low, settings.clip_high))
        return real(model, optimizer, b, settings, *a, **kw)

    monkeypatch.setattr(rl, "update_policy", spy)
    train_recorded(tmp_path, "algorithm.mini_batches=2", "algorithm.clip_schedule=[[2, 0.1, 0.4]]", steps=3)
    assert seen == [(0.2, 0.2), (0.1, 0.4), (0.1, 0.4)]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "clip_high" in r]
    assert [(r["clip_low"], r["clip_high"]) for r in steps] == seen


@pytest.mark.parametrize("value, match", [
    ("[[1, 0.2]]", "each entry is \\[from_step, clip_low, clip_high\\]"),
    ("[[2, 0.2, 0.3], [2, 0.1, 0.3]]", "strictly increasing"),
    ("[[0, 0.2, 0.3]]", "integers >= 1"),
    ("[[1.5, 0.2, 0.3]]", "integers >= 1"),
    ("[[1, 1.5, 0.3]]", "clip_low must be in \\[0, 1\\]"),
    ("[[1, 0.2, -0.1]]", "clip_high >= 0"),
])
def test_bad_schedules_are_refused_at_load(value, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RunConfig, None, ["algorithm.mini_batches=2", f"algorithm.clip_schedule={value}"])


def test_a_schedule_that_cannot_act_is_refused():
    with pytest.raises(ConfigError, match="one optimizer step per rollout batch"):
        load_config(RunConfig, None, ["algorithm.clip_schedule=[[2, 0.2, 0.3]]"])
    with pytest.raises(ConfigError, match="not by cispo"):
        load_config(RunConfig, None, ["algorithm.policy_loss=cispo", "algorithm.mini_batches=2",
                                      "algorithm.clip_schedule=[[2, 0.2, 0.3]]"])
