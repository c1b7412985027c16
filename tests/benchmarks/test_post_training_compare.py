"""benchmarks/post_training_compare.py: every arm is a valid config spending the same sampling budget; the
table's compute and accuracy columns are read from the runs' own files."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import load_benchmark
from rlvr.config import load_config
from rlvr.recipes.config import RunConfig
from rlvr.recipes.pipeline import load_pipeline, plan_stages
from rlvr.recipes.rft_config import load_rft_config
from rlvr.recipes.sft_config import load_sft_config


def _args(pc, **kw):
    return pc.argparse.Namespace(**{"steps": 10, "prompts": 4, "threads": 1, "teacher": "runs/t/final", **kw})


def _overrides(cmd, verb):
    return cmd[cmd.index(verb) + 2:]


def test_each_arm_spends_the_budget_of_the_rl_arm(tmp_path):
    pc = load_benchmark("post_training_compare")
    args = _args(pc)
    budget = 10 * 4 * 8
    for arm in ("rl", "distill"):
        cmd = pc.command(arm, 1, tmp_path, args)
        cfg = load_config(RunConfig, pc.ROOT / cmd[cmd.index("train") + 1], _overrides(cmd, "train"))
        assert cfg.train.steps * cfg.train.prompts_per_step * cfg.rollout.group_size == budget
        assert cfg.train.seed == 1 and cfg.train.output_dir == str(tmp_path / arm / "seed-1")
    assert cfg.distill.teacher == "runs/t/final"
    for arm, rounds in (("rft", 2), ("sft_teacher", 1)):
        cmd = pc.command(arm, 2, tmp_path, args)
        r = load_rft_config(pc.ROOT / "configs/rft_arithmetic.yaml", _overrides(cmd, "rft"))
        assert r.rft.rounds == rounds and r.rft.rounds * r.rft.problems_per_round * r.rft.k == budget
        assert r.rft.sampler == ("runs/t/final" if arm == "sft_teacher" else None) and r.train.seed == 2
    cmd = pc.command("sft", 3, tmp_path, args)
    sft = load_sft_config(pc.ROOT / "configs/sft_arithmetic.yaml", _overrides(cmd, "sft"))
    assert sft.train.steps == 10 and sft.train.seed == 3 and sft.data.source == "task"
    (tmp_path / "sft_rl.yaml").write_text(yaml.safe_dump(pc._pipeline_yaml(10, 4, 1)))
    cmd = pc.command("sft_rl", 0, tmp_path, args)
    stages = plan_stages(load_pipeline(cmd[cmd.index("pipeline") + 1], cmd[cmd.index("pipeline") + 2:]))
    assert [s.config.train.steps for s in stages] == [5, 5]  # the rl arm's 10 optimizer steps
    assert stages[1].config.train.prompts_per_step == 4 and all(s.config.train.seed == 0 for s in stages)


def _write_run(root, arm, seed, per_problem, rows=None, stats=None, wall=None):
    out = root / arm / f"seed-{seed}"
    (out / "02-rl" if arm == "sft_rl" else out).mkdir(parents=True)
    f = (out / "02-rl" if arm == "sft_rl" else out) / "eval_after.json"
    f.write_text(json.dumps({"greedy": {"accuracy": sum(per_problem) / len(per_problem),
                                        "per_problem": per_problem}}))
    if rows is not None:
        (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for i, s in enumerate(stats or [], 1):
        (out / f"round-{i:03d}").mkdir()
        (out / f"round-{i:03d}" / "stats.json").write_text(json.dumps(s))
    if wall is not None:
        (out / "wall.json").write_text(json.dumps({"wall_s": wall}))


def test_the_table_reads_accuracy_and_compute_from_the_run_files(tmp_path):
    pc = load_benchmark("post_training_compare")
    rows = [{"rollouts": 32, "response_length": 10.0}, {"rollouts": 64, "response_length": 20.0}]
    _write_run(tmp_path, "rl", 0, [1.0, 0.0, 0.0, 0.0], rows, wall=100)
    _write_run(tmp_path, "rl", 1, [1.0, 1.0, 0.0, 0.0], rows)
    stats = [{"sampled": 160, "sampled_tokens": 3000}, {"sampled": 160, "sampled_tokens": 2500}]
    _write_run(tmp_path, "rft", 0, [1.0, 1.0, 1.0, 0.0], stats=stats)
    _write_run(tmp_path, "rft", 1, [1.0, 1.0, 1.0, 1.0], stats=stats)
    assert pc.compute("rl", 0, tmp_path) == {"completions": 64, "tokens": 32 * 10 + 32 * 20, "wall_s": 100}
    assert pc.compute("rft", 1, tmp_path) == {"completions": 320, "tokens": 5500, "wall_s": None}
    lines = pc.table(["rl", "rft"], [0, 1], tmp_path)
    assert lines[2].startswith("| rl | 25.0 / 50.0 | 37.5 | (baseline) | 64 (960) / 64 (960) | 100 / - |")
    # rft: 75 / 100, median 87.5, mean difference +50 points over the same problems
    assert lines[3].startswith("| rft | 75.0 / 100.0 | 87.5 | +50.0 [")
    _write_run(tmp_path, "sft_teacher", 0, [0.0, 0.0, 0.0, 1.0])
    assert pc.compute("sft_teacher", 0, tmp_path)["completions"] == 0  # the teacher sampled, not the student
    assert "(no finished seed)" in pc.table(["rl", "distill"], [0, 1], tmp_path)[3]


def test_unknown_arms_and_a_budget_too_small_to_split_are_refused():
    pc = load_benchmark("post_training_compare")
    with pytest.raises(SystemExit):
        pc.main(["--arms", "rl,nope", "--dry-run"])
    with pytest.raises(SystemExit):
        pc.main(["--steps", "1", "--dry-run"])


def test_a_seed_killed_before_its_result_starts_over_and_a_finished_one_is_skipped(tmp_path, monkeypatch):
    pc = load_benchmark("post_training_compare")
    calls = []

    def fake_run(cmd, **kw):  # the real command creates its output directory
        calls.append(cmd)
        out = next(a.split("=", 1)[1] for a in cmd if a.startswith("train.output_dir="))
        pc.Path(out).mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(pc.subprocess, "run", fake_run)
    args = _args(pc)
    pc.run("rft", 0, tmp_path, args)  # a fresh seed: no --overwrite
    (tmp_path / "rft" / "seed-1").mkdir(parents=True)  # a seed killed before its eval_after.json
    pc.run("rft", 1, tmp_path, args)
    _write_run(tmp_path, "rl", 0, [1.0])
    pc.run("rl", 0, tmp_path, args)  # finished: not run again
    assert "--overwrite" not in calls[0] and calls[1][calls[1].index("rft") + 1] == "--overwrite"
    assert len(calls) == 2
