"""pass@k against brute force, maj@k and ties on hand-made sample sets, bootstrap, breakdowns."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from rlvr.evaluate.metrics import (
    avg_at_k,
    bootstrap_means,
    breakdown,
    compute_metrics,
    maj_at_k,
    pass_at_k,
    pass_at_k_matrix,
    vote_labels,
)
from rlvr.evaluate.stats import bootstrap_ci


def _brute_pass(row: np.ndarray, k: int) -> float:
    subsets = list(combinations(range(len(row)), k))
    return sum(bool(row[list(s)].any()) for s in subsets) / len(subsets)


def test_pass_at_k_hand_computed():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(10, 0, 3) == 0.0 and pass_at_k(10, 8, 3) == 1.0 and pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)


def test_pass_at_k_matches_brute_force_on_random_data():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 8, 11):
        correct = rng.random((30, n)) < rng.random((30, 1))
        ks = list(range(1, n + 1))
        got = pass_at_k_matrix(correct, ks)
        want = np.array([[_brute_pass(row, k) for k in ks] for row in correct])
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_pass_at_k_large_n_is_stable_and_matches_comb():
    n, c, k = 200, 7, 50
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_bad_k():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def _maj(rows: list[list[str | None]], right: list[set[str]], ks, **kw) -> np.ndarray:
    correct = np.array([[x is not None and x in ok for x in row] for row, ok in zip(rows, right)])
    labels, bucket_ok = vote_labels(rows, correct)
    return maj_at_k(labels, bucket_ok, ks, **kw)


def test_maj_at_n_on_hand_made_sets():
    rows = [["7", "7", "3", "7"],     # clear majority, right
            ["1", "2", "2", "5"],     # majority 2 is wrong, 1 is right
            ["a", "b", None, None],   # tie 1-1 between a (right) and b: half
            [None, None, None, None],  # no answer
            ["x", "y", "z", "y"]]     # majority y, right
    right = [{"7"}, {"1"}, {"a"}, {"q"}, {"y"}]
    assert _maj(rows, right, [4])[:, 0].tolist() == [1.0, 0.0, 0.5, 0.0, 1.0]


def test_maj_tie_between_three_answers_scores_fraction_correct():
    rows = [["a", "b", "c", "a", "b", "c"]]
    assert _maj(rows, [{"a"}], [6])[0, 0] == pytest.approx(1 / 3)
    assert _maj(rows, [{"a", "b"}], [6])[0, 0] == pytest.approx(2 / 3)


def test_maj_at_k_exact_enumeration_matches_brute_force():
    rows = [["a", "a", "b", None, "b", "c"]]
    correct_set = {"a"}

    def vote(sub):
        votes = [x for x in sub if x is not None]
        if not votes:
            return 0.0
        counts = {v: votes.count(v) for v in set(votes)}
        top = max(counts.values())
        win = [v for v, c in counts.items() if c == top]
        return sum(v in correct_set for v in win) / len(win)

    for k in range(1, 7):
        brute = np.mean([vote([rows[0][i] for i in s]) for s in combinations(range(6), k)])
        assert _maj(rows, [correct_set], [k], num_subsets=10_000)[0, 0] == pytest.approx(brute), k


def test_maj_at_k_monte_carlo_is_close_and_seeded():
    rng = np.random.default_rng(1)
    rows = [[str(x) for x in rng.integers(0, 3, 12)] for _ in range(40)]
    right = [{"0"}] * 40
    exact = _maj(rows, right, [5], num_subsets=10_000)  # C(12,5)=792 subsets enumerated
    mc = _maj(rows, right, [5], num_subsets=200, seed=3)
    assert abs(exact.mean() - mc.mean()) < 0.03
    assert np.array_equal(mc, _maj(rows, right, [5], num_subsets=200, seed=3))


def test_maj_at_1_is_accuracy_of_answered_samples():
    rows = [["1", "2", None, "1"]]
    assert _maj(rows, [{"1"}], [1])[0, 0] == pytest.approx(0.5)


def test_vote_buckets_count_correct_if_any_copy_is():
    rows = [["5", "5", "6"]]
    correct = np.array([[False, True, False]])  # the first "5" was rejected (e.g. hedged)
    labels, ok = vote_labels(rows, correct)
    assert labels.tolist() == [[0, 0, 1]] and ok[0, :2].tolist() == [True, False]


def test_avg_at_k_is_accuracy_for_every_k():
    correct = np.array([[1, 0, 0, 1], [1, 1, 1, 1]], dtype=bool)
    assert avg_at_k(correct, [1, 4]).tolist() == [[0.5, 0.5], [1.0, 1.0]]


def test_bootstrap_means_matches_stats_bootstrap_ci():
    x = np.random.default_rng(0).random(300)
    lo, hi = bootstrap_means(x[:, None], seed=5)
    ref = bootstrap_ci(x, seed=5)
    assert lo[0] < x.mean() < hi[0]
    assert abs(lo[0] - ref[0]) < 0.01 and abs(hi[0] - ref[1]) < 0.01
    lo2, hi2 = bootstrap_means(np.ones((10, 2)))
    assert lo2.tolist() == hi2.tolist() == [1.0, 1.0]


def test_compute_metrics_structure_and_consistency():
    rng = np.random.default_rng(2)
    correct = rng.random((50, 8)) < 0.3
    extracted = [[("r" if c else f"w{rng.integers(0, 3)}") for c in row] for row in correct]
    m = compute_metrics(correct, extracted, ks=[1, 2, 8])
    assert m["ks"] == [1, 2, 8] and m["num_problems"] == 50 and m["n"] == 8
    p1 = m["pass@k"]["1"]
    assert p1["value"] == pytest.approx(correct.mean()) == m["avg@k"]["8"]["value"]
    assert m["pass@k"]["8"]["value"] == pytest.approx(correct.any(1).mean())
    for metric in ("pass@k", "maj@k", "avg@k"):
        for row in m[metric].values():
            assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert m["pass@k"]["1"]["value"] < m["pass@k"]["2"]["value"] < m["pass@k"]["8"]["value"]
    with pytest.raises(ValueError, match="1..n=8"):
        compute_metrics(correct, extracted, ks=[9])


def test_breakdown_by_level_groups_and_sorts():
    correct = np.array([[1, 1], [0, 0], [1, 0], [0, 0]], dtype=bool)
    extracted = [["1", "1"], ["2", "3"], ["1", "2"], [None, None]]
    meta = [{"level": 2}, {"level": 10}, {"level": 2}, {}]
    b = breakdown(correct, extracted, meta, "level", ks=[1, 2])
    assert list(b) == ["2", "10"]
    assert b["2"]["num_problems"] == 2 and b["2"]["avg@k"]["1"]["value"] == pytest.approx(0.75)
    assert b["10"]["pass@k"]["2"]["value"] == 0.0
    assert breakdown(correct, extracted, meta, "subject") == {}
