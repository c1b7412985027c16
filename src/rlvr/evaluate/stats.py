"""Confidence intervals for accuracies: Wilson score interval and percentile bootstrap."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

__all__ = ["wilson_interval", "bootstrap_ci", "accuracy_summary", "intervals_overlap"]

# elements per vectorised bootstrap chunk (n_resamples_in_chunk * n), bounds memory to ~32 MB of float64
_BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (E. B. Wilson 1927, JASA 22:209).

    With ``p = successes / n`` and ``z`` the ``(1 + confidence) / 2`` quantile of
    the standard normal (``statistics.NormalDist``)::

        center = (p + z^2 / (2n)) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
        interval = [center - half, center + half]

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not
    degenerate at 0/n or n/n.  A fractional ``successes`` (mean of scores in
    [0, 1]) is accepted and treated as ``p * n``.
    """
    _check_confidence(confidence)
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if successes == 0 else max(0.0, center - half)  # exact bounds at 0/n and n/n (no rounding residue)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return lo, hi


def _apply_stat(stat: Callable, samples: np.ndarray) -> np.ndarray:
    """``stat`` of each row of ``samples`` [R, n]: vectorised when ``stat`` takes ``axis``."""
    try:
        out = np.asarray(stat(samples, axis=1), dtype=float)
        if out.shape == (samples.shape[0],):
            return out
    except TypeError:
        pass
    return np.array([stat(row) for row in samples], dtype=float)


def bootstrap_indices(n: int, n_resamples: int, seed: int = 0, chunk_rows: int | None = None):
    """The resamples of every bootstrap in rlvr: ``n_resamples`` rows of ``n`` indices drawn with replacement
    from ``np.random.default_rng(seed)``, yielded in blocks of at most ``chunk_rows`` rows (the same stream
    whatever the block size)."""
    if n < 1 or n_resamples < 1:
        raise ValueError(f"a bootstrap needs n >= 1 and n_resamples >= 1, got {n}, {n_resamples}")
    rng = np.random.default_rng(seed)
    step = chunk_rows or n_resamples
    for start in range(0, n_resamples, step):
        yield rng.integers(0, n, size=(min(step, n_resamples - start), n))


def bootstrap_ci(values: Sequence[float] | np.ndarray, stat: Callable = np.mean, n_resamples: int = 2000,
                 confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval for ``stat(values)`` (B. Efron 1979, Ann. Statist. 7:1).

    Draws ``n_resamples`` samples of size ``n`` with replacement (vectorised with
    numpy, ``np.random.default_rng(seed)``, so the result is reproducible),
    evaluates ``stat`` on each (with ``axis=1`` when it supports it, e.g.
    ``np.mean`` / ``np.median``) and returns the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of those statistics.
    """
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    x = np.asarray(values, dtype=float).reshape(-1)
    n = x.size
    if n == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    per_chunk = max(1, _BOOTSTRAP_CHUNK_ELEMENTS // n)
    stats = [_apply_stat(stat, x[idx]) for idx in bootstrap_indices(n, n_resamples, seed, per_chunk)]
    alpha = 1 - confidence
    lo, hi = np.quantile(np.concatenate(stats), [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def accuracy_summary(correct: Sequence[bool | float], confidence: float = 0.95) -> dict:
    """Accuracy of per-item scores (bools, or floats in [0, 1]) with a Wilson interval.

    Returns ``{"n", "accuracy", "ci_low", "ci_high", "method": "wilson"}`` (Wilson 1927).
    """
    x = np.asarray(correct, dtype=float).reshape(-1)
    if x.size == 0:
        raise ValueError("accuracy_summary needs at least one item")
    if np.any((x < 0) | (x > 1)) or np.any(np.isnan(x)):
        raise ValueError("scores must lie in [0, 1]")
    n, successes = int(x.size), float(x.sum())
    lo, hi = wilson_interval(min(successes, n), n, confidence)
    return {"n": n, "accuracy": successes / n, "ci_low": lo, "ci_high": hi, "method": "wilson"}


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether closed intervals ``a = (lo, hi)`` and ``b`` share a point (touching counts)."""
    (alo, ahi), (blo, bhi) = a, b
    if alo > ahi or blo > bhi:
        raise ValueError(f"intervals must be (low, high) with low <= high, got {a}, {b}")
    return alo <= bhi and blo <= ahi
