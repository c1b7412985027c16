"""Machine rates and model counts shared by the benchmarks that print a roofline, a floor or an MFU."""

from __future__ import annotations

import time

import torch


def gemm_flops(dtype: torch.dtype, n: int = 2048, reps: int = 5, tries: int = 3, device: str = "cpu") -> float:
    """Best FLOP/s of an n x n x n matmul in ``dtype`` on ``device``: the best of ``tries`` timings of ``reps``
    products each, after one untimed product (CUDA is synchronised around each timing)."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    a @ b
    cuda = torch.device(device).type == "cuda"
    best = 0.0
    for _ in range(tries):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        if cuda:
            torch.cuda.synchronize()
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best


def matmul_params(model) -> int:
    """Parameters that take part in a matmul per token: every ``nn.Linear`` weight (the LM head included,
    once, even when tied to the embedding, whose lookup is no matmul)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
