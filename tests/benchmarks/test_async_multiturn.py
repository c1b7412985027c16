"""benchmarks/async_multiturn.py: both arms are valid run configs on the same cores, the runs interleave by seed
with one evaluation of the initial policy, and the report's times and speed-up come from the runs' own files."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import load_benchmark
from rlvr.config import load_config
from rlvr.recipes.config import RunConfig


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("async_multiturn")


def test_both_arms_load_over_the_demo_tools_config(tmp_path, bench):
    arms = bench.arm_overrides(2)
    assert list(arms) == ["sync", "async"]  # the anchor first
    cfgs = {}
    for arm, overrides in arms.items():
        cmd = bench.command(tmp_path, arm, 0, overrides, before=False)
        cfgs[arm] = load_config(RunConfig, bench.ROOT / bench.CONFIG, cmd[cmd.index("--seeds") + 2:])
    sync, asyn = cfgs["sync"], cfgs["async"]
    assert (sync.train.async_steps, sync.train.threads, sync.env.name) == (0, 2, "tools")
    assert (asyn.train.async_steps, asyn.algorithm.is_correction, asyn.train.threads) == (1, "tis", 1)
    assert sync.train.steps == asyn.train.steps and not sync.eval.before_training


def test_a_dry_run_interleaves_the_seeds_and_evaluates_the_initial_policy_once(tmp_path, bench, capsys):
    assert bench.main(["--root", str(tmp_path), "--seeds", "0-1", "--dry-run"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("$ ")]
    assert [("/sync" in ln, "--seeds 0 " in ln) for ln in lines] == [(True, True), (False, True),
                                                                     (True, False), (False, False)]
    assert ["eval.before_training=true" in ln for ln in lines] == [True, False, False, False]
    assert bench.main(["--root", str(tmp_path), "--seeds", "3", "--dry-run", "--override", "eval.num_problems=8"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("$ ")]
    assert len(lines) == 2 and all("eval.num_problems=8" in ln for ln in lines)  # every arm takes it


def _run(d, seed, step_s):
    """A finished run directory of 10 steps of ``step_s`` seconds each, greedy 50% after on 20 problems."""
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"steps": 10, "code": "abc1234"}))
    (d / "eval_after.json").write_text(json.dumps({"greedy": {"accuracy": 0.5, "per_problem": [1.0, 0.0] * 10,
                                                               "ci_low": 0.3, "ci_high": 0.7}}))
    (d / "config.yaml").write_text(yaml.safe_dump({"train": {"seed": seed, "output_dir": str(d)}}))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "step_time": step_s, "gen_time": 1.0,
                                                         "learn_time": 1.0}) + "\n" for s in range(1, 11)))


def test_the_report_sums_the_steps_and_divides_sync_by_async(tmp_path, bench):
    for arm, secs in (("sync", 10.0), ("async", 8.0)):
        for seed in (0, 1):
            _run(tmp_path / arm / f"seed-{seed}", seed, secs * (1 + seed))
    (tmp_path / "sync" / "seed-0" / bench.WALL).write_text(json.dumps({"wall_s": 321.0}))
    text = "\n".join(bench.report(tmp_path, ["sync", "async"], [0, 1]))
    assert "| sync | 0 | 100 | 321 | 10.0 | 50.0 |" in text and "| async | 1 | 160 | – | 16.0 | 50.0 |" in text
    assert "per seed: 0: 1.25x, 1: 1.25x; median 1.25x over 2 seeds" in text
