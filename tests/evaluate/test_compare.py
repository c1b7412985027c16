"""IQM, stratified bootstrap, probability of improvement and `rlvr compare` on hand-made data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlvr.evaluate.compare import (
    RunFileError,
    compare_methods,
    format_comparison,
    iqm,
    load_methods,
    load_run,
    probability_of_improvement,
    run_scores,
    stratified_bootstrap,
    stratified_bootstrap_ci,
)


def test_iqm_hand_computed():
    assert iqm([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # n=5: drop 1 each side -> mean(2,3,4)
    assert iqm([5, 1, 8, 2, 7, 3, 6, 4]) == pytest.approx(4.5)  # n=8: drop 2 each side -> mean(3,4,5,6)
    assert iqm([1, 2, 3]) == pytest.approx(2.0)  # n=3: floor(0.75)=0 dropped -> plain mean
    assert iqm([[1, 100], [2, 3]]) == pytest.approx(2.5)  # flattened: 1,2,3,100 -> mean(2,3)
    rows = iqm(np.array([[1, 2, 3, 4, 100], [0, 0, 0, 0, 0]]), axis=1)
    np.testing.assert_allclose(rows, [3.0, 0.0])


def test_run_scores_matrix():
    m = run_scores({"t1": [[1, 0, 1, 0], [1, 1, 1, 1]], "t2": [[0, 0], [1, 0]]})
    np.testing.assert_allclose(m, [[0.5, 0.0], [1.0, 0.5]])


def test_probability_of_improvement_hand_computed():
    a = np.array([[0.1], [0.3]])  # 2 runs x 1 task
    b = np.array([[0.2], [0.3]])
    # pairs (b, a): (0.2,0.1)=1, (0.2,0.3)=0, (0.3,0.1)=1, (0.3,0.3)=0.5 -> 2.5/4
    assert probability_of_improvement(a, b) == pytest.approx(0.625)
    assert probability_of_improvement(a, a) == pytest.approx(0.5)
    # two tasks: average of per-task probabilities (1.0 and 0.0)
    assert probability_of_improvement(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])) == pytest.approx(0.5)


def test_stratified_bootstrap_keeps_tasks_apart():
    # task t1 scores all 0, task t2 all 1: any resample within strata keeps one of each per replicate
    data = {"t1": np.zeros((3, 5)), "t2": np.ones((3, 5))}
    (reps,) = stratified_bootstrap([data], n_resamples=50, seed=1)
    assert reps.shape == (50, 6)
    np.testing.assert_allclose(reps[:, :3], 0.0)
    np.testing.assert_allclose(reps[:, 3:], 1.0)


def test_bootstrap_ci_covers_and_shrinks():
    rng = np.random.default_rng(0)
    small = {"t": (rng.random((1, 50)) < 0.5).astype(float)}
    large = {"t": (rng.random((1, 2000)) < 0.5).astype(float)}
    lo_s, hi_s = stratified_bootstrap_ci(small, stat=np.mean, seed=0)
    lo_l, hi_l = stratified_bootstrap_ci(large, stat=np.mean, seed=0)
    assert lo_s < small["t"].mean() < hi_s
    assert (hi_l - lo_l) < (hi_s - lo_s) / 3  # ~sqrt(40) narrower
    # Agarwal's runs-only bootstrap has nothing to resample with a single run
    assert stratified_bootstrap_ci(small, stat=np.mean, resample="runs") == pytest.approx((small["t"].mean(),) * 2)


def test_identical_methods_are_not_significant():
    rng = np.random.default_rng(3)
    a = {"math": (rng.random((3, 100)) < 0.4).astype(float), "gsm": (rng.random((3, 80)) < 0.6).astype(float)}
    c = compare_methods(a, a, name_a="A", name_b="A2")
    assert c.diff == 0 and c.diff_ci[0] < 0 < c.diff_ci[1]  # runs are resampled independently per method
    assert not c.significant
    one = {t: v[:1] for t, v in a.items()}  # one run each: only the (paired) problems vary
    assert compare_methods(one, one).diff_ci == (0.0, 0.0)
    assert c.poi == pytest.approx(0.5)
    assert "no significant difference" in c.verdict


def test_clearly_better_b_is_significant_and_noise_is_not():
    rng = np.random.default_rng(4)
    a = {"t": (rng.random((1, 400)) < 0.3).astype(float)}
    b = {"t": (rng.random((1, 400)) < 0.6).astype(float)}
    c = compare_methods(a, b, name_a="base", name_b="grpo")
    assert c.significant and c.diff > 0.2
    assert c.diff_ci[0] > 0.15 and c.diff_ci[1] < 0.45
    assert "grpo beats base beyond noise" in c.verdict
    worse = compare_methods(b, a)
    assert worse.significant and worse.diff < 0 and "worse" in worse.verdict
    # a small difference on few problems is within noise
    a2 = {"t": np.array([[1, 0, 1, 0, 0, 1, 0, 1, 0, 0]], dtype=float)}
    b2 = {"t": np.array([[1, 0, 1, 0, 1, 1, 0, 1, 0, 0]], dtype=float)}
    c2 = compare_methods(a2, b2)
    assert c2.diff > 0 and not c2.significant and c2.diff_ci[0] <= 0


def test_format_comparison_has_table_and_verdict():
    c = compare_methods({"t": np.ones((2, 4))}, {"t": np.zeros((2, 4))}, name_a="x", name_b="y")
    text = format_comparison(c)
    assert "IQM" in text and text.splitlines()[-1] == c.verdict
    assert json.dumps(c.to_dict())  # serialisable


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return path


def test_load_run_formats(tmp_path):
    t, ids, s = load_run(_write(tmp_path / "a.json", {"task": "math500", "per_problem": [1.0, 0.5]}))
    assert t == "math500" and ids is None and list(s) == [1.0, 0.5]
    t, ids, s = load_run(_write(tmp_path / "b.json", {"task": "gsm8k", "scores": {"p1": 1, "p2": 0}}))
    assert ids == ["p1", "p2"] and list(s) == [1.0, 0.0]
    _, ids, s = load_run(_write(tmp_path / "c.json", {"per_problem": [{"id": "q", "accuracy": 0.25}]}))
    assert ids == ["q"] and list(s) == [0.25]
    with pytest.raises(RunFileError, match="d.json.*no 'per_problem'"):
        load_run(_write(tmp_path / "d.json", {"accuracy": 0.3}))
    (tmp_path / "e.json").write_text("{not json")
    with pytest.raises(RunFileError, match="e.json.*not a JSON"):
        load_run(tmp_path / "e.json")


def test_load_methods_aligns_by_id(tmp_path):
    a1 = _write(tmp_path / "a1.json", {"task": "t", "scores": {"x": 1, "y": 0, "z": 1}})
    a2 = _write(tmp_path / "a2.json", {"task": "t", "scores": {"z": 0, "x": 0, "y": 1}})
    b1 = _write(tmp_path / "b1.json", {"task": "t", "scores": {"y": 1, "x": 1}})
    other = _write(tmp_path / "o.json", {"task": "u", "scores": {"x": 1}})
    da, db = load_methods([[a1, a2, other], [b1]])
    assert list(da) == ["t"]  # task u only in A: dropped
    np.testing.assert_allclose(da["t"], [[1, 0], [0, 1]])  # ids x, y (z missing from B)
    np.testing.assert_allclose(db["t"], [[1, 1]])


def test_cli_compare(tmp_path, capsys):
    from rlvr.cli import main

    rng = np.random.default_rng(0)
    a = _write(tmp_path / "a.json", {"task": "t", "per_problem": (rng.random(300) < 0.3).astype(float).tolist()})
    b = _write(tmp_path / "b.json", {"task": "t", "per_problem": (rng.random(300) < 0.7).astype(float).tolist()})
    out = tmp_path / "cmp.json"
    assert main(["compare", str(a), f"trained={b}", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "trained beats a beyond noise" in text
    res = json.loads(out.read_text())
    assert res["comparisons"][0]["significant"] is True
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: file not found" in capsys.readouterr().err
