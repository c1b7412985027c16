"""`rlvr train --seeds` end to end on the tiny model: per-seed runs, the summary and its picture, resume per seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import rlvr
from rlvr.cli import main
from rlvr.learner.checkpoint import latest_checkpoint
from rlvr.recipes.rl import TrainingInterrupted
from rlvr.trackers import read_metrics
from rlvr.types import Problem, Verdict

from conftest import make_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOWERCASE = json.dumps([{"type": "lowercase"}])  # the instruction verifier: no capital letter in the answer


def _cli_args(model_dir: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [f"model.name={model_dir}", "task.name=jsonl", f"task.path={data}", "task.num_heldout=6",
            "reward.verifier=instruction", f"train.output_dir={out}", "train.steps=2", "train.prompts_per_step=2",
            "rollout.group_size=4", "rollout.max_new_tokens=4", "train.micro_batch_size=4", "train.lr=5e-2",
            "train.warmup_steps=0", "train.save_every=1", "train.progress=false", "train.threads=1",
            "eval.num_problems=6", "eval.max_new_tokens=4", "eval.every=1", "eval.extra_temperatures=[1.0]", *extra]


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Say {i} quietly.", "answer": LOWERCASE}) + "\n" for i in range(16)))
    return path


def test_cli_seeds_end_to_end(tmp_path, tiny_model_dir, data, capsys):
    out = tmp_path / "sweep"
    assert main(["train", "--seeds", "0-2", *_cli_args(tiny_model_dir, data, out)]) == 0
    printed = capsys.readouterr().out
    for i, s in enumerate((0, 1, 2)):
        assert f"seed {s} [{i + 1}/3]: training in {out / f'seed-{s}'}" in printed
        assert f"seed {s} [{i + 1}/3]: done in " in printed
    assert "greedy after training over 3 seeds: median" in printed
    summary = json.loads((out / "seeds.json").read_text())
    assert summary["finished"] == [0, 1, 2] and summary["metric_keys"] == ["greedy", "T=1.0"]
    finals = []
    for s in (0, 1, 2):
        run = out / f"seed-{s}"
        assert (run / "summary.json").is_file() and latest_checkpoint(run).name == "step-000002"
        assert f"seed: {s}" in (run / "config.yaml").read_text()
        after = json.loads((run / "eval_after.json").read_text())
        rec = summary["runs"][s]
        assert rec["after"] == {k: v["accuracy"] for k, v in after.items()}
        assert rec["per_problem_after"]["greedy"] == after["greedy"]["per_problem"]
        assert [step for step, _ in rec["curve"]] == [0, 1, 2]  # eval_before, eval.every=1, eval_after
        finals.append(after["greedy"]["accuracy"])
    stats = summary["statistics"]["greedy"]["after"]
    assert stats["median"] == pytest.approx(np.median(finals)) and stats["min"] == min(finals)
    assert stats["mean_ci"][0] <= stats["mean"] <= stats["mean_ci"][1]
    # every seed sampled differently: train.seed reached each run
    rows = [[r["reward_mean"] for r in read_metrics(out / f"seed-{s}" / "metrics.jsonl")] +
            [r["response_length"] for r in read_metrics(out / f"seed-{s}" / "metrics.jsonl")] for s in (0, 1, 2)]
    assert rows[0] != rows[1] and rows[1] != rows[2]
    assert (out / "seeds.png").read_bytes()[:8] == PNG_MAGIC
    md = (out / "seeds.md").read_text()
    assert all(f"| {s} | finished | 2 |" in md for s in (0, 1, 2))
    # a second run trains nothing and says so
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.parent.name.startswith("seed-")}
    assert main(["train", "--seeds", "0-2", *_cli_args(tiny_model_dir, data, out)]) == 0
    assert "3 finished earlier, 0 to resume, 0 to train" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes


# ------------------------------------------------------------------ the Python API, resume after an interrupt
def parity_verifier(completion: str, reference: str) -> Verdict:
    """Rewards completions of even length: a signal a random tiny model can learn from."""
    return Verdict(1.0 if len(completion) % 2 == 0 else 0.0, str(len(completion)), "parity")


def _problems(n: int, prefix: str) -> list[Problem]:
    return [Problem(id=f"{prefix}{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1)) for i in range(n)]


OVERRIDES = ["train.steps=3", "train.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
             "train.micro_batch_size=4", "train.lr=1e-2", "train.warmup_steps=0", "train.save_every=1",
             "train.progress=false", "eval.num_problems=4", "eval.max_new_tokens=6", "eval.every=2"]


def _sweep(out: Path, tok, seeds, on_step=None, model=None):
    return rlvr.train(None, f"train.output_dir={out}", *OVERRIDES, seeds=seeds, model=model or make_model(tok),
                      tokenizer=tok, problems=(_problems(10, "t"), _problems(4, "h")), verifier=parity_verifier,
                      on_step=on_step)


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(latest_checkpoint(run) / "model" / "model.safetensors")


def test_resume_after_an_interrupt(tmp_path, tiny_tokenizer, capsys):
    out = tmp_path / "sweep"
    seen = []

    def interrupt_seed_1(row):
        seen.append((row["seed"], row["step"]))
        if row["seed"] == 1 and row["step"] == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of seed 1

    model = make_model(tiny_tokenizer)
    with pytest.raises(TrainingInterrupted):
        _sweep(out, tiny_tokenizer, [0, 1], on_step=interrupt_seed_1, model=model)
    assert seen == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]  # the callback's rows carry their seed
    assert (out / "seed-0" / "summary.json").is_file() and not (out / "seed-1" / "summary.json").exists()
    assert latest_checkpoint(out / "seed-1").name == "step-000002"
    partial = json.loads((out / "seeds.json").read_text())  # written on the way out
    assert partial["finished"] == [0] and [r["status"] for r in partial["runs"]] == ["finished", "unfinished"]
    assert "seed 1 [2/2]: interrupted" in capsys.readouterr().out
    # the injected model is copied for every seed: both started from its weights, which stay untouched
    before0 = json.loads((out / "seed-0" / "eval_before.json").read_text())
    before1 = json.loads((out / "seed-1" / "eval_before.json").read_text())
    assert before0 == before1
    fresh = make_model(tiny_tokenizer)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))

    mtimes = {p: p.stat().st_mtime_ns for p in (out / "seed-0").rglob("*") if p.is_file()}
    seen.clear()
    summary = _sweep(out, tiny_tokenizer, [0, 1], on_step=lambda row: seen.append((row["seed"], row["step"])))
    printed = capsys.readouterr().out
    assert "seed 0 [1/2]: finished earlier, not trained again" in printed
    assert f"seed 1 [2/2]: resuming from step-000002 in {out / 'seed-1'}" in printed
    assert seen == [(1, 3)]  # seed 0 not retrained, seed 1 continued after its checkpoint
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # seed 0's files untouched
    assert [r["step"] for r in read_metrics(out / "seed-1" / "metrics.jsonl")] == [1, 2, 3]
    assert summary["finished"] == [0, 1]
    # the resumed seed ends where an uninterrupted run of it ends
    _sweep(tmp_path / "ref", tiny_tokenizer, [1])
    a, b = _weights(out / "seed-1"), _weights(tmp_path / "ref" / "seed-1")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
