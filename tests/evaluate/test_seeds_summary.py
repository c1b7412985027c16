"""Seed sweeps without training: the spread statistics and the bootstrap against hand-computed values, the summary
of run directories (seeds.json / seeds.md / seeds.png), and `rlvr compare` on two sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlvr.config import load_config, save_config
from rlvr.evaluate.compare import compare_seed_summaries, format_seed_comparisons, seed_scores
from rlvr.evaluate.seeds import find_seed_dirs, format_seeds_markdown, read_seed_run, summarize_seeds, \
    write_seeds_summary
from rlvr.evaluate.stats import permutation_test, spread_summary
from rlvr.recipes.config import RunConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_run(root: Path, seed: int, before: dict, after: dict | None, curve: dict[int, float], steps: int = 10,
             overrides: tuple = ()) -> Path:
    """A seed's run directory as `rlvr train` writes it: before/after per-problem scores given per key."""
    d = root / f"seed-{seed}"
    d.mkdir(parents=True, exist_ok=True)
    cfg = load_config(RunConfig, None, [f"train.seed={seed}", f"train.output_dir={d}", f"train.steps={steps}",
                                       "eval.every=5", "eval.extra_temperatures=[1.0]", *overrides])
    save_config(cfg, d / "config.yaml")

    def ev(per):
        return {"n": len(per), "accuracy": float(np.mean(per)), "ci_low": 0.0, "ci_high": 1.0, "per_problem": per}

    (d / "eval_before.json").write_text(json.dumps({k: ev(v) for k, v in before.items()}))
    (d / "heldout.jsonl").write_text("".join(json.dumps({"step": s, "heldout_accuracy": a}) + "\n"
                                             for s, a in curve.items()))
    done = after is not None
    last = steps if done else max(curve, default=0)
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, last + 1)))
    if done:
        (d / "eval_after.json").write_text(json.dumps({k: ev(v) for k, v in after.items()}))
        (d / "summary.json").write_text(json.dumps({"steps": steps, "code": "abc1234"}))
    return d


# ----------------------------------------------------------------------------------------- statistics
def test_spread_summary_hand_computed():
    s = spread_summary([0.1, 0.5, 0.3, 0.7, 0.2])  # sorted 0.1 0.2 0.3 0.5 0.7: positions p * (n - 1)
    assert s == pytest.approx({"n": 5, "mean": 0.36, "median": 0.3, "q1": 0.2, "q3": 0.5, "iqr": 0.3, "min": 0.1,
                               "max": 0.7})
    s = spread_summary([0.8, 0.2, 0.6, 0.4])  # q1 at position 0.75: 0.2 + 0.75 * 0.2; q3 at 2.25: 0.6 + 0.25 * 0.2
    assert (s["median"], s["q1"], s["q3"], s["iqr"]) == pytest.approx((0.5, 0.35, 0.65, 0.3))
    with pytest.raises(ValueError):
        spread_summary([])


def test_permutation_test_hand_computed():
    # a=[0,1], b=[2,3]: the 6 ways to pick A's two values from {0,1,2,3} give mean(B)-mean(A) = 2, 1, 0, 0, -1, -2
    r = permutation_test([0, 1], [2, 3])
    assert (r["diff"], r["splits"], r["exact"]) == (2.0, 6, True)
    assert r["p_value"] == pytest.approx(2 / 6) and r["min_p"] == pytest.approx(2 / 6)
    # 5 + 5 completely separated seeds: only the observed split and its mirror are as extreme: 2 / C(10, 5)
    r = permutation_test([0.30, 0.31, 0.28, 0.33, 0.29], [0.80, 0.79, 0.82, 0.78, 0.81])
    assert r["p_value"] == pytest.approx(2 / 252) and r["min_p"] == pytest.approx(2 / 252)
    assert permutation_test([1, 2, 3], [4, 5, 6])["min_p"] == pytest.approx(0.1)  # 3 + 3 seeds: 2 / 20
    assert permutation_test([0.5, 0.5], [0.5, 0.5])["p_value"] == 1.0  # no difference at all
    # unequal sizes, one extreme split only: 1 / C(5, 2)
    assert permutation_test([0, 0.1], [1, 1.1, 1.2])["p_value"] == pytest.approx(1 / 10)


def test_permutation_test_random_splits_agree_with_the_exact_test():
    a, b = [0.1, 0.4, 0.35, 0.2, 0.5, 0.3], [0.45, 0.6, 0.3, 0.55, 0.5, 0.7]
    exact = permutation_test(a, b)
    drawn = permutation_test(a, b, exact_limit=0, n_resamples=40_000, seed=3)
    assert exact["exact"] and not drawn["exact"]
    assert drawn["p_value"] == pytest.approx(exact["p_value"], abs=0.01)


def _summary_of(tmp_path, per_seed: list[list[float]]) -> dict:
    for s, per in enumerate(per_seed):
        fake_run(tmp_path, s, {"greedy": per}, {"greedy": per}, {})
    return summarize_seeds(tmp_path, n_resamples=20_000)


def test_bootstrap_interval_over_seeds_hand_computed(tmp_path):
    # 4 seeds that score 0, 0, 0, 1 on every problem: problem draws change nothing, the mean of 4 drawn seeds is
    # k/4 with k ~ Binomial(4, 1/4): P(k >= 3) = 13/256 = 0.051 > 0.025 >= P(k = 4) = 1/256 -> upper bound 0.75;
    # P(k = 0) = 81/256 -> lower bound 0.  The median (mean of the middle two) is 1 once k >= 3 -> upper bound 1.
    s = _summary_of(tmp_path, [[0.0] * 6, [0.0] * 6, [0.0] * 6, [1.0] * 6])["statistics"]["greedy"]["after"]
    assert s["mean"] == pytest.approx(0.25) and s["median"] == 0.0
    assert s["mean_ci"] == pytest.approx([0.0, 0.75]) and s["median_ci"] == pytest.approx([0.0, 1.0])


def test_bootstrap_interval_over_problems_hand_computed(tmp_path):
    # one seed right on 3 of 4 problems: k ~ Binomial(4, 3/4) drawn problems right; P(k <= 1) = 13/256 > 0.025
    # >= P(k = 0) = 1/256 -> lower bound 1/4; P(k = 4) = 81/256 -> upper bound 1
    s = _summary_of(tmp_path, [[1.0, 1.0, 1.0, 0.0]])["statistics"]["greedy"]["after"]
    assert s["mean_ci"] == pytest.approx([0.25, 1.0]) and s["problems"] == 4


def test_bootstrap_draws_one_problem_set_for_all_seeds(tmp_path):
    # two seeds with the same per-problem scores: with one shared problem draw they always agree, so every
    # replicate's mean equals its median; separate draws per seed would make them differ
    per = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    s = _summary_of(tmp_path, [per, per])["statistics"]["greedy"]["after"]
    assert s["mean_ci"] == pytest.approx(s["median_ci"])
    assert s["mean_ci"][0] < 0.5 < s["mean_ci"][1]


# ----------------------------------------------------------------------------------------- summary of run dirs
def test_summary_of_run_directories(tmp_path):
    fake_run(tmp_path, 0, {"greedy": [0, 1, 0, 0], "T=1.0": [0, 0, 0, 0]}, {"greedy": [1, 1, 1, 0], "T=1.0": [1, 1, 0, 0]},
             {5: 0.5, 10: 0.6})
    fake_run(tmp_path, 1, {"greedy": [0, 1, 0, 0], "T=1.0": [0, 0, 0, 0]}, {"greedy": [0, 1, 0, 0], "T=1.0": [0, 0, 0, 1]},
             {5: 0.25})
    fake_run(tmp_path, 3, {"greedy": [0, 1, 0, 0], "T=1.0": [0, 0, 0, 0]}, {"greedy": [1, 1, 1, 1], "T=1.0": [1, 1, 1, 0]},
             {5: 1.0, 10: 1.0})
    fake_run(tmp_path, 7, {"greedy": [0, 1, 0, 0], "T=1.0": [0, 0, 0, 0]}, None, {5: 0.5})  # killed at step 5
    assert find_seed_dirs(tmp_path) == [0, 1, 3, 7]
    run = read_seed_run(tmp_path, 0)
    assert run.status == "finished" and run.steps == 10 and run.code == "abc1234"
    assert run.curve == [(0, 0.25), (5, 0.5), (10, 0.75)]  # step 0: eval_before; step 10: eval_after wins
    assert read_seed_run(tmp_path, 7).status == "unfinished" and read_seed_run(tmp_path, 7).steps == 5
    assert read_seed_run(tmp_path, 9).status == "missing"

    s = write_seeds_summary(tmp_path, [0, 1, 3, 7, 9], n_resamples=500)
    assert s["finished"] == [0, 1, 3] and s["metric_keys"] == ["greedy", "T=1.0"] and s["primary"] == "greedy"
    assert [r["status"] for r in s["runs"]] == ["finished", "finished", "finished", "unfinished", "missing"]
    g = s["statistics"]["greedy"]
    # finished seeds only: greedy after 0.75, 0.25, 1.0; before 0.25 each
    assert g["after"]["median"] == pytest.approx(0.75) and g["after"]["mean"] == pytest.approx(2 / 3)
    assert (g["after"]["min"], g["after"]["max"]) == pytest.approx((0.25, 1.0))
    assert (g["after"]["q1"], g["after"]["q3"]) == pytest.approx((0.5, 0.875))
    assert g["gain"]["median"] == pytest.approx(0.5)
    assert s["statistics"]["T=1.0"]["after"]["median"] == pytest.approx(0.5)  # 0.5, 0.25, 0.75
    lo, hi = g["after"]["mean_ci"]
    assert 0.0 <= lo < 2 / 3 < hi <= 1.0  # problems resampled too: below the worst seed is possible
    assert s["runs"][0]["per_problem_after"]["greedy"] == [1, 1, 1, 0]
    assert s["config"]["train"]["steps"] == 10 and s["config_differences"] == {}
    assert s["run_codes"] == ["abc1234"]
    # the files
    assert json.loads(Path(s["paths"]["json"]).read_text())["finished"] == [0, 1, 3]
    md = Path(s["paths"]["markdown"]).read_text()
    assert "| 0 | finished | 10 | 25.0% | 75.0% | 0.0% | 50.0% |" in md
    assert "| 7 | unfinished | 5 | 25.0% | – |" in md and "| 9 | missing | 0 |" in md
    assert "| median | 75.0% [" in md
    assert Path(s["paths"]["plot"]).read_bytes()[:8] == PNG_MAGIC


def test_summary_flags_config_differences_between_seeds(tmp_path):
    fake_run(tmp_path, 0, {"greedy": [0, 1]}, {"greedy": [1, 1]}, {})
    fake_run(tmp_path, 1, {"greedy": [0, 1]}, {"greedy": [1, 0]}, {}, overrides=("model.matmul=onednn",))
    s = summarize_seeds(tmp_path)
    assert s["config_differences"] == {"model.matmul": {"0": "aten", "1": "onednn"}}
    assert "`model.matmul`: seed 0: aten, seed 1: onednn" in format_seeds_markdown(s)


def test_summary_of_a_directory_without_seeds_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no seed-<s> run directories"):
        summarize_seeds(tmp_path)


def test_seeds_summarize_cli_writes_elsewhere_and_leaves_the_runs_alone(tmp_path, capsys):
    from rlvr.cli import main

    runs = tmp_path / "runs"
    fake_run(runs, 0, {"greedy": [0, 1]}, {"greedy": [1, 1]}, {5: 0.5})
    fake_run(runs, 1, {"greedy": [0, 1]}, {"greedy": [1, 0]}, {5: 0.5})
    before = sorted(p.name for p in runs.iterdir())
    assert main(["seeds", "summarize", str(runs), "--out", str(tmp_path / "out"), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | finished | 10 | 50.0% | 50.0% |" in out and "written:" in out
    assert sorted(p.name for p in runs.iterdir()) == before  # nothing written among the runs
    assert (tmp_path / "out" / "seeds.png").read_bytes()[:8] == PNG_MAGIC
    assert json.loads((tmp_path / "out" / "seeds.json").read_text())["finished"] == [0, 1]
    assert main(["seeds", "summarize", str(tmp_path / "nothing")]) == 2
    assert main(["seeds", "summarize", str(runs), "--seeds", "1,1"]) == 2
    assert "rlvr: error: --seeds: seed 1 listed more than once" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- compare
def sweep(accuracies: list[float], problems: int = 200, seed: int = 0, config: dict | None = None) -> dict:
    """A seeds summary whose seed s is right on a random accuracies[s] share of `problems` problems."""
    rng = np.random.default_rng(seed)
    runs = []
    for s, acc in enumerate(accuracies):
        per = np.zeros(problems)
        per[rng.choice(problems, int(round(acc * problems)), replace=False)] = 1.0
        runs.append({"seed": s, "status": "finished", "after": {"greedy": float(per.mean())},
                     "per_problem_after": {"greedy": per.tolist()}})
    return {"kind": "rlvr.seeds", "metric_keys": ["greedy"], "config": config or {"task": {"seed": 0}},
            "run_codes": ["abc1234"], "runs": runs}


def test_compare_clearly_better_is_resolved():
    a = sweep([0.30, 0.32, 0.28, 0.35, 0.31], seed=1)
    b = sweep([0.80, 0.78, 0.83, 0.79, 0.81], seed=2)
    (c,) = compare_seed_summaries(a, b, name_a="base", name_b="new")
    assert c.resolved and not c.reasons
    assert c.diff_mean == pytest.approx(np.mean([0.80, 0.78, 0.83, 0.79, 0.81]) - np.mean([0.30, 0.32, 0.28, 0.35, 0.31]))
    assert c.diff_median == pytest.approx(0.80 - 0.31)
    assert c.diff_mean_ci[0] > 0.4 and c.diff_median_ci[0] > 0.4
    assert c.p_value == pytest.approx(2 / 252) and c.poi == 1.0 and c.paired
    assert c.verdict.startswith("greedy: new beats base beyond seed noise")
    (r,) = compare_seed_summaries(b, a, name_a="new", name_b="base")  # the other way round: A wins
    assert r.resolved and r.verdict.startswith("greedy: new beats base beyond seed noise") and r.diff_mean < 0


def test_compare_same_distribution_is_not_resolved():
    accs = [0.10, 0.55, 0.70, 0.62, 0.73, 0.45, 0.30, 0.66, 0.58, 0.20]  # one spread, dealt to two arms
    a, b = sweep(accs[::2], seed=3), sweep(accs[1::2], seed=4)
    (c,) = compare_seed_summaries(a, b)
    assert not c.resolved
    assert c.diff_mean_ci[0] < 0 < c.diff_mean_ci[1]
    assert c.p_value > 0.3
    assert c.verdict.startswith("greedy: not resolved (the 95% interval of the mean difference covers 0")


def test_compare_three_seeds_each_cannot_be_resolved_by_the_permutation_test():
    a, b = sweep([0.30, 0.32, 0.28], seed=5), sweep([0.80, 0.78, 0.83], seed=6)
    (c,) = compare_seed_summaries(a, b)
    assert c.diff_mean_ci[0] > 0  # the bootstrap alone would call it
    assert not c.resolved and c.min_p == pytest.approx(0.1)
    assert "cannot reach p < 0.05 (smallest possible p = 0.1): add seeds" in c.verdict


def test_compare_unpaired_when_the_heldout_sets_differ():
    a = sweep([0.3, 0.4, 0.5, 0.35], seed=7)
    b = sweep([0.3, 0.4, 0.5, 0.35], seed=8, config={"task": {"seed": 1}})
    (c,) = compare_seed_summaries(a, b)
    assert not c.paired
    assert "task.seed (0 -> 1)" in format_seed_comparisons([c], a, b)


def test_seed_scores_skip_unfinished_seeds():
    s = sweep([0.5, 0.25], problems=4)
    s["runs"].append({"seed": 9, "status": "unfinished", "after": {}, "per_problem_after": {}})
    seeds, acc, per = seed_scores(s, "greedy")
    assert seeds == [0, 1] and acc.tolist() == [0.5, 0.25] and per.shape == (2, 4)


def test_cli_compare_two_sweep_directories(tmp_path, capsys):
    from rlvr.cli import main

    rng = np.random.default_rng(0)
    for name, accs in (("base", [0.2, 0.25, 0.3, 0.22, 0.27]), ("new", [0.8, 0.85, 0.75, 0.82, 0.78])):
        for s, acc in enumerate(accs):
            per = (rng.random(40) < acc).astype(float).tolist()
            fake_run(tmp_path / name, s, {"greedy": per}, {"greedy": per}, {})
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "new"), "--resamples", "500",
                 "--output", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "base (5 seeds) vs new (5 seeds)" in out and "greedy: new beats base beyond seed noise" in out
    (c,) = json.loads(out_json.read_text())["comparisons"]
    assert c["resolved"] and c["p_value"] == pytest.approx(2 / 252)
    write_seeds_summary(tmp_path / "base", plot=False)  # a seeds.json works as well as its directory
    assert main(["compare", f"A={tmp_path / 'base' / 'seeds.json'}", f"B={tmp_path / 'new'}"]) == 0
    assert "greedy: B beats A beyond seed noise" in capsys.readouterr().out
    # a seed sweep against a results file is refused
    (tmp_path / "r.json").write_text(json.dumps({"task": "t", "scores": [1.0, 0.0]}))
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "r.json")]) == 2
    assert "compare seed sweeps with seed sweeps" in capsys.readouterr().err


def test_config_differences_list_a_mapping_by_its_keys():
    """A field unset on one side and a mapping on the other is reported by the mapping's keys, not also as the
    mapping itself against None."""
    from rlvr.evaluate.compare import config_differences

    a = {"algorithm": {"policy_loss": "ppo_clip", "policy_loss_params": None}, "train": {"lr": 1e-5}}
    b = {"algorithm": {"policy_loss": "clip_cov", "policy_loss_params": {"ratio": 0.02, "cov_low": 1}},
         "train": {"lr": 1e-5}}
    assert config_differences(a, b) == {"algorithm.policy_loss": ("ppo_clip", "clip_cov"),
                                        "algorithm.policy_loss_params.cov_low": (None, 1),
                                        "algorithm.policy_loss_params.ratio": (None, 0.02)}
    assert config_differences(a, a) == {}
    # keys that alter nothing trained are not differences: where the run went, its seed, how it was started
    c = {"train": {"lr": 1e-5, "seed": 3, "output_dir": "x", "resume": True, "overwrite": True, "progress": False}}
    assert config_differences({"train": {"lr": 1e-5}}, c) == {}


def test_the_comparison_says_whether_its_permutation_test_was_exact_or_drawn():
    """5 + 5 seeds: all 252 splits enumerated; 16 + 16: 601,080,390 splits, so 100,000 random ones are drawn and the
    table's footnote must not call that p exact (it did)."""
    a, b = sweep([0.30, 0.32, 0.28, 0.35, 0.31], seed=1), sweep([0.80, 0.78, 0.83, 0.79, 0.81], seed=2)
    (c,) = compare_seed_summaries(a, b)
    assert c.exact and "p: exact permutation test over seeds)" in format_seed_comparisons([c], a, b)
    rng = np.random.default_rng(0)
    a16, b16 = sweep(list(rng.uniform(0.6, 0.75, 16)), seed=3), sweep(list(rng.uniform(0.65, 0.8, 16)), seed=4)
    (c16,) = compare_seed_summaries(a16, b16)
    text = format_seed_comparisons([c16], a16, b16)
    assert not c16.exact and "exact" not in text
    assert "p: permutation test over seeds, 100,000 random splits of the 601,080,390)" in text
    assert c16.p_value >= 1 / 100_001  # (k + 1) / (n + 1): never 0


def test_comparison_plot_data_and_the_cli_plot(tmp_path, capsys):
    """``rlvr compare --plot``: the strips are every finished seed's final accuracy with their median, the curve is
    the median and quartiles over seeds at the steps every finished seed was evaluated; the PNG is written."""
    from rlvr.cli import main
    from rlvr.evaluate.compare import seed_comparison_plot_data

    a, b = sweep([0.30, 0.32, 0.28, 0.35], seed=1), sweep([0.80, 0.78, 0.83], seed=2)
    for i, r in enumerate(a["runs"]):
        r["curve"] = [[0, 0.1], [5, 0.2 + i / 10], [10, 0.3]] if i < 3 else [[0, 0.1], [10, 0.5]]  # seed 3: no step 5
    b["runs"].append({"seed": 7, "status": "unfinished", "after": {}, "per_problem_after": {}, "curve": [[0, 0.9]]})
    d = seed_comparison_plot_data([a, b], ["greedy"])
    fa, fb = d["final"]["greedy"]
    assert sorted(fa["acc"]) == pytest.approx([0.28, 0.30, 0.32, 0.35]) and fa["median"] == pytest.approx(0.31)
    assert len(fb["acc"]) == 3 and fb["median"] == pytest.approx(0.80)  # the unfinished seed is not drawn
    ca, cb = d["curve"]
    assert ca["seeds"] == 4 and ca["steps"] == [0, 10]  # step 5 is missing from seed 3
    assert ca["median"] == pytest.approx([0.1, 0.3]) and ca["q75"] == pytest.approx([0.1, 0.35])
    assert cb["steps"] == []  # no finished seed has a curve

    rng = np.random.default_rng(0)
    for name, accs in (("base", [0.2, 0.25, 0.3]), ("new", [0.8, 0.85, 0.75])):
        for s, acc in enumerate(accs):
            per = (rng.random(40) < acc).astype(float).tolist()
            fake_run(tmp_path / name, s, {"greedy": per}, {"greedy": per}, {})
    png = tmp_path / "img" / "cmp.png"
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "new"), "--resamples", "200",
                 "--plot", str(png)]) == 0
    assert f"plot: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    # results files are not seed sweeps: --plot is refused, not silently ignored
    (tmp_path / "r1.json").write_text(json.dumps({"task": "t", "scores": [1.0, 0.0]}))
    (tmp_path / "r2.json").write_text(json.dumps({"task": "t", "scores": [1.0, 1.0]}))
    assert main(["compare", str(tmp_path / "r1.json"), str(tmp_path / "r2.json"), "--plot", str(png)]) == 2
    assert "--plot draws seed sweeps" in capsys.readouterr().err
