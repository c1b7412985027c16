"""Machine rates and model counts shared by the benchmarks that print a roofline, a floor or an MFU."""

from __future__ import annotations

import sys
import time
from typing import Callable

import torch


GEMM_BUDGET_S = 20.0
"""Seconds one GEMM probe may take (the warm-up product and every timed one)."""

ESTIMATE_MIN_S = 1e-3
"""The rate estimate's product is doubled in size until it takes at least this long (or reaches the asked size)."""


def gemm_rate(dtype: torch.dtype, n: int = 2048, reps: int = 5, tries: int = 3, device: str = "cpu",
              budget_s: float = GEMM_BUDGET_S, clock: Callable[[], float] = time.perf_counter) -> tuple[float, int]:
    """``(best FLOP/s, size measured)`` of an n x n x n matmul in ``dtype`` on ``device``: the best of ``tries``
    timings of ``reps`` products each, after one untimed product (CUDA is synchronised around each timing).

    Bounded by ``budget_s``: one timed product at 256^3 (or ``n``, if smaller; doubled while it takes under
    :data:`ESTIMATE_MIN_S`, as on a GPU where 256^3 is launch-bound) first estimates the rate; where the
    untimed product and ``tries x reps`` timed ones at ``n`` would not fit in the budget, ``n`` is halved until
    they do (not below that first size), saying so on stderr; and the tries stop once the budget is spent (after
    the first).  A CPU without native bf16 emulates it at ~1 GFLOP/s: one 2048^3 bf16 product there takes ~20 s,
    and the unbounded probe ran for over 10 minutes.
    """
    cuda = torch.device(device).type == "cuda"

    def timed(a, b, count: int) -> float:
        if cuda:
            torch.cuda.synchronize()
        t0 = clock()
        for _ in range(count):
            a @ b
        if cuda:
            torch.cuda.synchronize()
        return max(clock() - t0, 1e-9)

    start = clock()
    m = min(n, 256)
    while True:  # a product too short to time (a GPU's 256^3 is launch-bound: ~0.2 TFLOP/s on an H200) is doubled
        a = torch.randn(m, m, dtype=dtype, device=device)
        a @ a
        took = timed(a, a, 1)
        if took >= ESTIMATE_MIN_S or m >= n:
            break
        m = min(2 * m, n)
    estimate = 2 * m**3 / took
    size = n
    while size > m and 2 * size**3 / estimate * (1 + reps * tries) > budget_s:
        size //= 2
    size = max(size, m)
    if size < n:
        print(f"GEMM probe: {dtype} at {n}^3 would take ~{2 * n**3 / estimate:.0f} s a product on {device} "
              f"(~{estimate / 1e9:.1f} GFLOP/s{', bf16 not native here?' if dtype == torch.bfloat16 else ''}); "
              f"measured at {size}^3 to stay within {budget_s:.0f} s", file=sys.stderr, flush=True)
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    a @ b
    best = 0.0
    for _ in range(tries):
        best = max(best, 2 * size**3 * reps / timed(a, b, reps))
        if clock() - start > budget_s:
            break
    return best, size


def gemm_flops(dtype: torch.dtype, n: int = 2048, reps: int = 5, tries: int = 3, device: str = "cpu",
               budget_s: float = GEMM_BUDGET_S) -> float:
    """Best FLOP/s of an n x n x n matmul in ``dtype`` on ``device`` (:func:`gemm_rate`: bounded by
    ``budget_s``, at a smaller size where ``n`` would not fit)."""
    return gemm_rate(dtype, n, reps, tries, device, budget_s)[0]


def matmul_params(model) -> int:
    """Parameters that take part in a matmul per token: every ``nn.Linear`` weight (the LM head included,
    once, even when tied to the embedding, whose lookup is no matmul)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
