"""The benchmarks' GEMM probe (benchmarks/_rates.py) is bounded in time: where one product at the asked size
would not fit in its budget (bf16 emulated on a CPU without native support: ~20 s per 2048^3 product) it measures
at a smaller size and says so.  A fake clock stands in for the machine's speed."""

from __future__ import annotations

import itertools

import pytest
import torch

from conftest import load_benchmark


@pytest.fixture(scope="module")
def rates():
    return load_benchmark("_rates")


def test_a_slow_machine_is_measured_at_a_smaller_size_within_the_budget(rates, capsys):
    ticks = itertools.count()  # every product between two readings "takes" one second: 33.5 MFLOP/s at 256^3
    rate, size = rates.gemm_rate(torch.float32, n=2048, reps=5, tries=3, budget_s=3.0,
                                 clock=lambda: float(next(ticks)))
    assert size == 256 and rate == pytest.approx(2 * 256**3 * 5)
    assert next(ticks) == 6  # start, the estimate (2 readings), one try (2) and its budget check: then it stopped
    assert "measured at 256^3 to stay within 3 s" in capsys.readouterr().err


def test_a_fast_machine_is_measured_at_the_asked_size(rates, capsys):
    ticks = (i * 1e-6 for i in itertools.count())
    rate, size = rates.gemm_rate(torch.float32, n=512, reps=1, tries=2, clock=lambda: next(ticks))
    assert size == 512 and rate > 0
    assert capsys.readouterr().err == ""
    assert rates.gemm_flops(torch.float32, n=64, reps=1, tries=1) > 0


def test_an_estimate_too_short_to_time_is_doubled_up_to_the_asked_size(rates, capsys):
    """On a GPU a 256^3 product is launch-bound (it read ~0.2 TFLOP/s on an H200 and halved the probe to 4096^3):
    the estimate's product is doubled while it takes under ESTIMATE_MIN_S, here up to the asked 1024^3."""
    readings = itertools.count()
    rate, size = rates.gemm_rate(torch.float32, n=1024, reps=1, tries=1, budget_s=100.0,
                                 clock=lambda: next(readings) * 1e-6)
    assert size == 1024 and rate > 0 and capsys.readouterr().err == ""
    assert next(readings) == 10  # start, three estimates (256, 512, 1024) of two readings, one try (2), its check
