"""Compute-optimal test-time allocation by estimated difficulty, on stored samples.

After C. Snell, J. Lee, K. Xu, A. Kumar, "Scaling LLM Test-Time Compute Optimally
can be More Effective than Scaling Model Parameters" (2024), Sec. 3-5: the best
way to spend a test-time budget depends on how hard the problem is, so

1. estimate each problem's difficulty from its first ``probe`` samples: one
   minus the mean scorer score (Snell's *model-predicted* difficulty), or one minus
   the verifier pass rate (*oracle* difficulty: an upper bound, it peeks at the
   verdicts);
2. cut problems into ``num_bins`` quantile bins of difficulty (Snell: 5);
3. at a budget of ``N`` samples per problem, pick for each bin the
   ``(strategy, width)`` with ``probe <= width <= N`` that has the best accuracy on
   that bin (ties: fewer tokens, then the order given);
4. do the picking with K-fold cross-validation over problems, so the accuracy
   reported for a problem comes from choices made on *other* problems (Snell
   uses two-fold cross-validation for the same reason).

The probe samples are the first samples of every strategy's width (with
``subsets="first"``), so they cost nothing extra; a width below ``probe`` is not
offered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from rlvr.search.strategies import StrategyResult

__all__ = ["estimate_difficulty", "difficulty_bins", "AllocationResult", "compute_optimal"]


def estimate_difficulty(values, probe: int = 4) -> np.ndarray:
    """Difficulty in [0, 1] per problem: ``1 - mean(values[:, :probe])``.

    ``values`` [P, n] are verdicts (0/1; oracle difficulty) or scorer scores in [0, 1]
    (predicted difficulty).
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2 or not 1 <= probe <= v.shape[1]:
        raise ValueError(f"need a [P, n] array with 1 <= probe <= n, got shape {v.shape} and probe={probe}")
    return 1.0 - v[:, :probe].mean(1)


def difficulty_bins(difficulty, num_bins: int = 5, reference=None) -> np.ndarray:
    """Bin index (0 = easiest) per problem, ``num_bins`` quantile bins of ``reference`` (default: ``difficulty``).

    Difficulties are often tied (a pass rate over 4 samples takes 5 values), so
    the cuts are placed between distinct values of ``reference``: for each
    quantile ``k / num_bins`` the midpoint between consecutive distinct values
    whose fraction of ``reference`` below it is closest to that quantile.  Tied
    problems always share a bin; there may be fewer than ``num_bins`` bins.
    """
    d = np.asarray(difficulty, dtype=float)
    ref = np.sort(d if reference is None else np.asarray(reference, dtype=float))
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    u = np.unique(ref)
    if u.size < 2 or num_bins == 1:
        return np.zeros(d.shape, dtype=int)
    mids = (u[:-1] + u[1:]) / 2
    below = np.searchsorted(ref, mids) / ref.size
    cuts = np.unique([mids[np.argmin(np.abs(below - q))] for q in np.arange(1, num_bins) / num_bins])
    return np.searchsorted(cuts, d, side="right")


@dataclass
class AllocationResult:
    """Cross-validated accuracy of the compute-optimal allocation at one budget."""

    budget: int
    accuracy: float
    mean_tokens: float
    choices: dict = field(default_factory=dict)
    """Bin -> ``(strategy, width)`` fitted on all problems (for the report; the accuracy is cross-validated)."""
    bin_sizes: dict = field(default_factory=dict)
    per_problem: np.ndarray | None = None

    def to_dict(self) -> dict:
        return {"strategy": "compute_optimal", "n": self.budget, "accuracy": self.accuracy,
                "mean_tokens": self.mean_tokens,
                "choices": {str(b): {"strategy": s, "n": w} for b, (s, w) in self.choices.items()},
                "bin_sizes": {str(b): int(c) for b, c in self.bin_sizes.items()}}


def _pick(cands, results, rows: np.ndarray):
    """The candidate with the best accuracy on ``rows`` (ties: fewer tokens, then order)."""
    best, best_key = None, None
    for c in cands:
        r = results[c]
        key = (r.per_problem[rows].mean(), -r.tokens_per_problem[rows].mean())
        if best_key is None or key > best_key:
            best, best_key = c, key
    return best


def _fit(cands, results, bins_train: np.ndarray, rows_train: np.ndarray) -> dict:
    glob = _pick(cands, results, rows_train)
    out = {}
    for b in np.unique(bins_train):
        sel = rows_train[bins_train == b]
        out[int(b)] = _pick(cands, results, sel) if sel.size else glob
    out[-1] = glob  # fallback for a bin the training folds never saw
    return out


def compute_optimal(results: Mapping[tuple[str, int], StrategyResult], difficulty, budgets: Sequence[int], *,
                    probe: int = 4, num_bins: int = 5, folds: int = 5, seed: int = 0) -> list[AllocationResult]:
    """Compute-optimal accuracy at each budget (Snell et al. 2024), cross-validated over problems.

    Args:
        results: ``(strategy, width) -> StrategyResult`` on the same P problems
            (from :func:`rlvr.search.strategies.evaluate_strategy`).
        difficulty: [P] estimated difficulty (:func:`estimate_difficulty`).
        budgets: samples per problem; budgets below ``probe`` are skipped.
        folds: K of the K-fold split (seeded); ``folds=1`` fits and reports on
            the same problems (optimistic; for debugging only).
    """
    d = np.asarray(difficulty, dtype=float)
    P = d.size
    if folds < 1:
        raise ValueError(f"folds must be >= 1, got {folds}")
    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(P) % max(1, min(folds, P))
    out = []
    for N in sorted(set(int(b) for b in budgets)):
        cands = [k for k in results if probe <= k[1] <= N]
        if N < probe or not cands:
            continue
        per_problem, tokens = np.zeros(P), np.zeros(P)
        for k in np.unique(fold_of):
            test = np.flatnonzero(fold_of == k)
            train = np.flatnonzero(fold_of != k) if folds > 1 else test
            edges_ref = d[train]
            choice = _fit(cands, results, difficulty_bins(d[train], num_bins, edges_ref), train)
            test_bins = difficulty_bins(d[test], num_bins, edges_ref)
            for i, b in zip(test, test_bins):
                r = results[choice.get(int(b), choice[-1])]
                per_problem[i], tokens[i] = r.per_problem[i], r.tokens_per_problem[i]
        all_rows = np.arange(P)
        bins_all = difficulty_bins(d, num_bins)
        full = _fit(cands, results, bins_all, all_rows)
        full.pop(-1)
        out.append(AllocationResult(budget=N, accuracy=float(per_problem.mean()), mean_tokens=float(tokens.mean()),
                                    choices=full, bin_sizes={int(b): int((bins_all == b).sum()) for b in full},
                                    per_problem=per_problem))
    return out
