"""``train.deterministic``: PyTorch's deterministic-algorithms mode for the span of one run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["deterministic_algorithms"]


@contextmanager
def deterministic_algorithms(mode: str) -> Iterator[None]:
    """Run the body with ``torch.use_deterministic_algorithms`` set by ``mode``, then restore the caller's setting.

    ``off``: leave torch as it is.  ``warn``: deterministic kernels where torch has them, a warning for
    each op that has none (an op whose result can depend on thread timing: CUDA ``scatter_add``,
    atomics in some backward passes).  ``error``: the same, but such an op raises.  On CUDA,
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` is set when unset (cuBLAS needs it to be deterministic).

    A seeded run should repeat bit for bit; the one time rlvr's demo did not (a repeated-index gather
    whose backward summed with CPU atomics, fixed in ``rlvr.learner.batching``), this mode would have
    replaced that backward with a deterministic one.
    """
    if mode not in ("off", "warn", "error"):
        raise ValueError(f"deterministic mode must be off, warn or error, not {mode!r}")
    if mode == "off":
        yield
        return
    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    if torch.cuda.is_available():
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=mode == "warn")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
