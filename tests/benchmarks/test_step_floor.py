"""The floor arithmetic of benchmarks/grpo_step_vs_trl.py, on hand-computed numbers (no model loaded)."""

from __future__ import annotations

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("grpo_step_vs_trl")


def test_floor_parts_by_hand(bench):
    # M = 1e8 matmul params, 1.1e8 params; 50 prompt + 8 x 64 sampled = 562 tokens
    f = bench.floor_seconds(matmul=100_000_000, params=110_000_000, prompt_tokens=50, group=8, new_tokens=64,
                            learner_flops=2e11, bf16_flops=4e11, bandwidth=2e10)
    assert f["tokens"] == 562
    assert f["learner"] == pytest.approx(6 * 1e8 * 562 / 2e11)        # 1.686 s
    # per decode step: 2e8 bytes of bf16 weights / 2e10 B/s = 10 ms > 2 * 1e8 * 8 / 4e11 = 4 ms of GEMM
    assert f["sampling"] == pytest.approx(64 * 0.010)                  # 0.64 s
    assert f["optimizer"] == pytest.approx(28 * 1.1e8 / 2e10)          # 0.154 s
    assert f["total"] == pytest.approx(1.686 + 0.64 + 0.154)


def test_compute_bound_decode_when_the_group_is_large(bench):
    # 512 rows: 2 * 1e8 * 512 / 4e11 = 0.256 s of GEMM per step, more than the 10 ms of weight reads
    f = bench.floor_seconds(matmul=100_000_000, params=100_000_000, prompt_tokens=0, group=512, new_tokens=2,
                            learner_flops=2e11, bf16_flops=4e11, bandwidth=2e10)
    assert f["sampling"] == pytest.approx(2 * 0.256)
