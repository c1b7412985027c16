"""benchmarks/remedy_screen.py on two hand-made seeds sweeps: per-seed numbers, medians, the changed keys and the
comparison with the baseline come from the run directories' own files."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import load_benchmark


@pytest.fixture(scope="module")
def scr():
    return load_benchmark("remedy_screen")


def _write_run(d, seed, curve, after_greedy, after_t1, schedule="constant", n=20):
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"steps": 10, "code": "abc1234"}))
    k = int(round(after_greedy * n))
    per = [1.0] * k + [0.0] * (n - k)
    kt = int(round(after_t1 * n))
    (d / "eval_before.json").write_text(json.dumps({
        "greedy": {"accuracy": 0.2, "per_problem": [1.0] * 4 + [0.0] * 16, "ci_low": 0.1, "ci_high": 0.3},
        "T=1.0": {"accuracy": 0.05, "per_problem": [1.0] + [0.0] * 19, "ci_low": 0.0, "ci_high": 0.2}}))
    (d / "eval_after.json").write_text(json.dumps({
        "greedy": {"accuracy": after_greedy, "per_problem": per, "ci_low": 0.0, "ci_high": 1.0},
        "T=1.0": {"accuracy": after_t1, "per_problem": [1.0] * kt + [0.0] * (n - kt), "ci_low": 0.0, "ci_high": 1.0}}))
    (d / "heldout.jsonl").write_text("".join(json.dumps({"step": 5 * (i + 1), "heldout_accuracy": a}) + "\n"
                                             for i, a in enumerate(curve)))
    rows = [{"step": s, "entropy": 1.0 if s <= 5 else 0.5, "step_time": 10.0, "gen_time": 4.0, "learn_time": 5.0,
             "learner_tokens": 100} for s in range(1, 11)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "config.yaml").write_text(yaml.safe_dump({"train": {"seed": seed, "schedule": schedule,
                                                             "output_dir": str(d)}}))


def test_screen_reads_the_sweeps(tmp_path, scr):
    base, arm = tmp_path / "baseline", tmp_path / "cosine"
    _write_run(base / "seed-0", 0, [0.5, 0.4], 0.40, 0.30)
    _write_run(base / "seed-1", 1, [0.5, 0.6], 0.60, 0.50)
    _write_run(arm / "seed-0", 0, [0.5, 0.55], 0.55, 0.50, schedule="cosine")
    _write_run(arm / "seed-1", 1, [0.6, 0.7], 0.70, 0.60, schedule="cosine")
    res = scr.screen([base, arm], [0, 1], n_resamples=200)
    b, a = res["arms"]
    assert b["name"] == "baseline" and b["changes"] == {} and "vs_baseline" not in b
    assert a["changes"] == {"train.schedule": ("constant", "cosine")}  # output_dir and seed are not changes
    assert b["median"] == {"greedy": pytest.approx(0.5), "T=1.0": pytest.approx(0.4)}
    assert a["median"]["greedy"] == pytest.approx(0.625)
    s0 = b["per_seed"][0]
    # curve: before 0.2, then 0.5, 0.4, and the final 0.4 at step 10 (replacing the heldout row of step 10)
    assert s0["largest_drop"] == pytest.approx(0.1)
    assert s0["entropy_last"] == pytest.approx((5 * 1.0 + 5 * 0.5) / 10)
    assert (s0["step_s"], s0["gen_s"], s0["learn_s"], s0["learner_tokens"]) == (10.0, 4.0, 5.0, 1000)
    assert a["per_seed"][1]["largest_drop"] == 0.0
    vs = a["vs_baseline"]["greedy"]
    assert vs["diff_mean"] == pytest.approx(0.125)
    assert vs["p_value"] >= 0.1  # 2 + 2 seeds cannot resolve anything
    assert s0["curve"] == [[0, 0.2], [5, 0.5], [10, 0.4]]
    png = tmp_path / "screen.png"
    scr.plot_screen(res, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    lines = scr.format_screen(res)
    assert lines[2] == "| baseline | 0 | 40.0 | 30.0 | 10.0 | 0.75 | 10.0 (4.0 + 5.0) |"
    assert any(ln.startswith("| cosine | 2 | 62.5 | 55.0 | +12.5 [") and "`train.schedule=cosine`" in ln
               for ln in lines)


def test_largest_drop(scr):
    assert scr.largest_drop([0.2, 0.5, 0.3, 0.6, 0.55]) == pytest.approx(0.2)
    assert scr.largest_drop([0.1, 0.2]) == 0.0 and scr.largest_drop([]) == 0.0


def test_an_unfinished_seed_is_listed_not_counted(tmp_path, scr):
    base = tmp_path / "baseline"
    _write_run(base / "seed-0", 0, [0.5], 0.5, 0.4)
    (base / "seed-1").mkdir()
    (base / "seed-1" / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    res = scr.screen([base], None, n_resamples=50)
    arm = res["arms"][0]
    assert arm["finished"] == 1 and arm["per_seed"][1] == {"seed": 1, "status": "unfinished"}
    assert any("| baseline | 1 | unfinished |" in ln for ln in scr.format_screen(res))


def test_an_option_added_after_an_earlier_run_and_left_at_its_default_is_no_change():
    rs = load_benchmark("remedy_screen")
    old = {"algorithm": {"advantage": "grpo"}, "train": {"lr": 1e-5}}
    new = {"algorithm": {"advantage": "grpo", "clip_schedule": []}, "train": {"lr": 1e-5, "update_fraction": 0.01}}
    assert rs.real_changes(old, new) == {"train.update_fraction": (None, 0.01)}  # only the one not at its default


def test_a_key_only_some_seeds_were_evaluated_at_is_left_out(tmp_path, scr):
    """One seed evaluated at T = 1 as well, the others greedy only: the screen reports the shared key (it raised)."""
    base, arm = tmp_path / "sync", tmp_path / "async"
    for root in (base, arm):
        for seed in (0, 1):
            _write_run(root / f"seed-{seed}", seed, [0.5], 0.5, 0.4)
    for d in (base / "seed-1", arm / "seed-1"):
        after = json.loads((d / "eval_after.json").read_text())
        (d / "eval_after.json").write_text(json.dumps({"greedy": after["greedy"]}))
    res = scr.screen([base, arm], [0, 1], n_resamples=100)
    assert all(list(a["median"]) == ["greedy"] for a in res["arms"])
    assert list(res["arms"][1]["vs_baseline"]) == ["greedy"]
