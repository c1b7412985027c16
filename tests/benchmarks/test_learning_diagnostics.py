"""The pure parts of benchmarks/sampler_mismatch.py and benchmarks/collapse_metrics.py, by hand."""

import math

import torch

from conftest import load_benchmark


def test_distance_by_hand():
    d = load_benchmark("sampler_mismatch").distance
    a = torch.tensor([[0.0, math.log(1.2), math.log(0.95), 7.0]])
    b = torch.zeros(1, 4)
    mask = torch.tensor([[1, 1, 1, 0]])  # the last column is padding: its 7.0 must not count
    r = d(a, b, mask)
    assert r["tokens"] == 3
    assert math.isclose(r["mean"], (math.log(1.2) + abs(math.log(0.95))) / 3, rel_tol=1e-6)
    assert math.isclose(r["max"], math.log(1.2), rel_tol=1e-6)
    assert math.isclose(r["outside"], 1 / 3, rel_tol=1e-6)  # only the ratio 1.2 leaves [0.9, 1.1]


def test_collapse_labels_and_windows():
    m = load_benchmark("collapse_metrics")
    run = {"before": 0.25, "after": 0.20, "curve": [(0, 0.25), (5, 0.5), (10, 0.20)]}
    assert m.label(run, 0.10) == "collapsed"  # ends below the untrained model
    run = {"before": 0.25, "after": 0.60, "curve": [(0, 0.25), (5, 0.70), (10, 0.55), (15, 0.60)]}
    assert m.label(run, 0.10) == "unstable"  # 0.70 -> 0.55 is a 15-point drop
    assert m.label(run, 0.20) == "healthy"
    assert m.label({"before": 0.25, "after": None, "curve": []}, 0.1) == "unfinished"
    rows = [{"step": s, "entropy": float(s)} for s in range(1, 8)] + [{"step": 8}]
    assert m.window_means(rows, "entropy", 5) == [3.0, 6.5]  # steps 1-5, then 6-7 (step 8 has no value)
