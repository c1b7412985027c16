"""benchmarks/technique_screen.py: every named arm is a valid run config; the driver refuses unknown arms."""

from __future__ import annotations

import pytest

from conftest import load_benchmark
from rlvr.config import load_config
from rlvr.recipes.config import RunConfig


@pytest.mark.parametrize("arm", sorted(load_benchmark("technique_screen").ARMS))
def test_every_arm_loads_over_the_demo_config(tmp_path, arm):
    ts = load_benchmark("technique_screen")
    cmd = ts.commands(tmp_path, [arm], "0-1", 20, 10, 1)[0]
    overrides = cmd[cmd.index("--seeds") + 2:]
    cfg = load_config(RunConfig, ts.ROOT / ts.CONFIG, overrides)
    assert cfg.train.steps == 20 and cfg.train.output_dir == str(tmp_path / arm)


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
