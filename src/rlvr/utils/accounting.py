"""Per-step time and memory accounting: where a training step's seconds and bytes go.

One :class:`StepAccounting` per process (learner, rollout worker) measures

* wall time per phase, with a context manager: ``with acct.phase("generate"): ...``
  (phases used by the recipe: ``generate``, ``verify``, ``learn``, ``sync``, and
  ``wait`` for a learner blocked on an asynchronous rollout worker);
* tokens produced, turned into tokens/s of generation and of the whole step;
* peak resident memory of this process (``getrusage`` high-water mark, which the
  kernel keeps per process, so it is the peak since start-up), and the current
  RSS when ``psutil`` is installed;
* on CUDA, the peak of ``torch.cuda.max_memory_allocated`` within the step (the
  counter is reset when a step starts).

:meth:`StepAccounting.row` returns flat ``metrics.jsonl`` fields::

    gen_time verify_time learn_time sync_time wait_time step_time
    tokens_per_s (generated tokens / generate time) step_tokens_per_s (/ step time)
    peak_rss_mb [rss_mb] [cuda_peak_mb]

No dependency beyond the standard library (torch is imported only for a CUDA device).
"""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import torch

__all__ = ["StepAccounting", "peak_rss_mb", "current_rss_mb", "set_malloc_mmap_threshold", "set_onednn_cache_capacity",
           "PHASES"]

PHASES = ("generate", "verify", "learn", "sync", "wait")
_FIELD = {"generate": "gen_time", "verify": "verify_time", "learn": "learn_time", "sync": "sync_time",
          "wait": "wait_time"}


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def current_rss_mb() -> float | None:
    """Current resident set size in MiB, or None without ``psutil``."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss / (1024 * 1024)


class StepAccounting:
    """Accumulates phase times and token counts for one step at a time.

    Usage::

        acct = StepAccounting(device)
        acct.start_step()
        with acct.phase("generate"):
            ...
        acct.add_tokens(n)
        row = acct.row()          # at the end of the step

    Time spent outside any phase still counts towards ``step_time``. Nested
    phases are not allowed (each second belongs to one phase).  Phase times from
    another process (a rollout worker) can be folded in with :meth:`add_time`.
    """

    def __init__(self, device: "torch.device | str | None" = None):
        self.on_cuda = device is not None and str(device).startswith("cuda")
        if self.on_cuda:
            import torch

            self.device = torch.device(device)
            self.on_cuda = torch.cuda.is_available()
        self._active: str | None = None
        self.start_step()

    def _cuda(self):
        import torch

        return torch.cuda

    def start_step(self) -> None:
        """Zero the phase times and token count, and start the step clock."""
        self.times = {p: 0.0 for p in PHASES}
        self.tokens = 0
        self._t0 = time.perf_counter()
        if self.on_cuda:
            self._cuda().reset_peak_memory_stats(self.device)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (added to what the phase already has this step)."""
        if name not in self.times:
            raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
        if self._active is not None:
            raise RuntimeError(f"phase {name!r} started inside phase {self._active!r}")
        self._active = name
        if self.on_cuda:  # kernels are asynchronous: charge them to the phase that launched them
            self._cuda().synchronize(self.device)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.on_cuda:
                self._cuda().synchronize(self.device)
            self.times[name] += time.perf_counter() - t0
            self._active = None

    def add_time(self, name: str, seconds: float) -> None:
        """Charge ``seconds`` measured elsewhere (e.g. in a rollout worker) to phase ``name``."""
        if name not in self.times:
            raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
        self.times[name] += float(seconds)

    def add_tokens(self, n: int) -> None:
        """Count ``n`` generated tokens towards this step's throughput."""
        self.tokens += int(n)

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def row(self) -> dict[str, float]:
        """Metrics for the step so far (call at its end)."""
        step = self.elapsed()
        out = {_FIELD[p]: t for p, t in self.times.items()}
        out["step_time"] = step
        out["tokens_per_s"] = self.tokens / self.times["generate"] if self.times["generate"] > 0 else 0.0
        out["step_tokens_per_s"] = self.tokens / step if step > 0 else 0.0
        out["peak_rss_mb"] = peak_rss_mb()
        rss = current_rss_mb()
        if rss is not None:
            out["rss_mb"] = rss
        if self.on_cuda:
            out["cuda_peak_mb"] = self._cuda().max_memory_allocated(self.device) / (1024 * 1024)
        return out


def set_malloc_mmap_threshold(nbytes: int) -> bool:
    """Ask glibc to serve allocations of at least ``nbytes`` with ``mmap`` (``mallopt(M_MMAP_THRESHOLD)``).

    Such blocks go back to the operating system when freed. By default glibc raises the threshold as large
    blocks are freed, after which the learner's per-step activations (hundreds of MB, freed every step)
    stay in the heap and fragment it: the demo's resident set crept from 5.4 to 6.6 GB over 11 steps. Same
    effect as starting the process with ``MALLOC_MMAP_THRESHOLD_=nbytes``; affects later allocations only.
    Returns False (and changes nothing) where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_MMAP_THRESHOLD = -3
    return bool(mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(int(nbytes))))


ONEDNN_CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
"""oneDNN's primitive cache and PyTorch's ideep computation cache: each holds one compiled kernel per matmul shape
(1,024 by default each)."""


def set_onednn_cache_capacity(entries: int) -> dict[str, str]:
    """Bound the two CPU kernel caches behind bf16 matmuls to ``entries`` each; returns the variables it set.

    On a CPU with bf16 support (AMX, AVX512-BF16) a bf16 ``linear`` runs through oneDNN, which compiles a kernel for
    every new input shape and keeps it: ~0.6 MiB in oneDNN's primitive cache plus ~0.3 MiB in ideep's cache
    (``benchmarks/onednn_cache_memory.py``), up to 1,024 of each. A sampler whose prefills have ever-new shapes
    (multi-turn episodes: rows x width differs chunk after chunk) grows its resident set by up to ~0.9 GB this
    way; decoding reuses one shape per token step, so a small cache costs only an occasional recompilation.

    Both libraries read the variables when they build their cache, at the first bf16 matmul of the process: call
    this before any (the training recipe does, in its set-up). A variable the user already set is left alone
    (and not returned). ``entries`` must be >= 1 (0 crashes ideep).
    """
    if entries < 1:
        raise ValueError("entries must be >= 1")
    import os

    done = {}
    for var in ONEDNN_CACHE_VARS:
        if var not in os.environ:
            os.environ[var] = done[var] = str(int(entries))
    return done
