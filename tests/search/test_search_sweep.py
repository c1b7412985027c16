"""Budget sweeps, efficiency ratios and the compute-optimal allocator on hand-made data."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr.search.allocator import compute_optimal, difficulty_bins, estimate_difficulty
from rlvr.search.strategies import StrategyResult
from rlvr.search.sweep import default_budgets, efficiency_ratios, plot_sweep, run_sweep, tokens_to_reach


def test_default_budgets():
    assert default_budgets(8) == [1, 2, 4, 8]
    assert default_budgets(6) == [1, 2, 4, 6]
    assert default_budgets(1) == [1]


def test_tokens_to_reach_interpolates():
    t, a = [100, 200, 400], [0.2, 0.4, 0.5]
    assert tokens_to_reach(t, a, 0.3) == pytest.approx(150)
    assert tokens_to_reach(t, a, 0.45) == pytest.approx(300)
    assert tokens_to_reach(t, a, 0.1) == pytest.approx(100)  # already reached at the first point
    assert tokens_to_reach(t, a, 0.6) is None
    assert tokens_to_reach([400, 100, 200], [0.5, 0.2, 0.4], 0.3) == pytest.approx(150)  # order-free
    # non-monotone curve: the first crossing counts
    assert tokens_to_reach([1, 2, 3], [0.5, 0.3, 0.6], 0.4) == pytest.approx(1)


def test_efficiency_ratio_against_best_of_n():
    curves = {"best_of_n": [{"n": 1, "accuracy": 0.2, "mean_tokens": 100}, {"n": 2, "accuracy": 0.4, "mean_tokens": 200},
                            {"n": 4, "accuracy": 0.5, "mean_tokens": 400}],
              "majority": [{"n": 1, "accuracy": 0.3, "mean_tokens": 100}, {"n": 2, "accuracy": 0.6, "mean_tokens": 200}]}
    eff = efficiency_ratios(curves)
    assert eff["best_of_n"] == pytest.approx([1.0, 1.0, 1.0])
    assert eff["majority"][0] == pytest.approx(1.5)  # BoN needs 150 tokens for 30%
    assert eff["majority"][1] is None  # BoN never reaches 60%
    zero = efficiency_ratios({"best_of_n": [{"n": 1, "accuracy": 0.0, "mean_tokens": 10}],
                              "majority": [{"n": 1, "accuracy": 0.0, "mean_tokens": 10}]})
    assert zero == {"best_of_n": [None], "majority": [None]}  # no accuracy: no efficiency to speak of


def _result(name, n, per_problem, tokens):
    pp = np.asarray(per_problem, dtype=float)
    tk = np.full(pp.shape, float(tokens))
    return StrategyResult(name, n, float(pp.mean()), float(tk.mean()), pp, tk)


def test_difficulty_estimate_and_bins():
    v = np.array([[1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]])
    np.testing.assert_allclose(estimate_difficulty(v, probe=2), [0.0, 1.0, 0.0])
    d = np.array([0.0, 0.1, 0.5, 0.9, 1.0, 0.2, 0.6, 0.7, 0.3, 0.4])
    bins = difficulty_bins(d, num_bins=2)
    assert set(bins[d < 0.45]) == {0} and set(bins[d > 0.45]) == {1}
    assert difficulty_bins(np.zeros(6), num_bins=5).tolist() == [0] * 6  # all tied: one bin
    with pytest.raises(ValueError, match="probe"):
        estimate_difficulty(v, probe=5)


def test_allocator_picks_per_difficulty_and_beats_single_strategies():
    # 40 easy problems where "cheap" (n=4) solves all and "vote" (n=8) solves half,
    # 40 hard problems where only "vote" at n=8 helps.
    P = 80
    easy = np.arange(P) < 40
    diff = np.where(easy, 0.1, 0.9)
    results = {
        ("cheap", 4): _result("cheap", 4, easy.astype(float), 40),
        ("cheap", 8): _result("cheap", 8, easy.astype(float), 80),
        ("vote", 4): _result("vote", 4, np.zeros(P), 40),
        ("vote", 8): _result("vote", 8, np.where(easy, np.arange(P) % 2, 1.0), 80),
    }
    out = compute_optimal(results, diff, [2, 4, 8], probe=4, num_bins=2, folds=5)
    assert [r.budget for r in out] == [4, 8]  # 2 < probe: skipped
    at8 = out[1]
    assert at8.choices == {0: ("cheap", 4), 1: ("vote", 8)}  # easy: cheap and fewer tokens; hard: vote
    assert at8.accuracy == pytest.approx(1.0)
    assert at8.accuracy > max(r.accuracy for r in results.values())
    assert at8.mean_tokens == pytest.approx(60)  # half the problems at 40 tokens, half at 80
    assert out[0].choices == {0: ("cheap", 4), 1: ("cheap", 4)}  # at budget 4 "vote" solves nothing


def test_allocator_cross_validation_is_not_optimistic():
    # No signal: per-problem outcomes are coin flips. In-sample selection (folds=1) overfits;
    # cross-validated selection cannot, on average.
    rng = np.random.default_rng(0)
    P, gaps = 200, []
    for rep in range(5):
        results = {(f"s{k}", 4): _result(f"s{k}", 4, rng.random(P) < 0.5, 10) for k in range(6)}
        diff = rng.random(P)
        insample = compute_optimal(results, diff, [4], probe=4, num_bins=5, folds=1)[0].accuracy
        cv = compute_optimal(results, diff, [4], probe=4, num_bins=5, folds=5, seed=rep)[0].accuracy
        gaps.append(insample - cv)
    assert np.mean(gaps) > 0.03


def test_run_sweep_and_plot(tmp_path):
    rng = np.random.default_rng(1)
    P, n = 60, 8
    p_correct = rng.random(P)[:, None]
    correct = rng.random((P, n)) < p_correct
    answers = [[("R" if c else str(rng.integers(0, 3))) for c in row] for row in correct]
    scores = np.clip(correct * 0.5 + rng.random((P, n)) * 0.6, 0, 1)
    tokens = rng.integers(50, 150, size=(P, n))
    res = run_sweep(correct=correct, answers=answers, scores=scores, num_tokens=tokens, probe=2)
    assert set(res.curves) == {"best_of_n", "majority", "weighted_majority", "compute_optimal"}
    assert [p["n"] for p in res.curves["majority"]] == [1, 2, 4, 8]
    # N=1: every strategy takes sample 0
    first = {s: res.curves[s][0]["accuracy"] for s in ("best_of_n", "majority", "weighted_majority")}
    assert first["best_of_n"] == pytest.approx(correct[:, 0].mean())
    assert first["majority"] == pytest.approx(correct[:, 0].mean())
    assert res.curves["best_of_n"][-1]["mean_tokens"] == pytest.approx(tokens.sum(1).mean())
    d = res.to_dict()
    assert d["curves"]["best_of_n"][0]["efficiency_vs_best_of_n"] == pytest.approx(1.0)
    png = plot_sweep(res, tmp_path / "sweep.png", title="test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    only_votes = run_sweep(correct=correct, answers=answers, budgets=[1, 3], allocator=False)
    assert list(only_votes.curves) == ["majority"]
    with pytest.raises(ValueError, match="outside 1..8"):
        run_sweep(correct=correct, answers=answers, budgets=[16])


def test_bins_with_heavy_ties_split_between_values():
    # 31 easy and 33 hard: the median is a hard value; the cut must still fall between the two
    d = np.array([0.1] * 31 + [0.9] * 33)
    bins = difficulty_bins(d, num_bins=2)
    assert set(bins[:31]) == {0} and set(bins[31:]) == {1}
    d5 = np.repeat([0.0, 0.25, 0.5, 0.75, 1.0], [50, 10, 10, 10, 20])
    b5 = difficulty_bins(d5, num_bins=5)
    assert all(len(set(b5[d5 == v])) == 1 for v in np.unique(d5))  # ties share a bin
    assert np.all(np.diff(b5) >= 0)  # monotone in difficulty
