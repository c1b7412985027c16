"""benchmarks/mixture_vs_alone.py: each arm is the shipped mixture config with one task's weight kept (all of them
for the mixture), every arm loads as a valid run config, and the table reads each task's held-out accuracy."""

from __future__ import annotations

import json

from conftest import load_benchmark
from rlvr.config import load_config
from rlvr.recipes.config import RunConfig


def test_each_alone_arm_trains_one_task_and_evaluates_all(tmp_path):
    mv = load_benchmark("mixture_vs_alone")
    cmds = mv.commands(tmp_path, "0-1", 8, 4, 1)
    assert [a for a, _, _ in cmds] == ["mixture", "alone-arithmetic", "alone-code", "alone-chain_sum"]
    for arm, path, cmd in cmds:
        cfg = load_config(RunConfig, path, cmd[cmd.index("--seeds") + 2:])
        weights = {t.name: t.weight for t in cfg.mixture.tasks}
        assert set(weights) == {"arithmetic", "code", "chain_sum"}  # every task's held-out set stays
        if arm == "mixture":
            assert weights == {"arithmetic": 1.0, "code": 1.0, "chain_sum": 1.0}
        else:
            assert {k for k, w in weights.items() if w > 0} == {arm.removeprefix("alone-")}
        assert cfg.train.steps == 8 and cfg.eval.every == 4 and cfg.train.output_dir == str(tmp_path / arm)


def test_the_table_reads_the_last_evaluation_of_each_task(tmp_path):
    mv = load_benchmark("mixture_vs_alone")
    for arm, accs in {"mixture": [0.5, 0.25, 0.75], "alone-arithmetic": [0.625, 0.125, 0.5],
                      "alone-code": [0.25, 0.375, 0.5], "alone-chain_sum": [0.25, 0.125, 0.875]}.items():
        run = tmp_path / arm / "seed-0"
        run.mkdir(parents=True)
        rows = [{"step": 4, "heldout_accuracy/arithmetic": 0.0},
                {"step": 8, **{f"heldout_accuracy/{k}": v for k, v in zip(["arithmetic", "code", "chain_sum"], accs)}}]
        (run / "heldout.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        (run / "summary.json").write_text("{}")
    lines = mv.table(tmp_path, [0])
    assert "| mixture | 0 | 50.0 | 25.0 | 75.0 |" in lines
    assert "| alone-code | 0 | 25.0 | 37.5 | 50.0 |" in lines
    # per task: the mixture against the arm that trained on that task alone (64 held-out problems each)
    arith = next(ln for ln in lines if ln.startswith("| arithmetic |"))
    assert "| 50.0 [" in arith and "| 62.5 [" in arith and "| -12.5 |" in arith
    chain = next(ln for ln in lines if ln.startswith("| chain_sum |"))
    assert "| -12.5 |" in chain
    code = next(ln for ln in lines if ln.startswith("| code |"))
    assert "| -12.5 |" in code
    # a run without summary.json (unfinished) is not read
    (tmp_path / "mixture" / "seed-0" / "summary.json").unlink()
    assert "| mixture | 0 | – | – | – |" in mv.table(tmp_path, [0])


def test_arms_selects_which_arms_run(tmp_path, capsys):
    mv = load_benchmark("mixture_vs_alone")
    assert mv.main(["--root", str(tmp_path), "--arms", "alone-code", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "alone-code.yaml" in out[0] and "--seeds 0" in out[0]
