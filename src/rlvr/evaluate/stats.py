"""Confidence intervals for accuracies (Wilson score interval, percentile bootstrap), the spread of a few
numbers (median, quartiles) and an exact permutation test for two small samples (seeds)."""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

__all__ = ["wilson_interval", "bootstrap_ci", "accuracy_summary", "intervals_overlap", "spread_summary",
           "permutation_test"]

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


def spread_summary(values: Sequence[float] | np.ndarray) -> dict:
    """``n``, ``mean``, ``median``, quartiles ``q1``/``q3``, ``iqr = q3 - q1``, ``min``, ``max`` of a few numbers
    (e.g. one final accuracy per seed).

    Quartiles interpolate linearly between order statistics (numpy's default, Hyndman & Fan 1996 type 7):
    ``q = x_(h)`` at the 0-based position ``h = p (n - 1)``.  ``[0.1, 0.2, 0.3, 0.5, 0.7]``: median 0.3,
    q1 = x_(1) = 0.2, q3 = x_(3) = 0.5, IQR 0.3.
    """
    x = np.asarray(values, dtype=float).reshape(-1)
    if x.size == 0:
        raise ValueError("spread_summary needs at least one value")
    q1, median, q3 = (float(v) for v in np.quantile(x, [0.25, 0.5, 0.75]))
    return {"n": int(x.size), "mean": float(x.mean()), "median": median, "q1": q1, "q3": q3, "iqr": q3 - q1,
            "min": float(x.min()), "max": float(x.max())}


def permutation_test(a: Sequence[float], b: Sequence[float], *, exact_limit: int = 200_000,
                     n_resamples: int = 100_000, seed: int = 0) -> dict:
    """Two-sided permutation test of ``mean(b) - mean(a)`` (R. A. Fisher 1935; E. J. G. Pitman 1937).

    Under the null hypothesis the labels A/B are exchangeable: every split of the pooled ``n_a + n_b`` values
    into groups of sizes ``n_a`` and ``n_b`` is equally likely.  The p-value is the share of splits whose
    ``|mean(B') - mean(A')|`` is at least the observed one (a relative tolerance of 1e-9 absorbs float
    round-off), the observed split included.  All ``C(n_a + n_b, n_a)`` splits are enumerated when there are at most
    ``exact_limit`` of them (5 + 5 seeds: 252), else ``n_resamples`` random ones are drawn and
    ``p = (k + 1) / (n_resamples + 1)``.

    Returns ``{"diff", "p_value", "splits", "exact", "min_p"}``; ``min_p`` is the smallest p-value the test
    can give with these sample sizes (``2 / C(n_a + n_b, n_a)`` when ``n_a == n_b``: the observed split and its
    mirror; else ``1 / C(...)``), so ``min_p >= 0.05`` means no outcome at all can be significant at 5%
    (3 + 3 seeds: ``2 / 20 = 0.1``).
    ``a = [0, 1]``, ``b = [2, 3]``: the 6 splits give |differences| 2, 1, 0, 0, 1, 2, so ``p = 2 / 6``.
    """
    xa, xb = np.asarray(a, dtype=float).reshape(-1), np.asarray(b, dtype=float).reshape(-1)
    na, nb = xa.size, xb.size
    if na == 0 or nb == 0:
        raise ValueError("permutation_test needs at least one value on each side")
    pooled = np.concatenate([xa, xb])
    total = pooled.sum()
    observed = float(xb.mean() - xa.mean())
    splits = math.comb(na + nb, na)
    tol = 1e-9 * max(1.0, abs(observed))
    if splits <= exact_limit:
        idx = np.array(list(itertools.combinations(range(na + nb), na)), dtype=np.int64)  # [splits, na]
        sum_a = pooled[idx].sum(axis=1)
        diffs = (total - sum_a) / nb - sum_a / na
        p = float(np.mean(np.abs(diffs) >= abs(observed) - tol))
        exact, used = True, splits
    else:
        rng = np.random.default_rng(seed)
        hits, chunk = 0, max(1, _BOOTSTRAP_CHUNK_ELEMENTS // (na + nb))
        for start in range(0, n_resamples, chunk):  # random splits: the first na of a random order are A
            order = np.argsort(rng.random((min(chunk, n_resamples - start), na + nb)), axis=1)[:, :na]
            sum_a = pooled[order].sum(axis=1)
            hits += int(np.sum(np.abs((total - sum_a) / nb - sum_a / na) >= abs(observed) - tol))
        p = (hits + 1) / (n_resamples + 1)
        exact, used = False, n_resamples
    # the smallest p-value possible: the observed split alone (and its mirror when na == nb)
    min_p = min(1.0, (2 if na == nb else 1) / splits) if exact else 1 / (n_resamples + 1)
    return {"diff": observed, "p_value": p, "splits": used, "exact": exact, "min_p": min_p}
