"""benchmarks/technique_screen.py: every named arm is a valid run config; the driver refuses unknown arms."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import load_benchmark
from rlvr.config import load_config
from rlvr.recipes.config import RunConfig


def fake_orm(root):
    """A directory that passes the outcome RM's load-time check (config.json of a one-label sequence classifier)."""
    (root / "rm").mkdir(parents=True, exist_ok=True)
    (root / "rm" / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"],
                                                         "num_labels": 1}))


@pytest.mark.parametrize("arm", sorted(load_benchmark("technique_screen").ARMS))
def test_every_arm_loads_over_the_demo_config(tmp_path, arm):
    ts = load_benchmark("technique_screen")
    fake_orm(tmp_path)
    for _, seed, cmd in ts.seed_commands(tmp_path, [arm], [3], 20, 10, 1):
        overrides = cmd[cmd.index("train") + 2:]
        cfg = load_config(RunConfig, ts.ROOT / ts.CONFIG, overrides)
        assert cfg.train.steps == 20 and cfg.train.seed == seed == 3
        assert cfg.train.output_dir == str(tmp_path / arm / "seed-3")
        if ts.needs_rm(arm):
            assert cfg.reward.functions[0].params["path"] == str(tmp_path / "rm")


def test_parallel_runs_skip_finished_seeds_and_wait_for_the_reward_model(tmp_path, monkeypatch, capsys):
    """Each (arm, seed) is its own process; a seed with summary.json is not run again; the outcome_rm arm's runs
    start only after ``rlvr rm train`` returned 0, and none of them runs when it failed."""
    ts = load_benchmark("technique_screen")
    jobs = ts.seed_commands(tmp_path, ["default", "outcome_rm"], [0, 1], 10, 10, 1)
    (tmp_path / "default" / "seed-1").mkdir(parents=True)
    (tmp_path / "default" / "seed-1" / "summary.json").write_text("{}")
    order = []

    def fake_run(cmd, log=None):
        out = next((o for o in cmd if o.startswith("train.output_dir=")), "")
        order.append("rm" if cmd[3] == "rm" else out.split("=", 1)[1][len(str(tmp_path)) + 1:])
        return 0 if cmd[3] != "rm" or rm_code == 0 else 1

    monkeypatch.setattr(ts, "run_rlvr", fake_run)
    rm = ts.rm_command(tmp_path, 64, "cuda", 1)
    assert rm[3:6] == ["rm", "train", "kind=orm"] and "device=cuda" in rm and f"output_dir={tmp_path / 'rm'}" in rm
    rm_code = 0
    assert ts.run_parallel(tmp_path, jobs, 1, rm) == 0
    assert "default/seed-1" not in " ".join(order) and order.index("rm") < min(
        i for i, o in enumerate(order) if "outcome_rm" in o)
    assert sorted(order) == sorted(["rm", "default/seed-0", "outcome_rm/seed-0", "outcome_rm/seed-1"])
    order.clear()
    rm_code = 1
    assert ts.run_parallel(tmp_path, jobs, 2, rm) == 2  # the two outcome_rm runs count as failed, never started
    assert sorted(order) == ["default/seed-0", "rm"]
    assert "rlvr rm train failed" in capsys.readouterr().err


def test_a_parallel_dry_run_prints_one_command_per_seed_and_the_rm_first(tmp_path, capsys):
    ts = load_benchmark("technique_screen")
    assert ts.main(["--arms", "default,outcome_rm", "--seeds", "0-1", "--parallel", "4", "--dry-run", "--root",
                    str(tmp_path), "--override", "model.device=cuda", "--rm-device", "cuda"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("$ rlvr.cli rm train kind=orm") and len(lines) == 5
    assert all("model.device=cuda" in ln and "train.seed=" in ln for ln in lines[1:])
    fake_orm(tmp_path)  # the RM is there: not trained again
    assert ts.main(["--arms", "outcome_rm", "--seeds", "0", "--parallel", "1", "--dry-run", "--root",
                    str(tmp_path)]) == 0
    assert "rm train" not in capsys.readouterr().out


def test_runs_keep_the_callers_python_path(tmp_path, monkeypatch):
    """A run sees the project's src first and then the caller's PYTHONPATH (packages installed with --target)."""
    ts = load_benchmark("technique_screen")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    out = tmp_path / "path.txt"
    code = ts.run_rlvr([sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(os.environ['PYTHONPATH'])"],
                   tmp_path / "log.txt")
    assert code == 0
    assert out.read_text().split(":") == [str(ts.ROOT / "src"), str(tmp_path / "site")]


def test_unknown_arms_are_refused_and_a_dry_run_prints_every_command(capsys):
    ts = load_benchmark("technique_screen")
    assert ts.main(["--arms", "default,nope"]) == 2
    assert "unknown arm(s) ['nope']" in capsys.readouterr().err
    assert ts.main(["--arms", "default,maxk", "--dry-run", "--root", "/tmp/rlvr-screen-dry"]) == 0
    out = capsys.readouterr().out
    assert out.count("$ rlvr.cli train configs/arithmetic_grpo.yaml --seeds 0-1") == 2 and "algorithm.advantage=maxk" in out


def test_a_cheaper_screen_shortens_every_arm_alike(tmp_path):
    ts = load_benchmark("technique_screen")
    cmds = ts.commands(tmp_path, ["default", "siren"], "0-1", 10, 10, 1,
                       ("train.prompts_per_step=4", "eval.num_problems=128"))
    for cmd in cmds:
        cfg = load_config(RunConfig, ts.ROOT / ts.CONFIG, cmd[cmd.index("--seeds") + 2:])
        assert cfg.train.prompts_per_step == 4 and cfg.eval.num_problems == 128
