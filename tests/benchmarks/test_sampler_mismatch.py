"""The mismatch statistics of benchmarks/sampler_mismatch.py on a hand-computed example."""

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
