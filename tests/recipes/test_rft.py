"""Rejection-sampling fine-tuning: only accepted samples are kept (selection rules by hand, and a real round on
the tiny model with verifiers whose outcomes the test controls); a finished round is skipped on resume."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.recipes.rft import run_rft, select_samples
from rlvr.recipes.rft_config import load_rft_config
from rlvr.types import Problem, Sample, Verdict


def _cfg(tmp_path, *extra):
    return load_rft_config(None, [f"train.output_dir={tmp_path / 'rft'}", "rft.rounds=1", "rft.k=4",
                                  "rft.problems_per_round=6", "rft.max_new_tokens=6", "rft.drop_truncated=false",
                                  "rft.max_per_problem=0", "train.threads=1", "train.progress=false",
                                  "train.batch_size=4", "train.lr=1e-2", "task.params.num_train=30",
                                  "task.num_heldout=4", "eval.before_training=false", "eval.after_training=false",
                                  *extra])


def _sample(pid, text, i=0, finish="stop"):
    return Sample(pid, [1], [5, 2], [0.0, 0.0], text, finish, group_index=i)


def _v(ok):
    return Verdict(1.0 if ok else 0.0, None, "match" if ok else "mismatch")


def test_selection_keeps_accepted_deduped_and_capped(tmp_path):
    problems = {"a": Problem("a", prompt="A?", answer="1"), "b": Problem("b", prompt="B?", answer="2")}
    samples = [_sample("a", "x", 0), _sample("a", "x", 1), _sample("a", "y", 2), _sample("a", "z", 3),
               _sample("b", "p", 0), _sample("b", "q", 1, finish="length")]
    verdicts = [_v(True), _v(True), _v(False), _v(True), _v(False), _v(True)]
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.7, 0.0, 1.0])
    rows, st = select_samples(problems, samples, verdicts, rewards, _cfg(tmp_path, "rft.drop_truncated=true"))
    # accepted: x, x, z, q; the second x is a duplicate; q is truncated
    assert [(r["problem_id"], r["completion"]) for r in rows] == [("a", "x"), ("a", "z")]
    assert all(r["correct"] for r in rows) and rows[0]["prompt"] == "A?"
    assert st["accepted"] == 4 and st["kept"] == 2 and st["kept_fraction"] == pytest.approx(2 / 6)
    assert st["duplicates"] == 1 and st["dropped_truncated_or_empty"] == 1
    assert st["sampled_tokens"] == 12  # 6 samples of 2 completion tokens: the round's sampling compute
    capped, _ = select_samples(problems, samples, verdicts, rewards, _cfg(tmp_path, "rft.max_per_problem=1"))
    assert [r["completion"] for r in capped] == ["x", "q"]
    by_reward, _ = select_samples(problems, samples, verdicts, rewards, _cfg(tmp_path, "rft.min_reward=0.9"))
    assert [r["completion"] for r in by_reward] == ["x", "q"]  # z's reward 0.7 is below the bar
    everything, st = select_samples(problems, samples, verdicts, rewards, _cfg(tmp_path, "rft.keep=all"))
    assert [r["completion"] for r in everything] == ["x", "y", "z", "p", "q"] and st["kept"] == 5


@pytest.mark.parametrize("verdict,kept_some", [("even", True), ("never", False)])
def test_a_round_keeps_only_what_the_verifier_accepts(tmp_path, tiny_model_dir, verdict, kept_some):
    """The tiny model's random completions scored by a verifier the test controls: one that accepts completions
    of even length (about half), one that accepts none (the numeric verifier on arithmetic would too, but by
    chance). Every kept row is one the verifier accepted; with none accepted nothing is trained."""
    calls = []

    def verifier(text, answer):
        ok = verdict == "even" and len(text) % 2 == 0
        calls.append((text, ok))
        return Verdict(1.0 if ok else 0.0, text, "ok" if ok else "no")

    s = run_rft(_cfg(tmp_path, f"model.name={tiny_model_dir}"), verifier=verifier)
    rows = [json.loads(x) for x in (tmp_path / "rft" / "round-001" / "samples.jsonl").read_text().splitlines()]
    stats = s["rounds"][0]["stats"]
    assert stats["sampled"] == 24 == len(calls)
    assert stats["accepted"] == sum(ok for _, ok in calls)
    assert all(len(r["completion"]) % 2 == 0 and r["correct"] for r in rows)
    assert {r["completion"] for r in rows} <= {t for t, ok in calls if ok}
    if kept_some:
        assert 0 < len(rows) < 24 and "sft" in s["rounds"][0]
        assert s["final_model"] == str(tmp_path / "rft" / "round-001" / "sft" / "final")
    else:
        assert rows == [] and "sft" not in s["rounds"][0] and s["final_model"] == str(tiny_model_dir)
    metrics = [json.loads(x) for x in (tmp_path / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["kept_fraction"] == pytest.approx(len(rows) / 24)


def test_a_finished_round_is_skipped_on_resume(tmp_path, tiny_model_dir):
    accept = lambda text, answer: Verdict(1.0, text, "ok")  # noqa: E731
    first = run_rft(_cfg(tmp_path, f"model.name={tiny_model_dir}"), verifier=accept)
    r1 = tmp_path / "rft" / "round-001" / "samples.jsonl"
    before = r1.read_bytes(), r1.stat().st_mtime_ns
    s = run_rft(_cfg(tmp_path, f"model.name={tiny_model_dir}", "rft.rounds=2", "train.resume=true",
                     "train.resume_changes=[rft.rounds]"), verifier=accept)
    assert (r1.read_bytes(), r1.stat().st_mtime_ns) == before  # not sampled again
    assert [r["round"] for r in s["rounds"]] == [1, 2]
    assert s["rounds"][1]["model_in"] == first["final_model"]  # round 2 samples from round 1's model
    assert s["final_model"] == str(tmp_path / "rft" / "round-002" / "sft" / "final")
    rows = [json.loads(x) for x in (tmp_path / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
