"""Metrics over stored samples: pass@k, maj@k, avg@k, bootstrap intervals, breakdowns.

Every metric is a mean over problems of a per-problem score in [0, 1], so one
percentile bootstrap over problems (:func:`bootstrap_means`, all metrics and
all k at once) gives every interval.  Inputs are the arrays of a
:class:`~rlvr.evaluate.samples.ScoredSet`: ``correct`` [P, n] bool and the
voting keys ``extracted`` (P lists of n strings or None).

* **pass@k** (:func:`pass_at_k`): probability that at least one of k samples
  drawn without replacement from the n is correct, by the unbiased estimator of
  Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1)
  ``1 - C(n-c, k) / C(n, k)``, computed as the stable product
  ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (no big binomials).
* **maj@k** (:func:`maj_at_k`): probability that a majority vote over k random
  samples picks a correct answer (self-consistency, Wang et al. 2022).
* **avg@k** (:func:`avg_at_k`): expected accuracy of one sample, ``c / n`` per
  problem; the mean accuracy of k random samples has this expectation for every
  k, so avg@k does not depend on k (it is estimated from all n samples).

A metric at exactly 0 or 1 (every problem scores 0, or every one 1) has a degenerate
bootstrap interval ([0%, 0%]: every resample is the same); it gets the Wilson score interval
over the P problems instead (:func:`rlvr.evaluate.stats.wilson_interval`: 0 of 40 problems ->
[0%, 8.8%]), marked ``"ci_method": "wilson"`` in its row.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any, Sequence

import numpy as np

__all__ = [
    "pass_at_k",
    "pass_at_k_matrix",
    "vote_labels",
    "maj_at_k",
    "avg_at_k",
    "bootstrap_means",
    "compute_metrics",
    "breakdown",
    "METRICS",
    "answer_entropy",
    "support_change",
    "calibration_metrics",
    "expected_calibration_error",
]

METRICS = ("pass@k", "maj@k", "avg@k")


# ------------------------------------------------------------------------- pass@k
def pass_at_k(n: int | np.ndarray, c: int | np.ndarray, k: int) -> float | np.ndarray:
    """Unbiased pass@k estimate from ``c`` correct out of ``n`` samples (Chen et al. 2021).

    ``1 - C(n-c, k) / C(n, k)``, i.e. one minus the chance that a k-subset drawn
    without replacement holds no correct sample, evaluated as
    ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``; it is 1 when ``n - c < k``.
    ``n`` and ``c`` may be arrays (broadcast); needs ``1 <= k <= n``.

    Example: n=4, c=1, k=2: ``1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5``.
    """
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64))
    if k < 1 or np.any(k > n_arr):
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        raise ValueError("pass@k needs 0 <= c <= n")
    out = np.empty(n_arr.shape, dtype=float)
    for nv in np.unique(n_arr):
        # table[c] for every c in 0..nv, by cumulative products over i = nv, nv-1, ...
        i = np.arange(nv, 0, -1, dtype=float)  # nv, nv-1, ..., 1
        table = 1.0 - np.concatenate([[1.0], np.cumprod(1.0 - k / i)])  # table[c] = 1 - prod over the top c i's
        table[np.arange(nv + 1) > nv - k] = 1.0  # fewer than k wrong samples: every k-subset has a right one
        sel = n_arr == nv
        out[sel] = table[c_arr[sel]]
    return float(out) if out.ndim == 0 else out


def pass_at_k_matrix(correct: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Per-problem pass@k [P, len(ks)] from a boolean ``correct`` [P, n]."""
    correct = np.asarray(correct, dtype=bool)
    n, c = correct.shape[1], correct.sum(1)
    return np.stack([pass_at_k(n, c, k) for k in ks], axis=1) if len(c) else np.zeros((0, len(ks)))


# -------------------------------------------------------------------------- maj@k
def vote_labels(extracted: Sequence[Sequence[str | None]], correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer bucket labels [P, n] (-1: no answer) and, per bucket, whether it is correct [P, n].

    Samples with equal voting keys share a bucket.  A bucket counts as correct
    when any of its samples was judged correct (its answer is right even if
    some copy of it was rejected, e.g. as hedged).
    """
    correct = np.asarray(correct, dtype=bool)
    P, n = correct.shape
    labels = np.full((P, n), -1, dtype=np.int64)
    bucket_ok = np.zeros((P, n), dtype=bool)
    for i, row in enumerate(extracted):
        ids: dict[str, int] = {}
        for j, key in enumerate(row):
            if key is None:
                continue
            b = ids.setdefault(key, len(ids))
            labels[i, j] = b
            bucket_ok[i, b] |= correct[i, j]
    return labels, bucket_ok


def _vote_scores(sel: np.ndarray, bucket_ok: np.ndarray) -> np.ndarray:
    """Mean over subsets of the vote's correctness; ``sel`` [P, R, k] labels, ``bucket_ok`` [P, n]."""
    P, R, k = sel.shape
    n = bucket_ok.shape[1]
    valid = sel >= 0
    flat = ((np.arange(P)[:, None, None] * R + np.arange(R)[None, :, None]) * n + np.where(valid, sel, 0))
    counts = np.bincount(flat[valid], minlength=P * R * n).reshape(P, R, n)
    top = counts.max(-1, keepdims=True)
    winners = (counts == top) & (top > 0)
    n_win = winners.sum(-1)
    n_ok = (winners & bucket_ok[:, None, :]).sum(-1)
    score = np.where(n_win > 0, n_ok / np.maximum(n_win, 1), 0.0)
    return score.mean(1)


def maj_at_k(labels: np.ndarray, bucket_ok: np.ndarray, ks: Sequence[int], *, num_subsets: int = 64,
             seed: int = 0) -> np.ndarray:
    """Per-problem maj@k [P, len(ks)]: expected correctness of a majority vote over k of the n samples.

    The vote takes the most frequent voting key among the k samples (samples
    without an answer do not vote).  **Ties**: when t answers share the top
    count and c of them are correct, the vote scores ``c / t`` (a uniformly
    random tie-break, in expectation).  No answer at all scores 0.

    **Which k samples**: the expectation over all ``C(n, k)`` subsets, like
    pass@k, so the result does not depend on the order the samples were drawn
    in and is comparable across k.  When ``C(n, k) <= num_subsets`` every subset
    is enumerated (exact; always for k = n and k = 1); otherwise the mean over
    ``num_subsets`` random k-subsets per problem (Monte-Carlo, seeded, so
    reproducible).  Its error per problem is at most ``0.5 / sqrt(num_subsets)``
    and shrinks by another ``sqrt(P)`` in the mean over P problems (< 0.3
    points at P=500, 64 subsets), far inside the bootstrap interval; the
    "first k samples" convention instead scores one arbitrary subset, adding
    the full subset-to-subset variance.
    """
    labels = np.asarray(labels)
    P, n = labels.shape
    rng = np.random.default_rng(seed)
    out = np.zeros((P, len(ks)))
    if P == 0:
        return out
    for col, k in enumerate(ks):
        if not 1 <= k <= n:
            raise ValueError(f"maj@k needs 1 <= k <= n, got k={k}, n={n}")
        if math.comb(n, k) <= num_subsets:
            subsets = np.array(list(combinations(range(n), k)), dtype=np.int64)  # [C, k]
            idx = np.broadcast_to(subsets, (P, *subsets.shape))
        else:
            idx = np.argsort(rng.random((P, num_subsets, n)), axis=-1)[..., :k]
        sel = np.take_along_axis(np.broadcast_to(labels[:, None, :], (P, idx.shape[1], n)), idx, axis=-1)
        out[:, col] = _vote_scores(sel, bucket_ok)
    return out


# -------------------------------------------------------------------------- avg@k
def avg_at_k(correct: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Per-problem avg@k [P, len(ks)]: ``c / n`` for every k (the expected accuracy of a sample)."""
    correct = np.asarray(correct, dtype=bool)
    n = correct.shape[1]
    for k in ks:
        if not 1 <= k <= n:
            raise ValueError(f"avg@k needs 1 <= k <= n, got k={k}, n={n}")
    acc = correct.mean(1) if n else np.zeros(len(correct))
    return np.repeat(acc[:, None], len(ks), axis=1)


# ---------------------------------------------------------------------- bootstrap
def bootstrap_means(values: np.ndarray, *, n_resamples: int = 2000, confidence: float = 0.95,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval (Efron 1979) of the mean over problems of every column of ``values`` [P, M].

    Resamples problems with replacement (the same resamples for every column, so
    intervals of different metrics come from one bootstrap), as a count matrix
    ``W`` [B, P] and one matrix product ``W @ values / P``.  Same method and seed
    convention as :func:`rlvr.evaluate.stats.bootstrap_ci`.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    P = v.shape[0]
    if P == 0:
        raise ValueError("bootstrap needs at least one problem")
    from rlvr.evaluate.stats import bootstrap_indices

    (draws,) = bootstrap_indices(P, n_resamples, seed)  # the same resamples as bootstrap_ci
    counts = np.bincount((np.arange(n_resamples)[:, None] * P + draws).ravel(),
                         minlength=n_resamples * P).reshape(n_resamples, P)
    means = counts @ v / P  # [B, M]
    alpha = 1 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


# ------------------------------------------------------------------------ summary
def _ks(n: int, ks: Sequence[int] | None) -> list[int]:
    if ks is None:
        return list(range(1, n + 1))
    bad = [k for k in ks if not 1 <= int(k) <= n]
    if bad:
        raise ValueError(f"k must be in 1..n={n}, got {bad}")
    return sorted({int(k) for k in ks})


def _per_problem(correct, extracted, ks, num_subsets, seed) -> dict[str, np.ndarray]:
    labels, bucket_ok = vote_labels(extracted, correct)
    return {"pass@k": pass_at_k_matrix(correct, ks), "maj@k": maj_at_k(labels, bucket_ok, ks,
                                                                        num_subsets=num_subsets, seed=seed),
            "avg@k": avg_at_k(correct, ks)}


def _summarise(per: dict[str, np.ndarray], ks: list[int], n_resamples: int, confidence: float,
               seed: int) -> dict[str, Any]:
    from rlvr.evaluate.stats import wilson_interval

    stacked = np.concatenate([per[m] for m in METRICS], axis=1)
    lo, hi = bootstrap_means(stacked, n_resamples=n_resamples, confidence=confidence, seed=seed)
    mean = stacked.mean(0)
    P = stacked.shape[0]
    out: dict[str, Any] = {}
    for mi, m in enumerate(METRICS):
        rows = {}
        for ki, k in enumerate(ks):
            col = mi * len(ks) + ki
            row = {"value": float(mean[col]), "ci_low": float(lo[col]), "ci_high": float(hi[col])}
            if np.all(stacked[:, col] == 0) or np.all(stacked[:, col] == 1):  # the bootstrap cannot move
                ci_low, ci_high = wilson_interval(float(stacked[:, col].sum()), P, confidence)
                row.update(ci_low=ci_low, ci_high=ci_high, ci_method="wilson")
            rows[str(k)] = row
        out[m] = rows
    return out


def compute_metrics(correct: np.ndarray, extracted: Sequence[Sequence[str | None]], *,
                    ks: Sequence[int] | None = None, num_subsets: int = 64, n_resamples: int = 2000,
                    confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """pass@k, maj@k and avg@k for each k (default every k in 1..n), each with a bootstrap interval.

    Returns ``{"num_problems", "n", "ks", "confidence", "pass@k": {"1": {"value", "ci_low",
    "ci_high"}, ...}, "maj@k": {...}, "avg@k": {...}}`` (k keys are strings, as in JSON).
    """
    correct = np.asarray(correct, dtype=bool)
    if correct.ndim != 2 or correct.shape[0] == 0:
        raise ValueError(f"correct must be a non-empty [problems, n] array, got shape {correct.shape}")
    ks = _ks(correct.shape[1], ks)
    per = _per_problem(correct, extracted, ks, num_subsets, seed)
    return {"num_problems": int(correct.shape[0]), "n": int(correct.shape[1]), "ks": ks,
            "confidence": confidence, **_summarise(per, ks, n_resamples, confidence, seed)}


def breakdown(correct: np.ndarray, extracted: Sequence[Sequence[str | None]], metadata: Sequence[dict],
              field: str, *, ks: Sequence[int] | None = None, num_subsets: int = 64, n_resamples: int = 2000,
              confidence: float = 0.95, seed: int = 0) -> dict[str, dict[str, Any]]:
    """:func:`compute_metrics` for each value of ``metadata[i][field]`` (e.g. MATH-500 subject or level).

    Problems without the field are left out; groups are sorted by value (numbers
    numerically).  Per-problem scores are computed once and bootstrapped within
    each group.  Returns ``{}`` when no problem has the field.
    """
    correct = np.asarray(correct, dtype=bool)
    ks = _ks(correct.shape[1], ks)
    values = [m.get(field) if isinstance(m, dict) else None for m in metadata]
    if all(v is None for v in values):
        return {}
    per = _per_problem(correct, extracted, ks, num_subsets, seed)
    groups: dict[Any, list[int]] = {}
    for i, v in enumerate(values):
        if v is not None:
            groups.setdefault(v, []).append(i)
    order = sorted(groups, key=lambda v: (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))
    out = {}
    for v in order:
        idx = np.array(groups[v])
        sub = {m: a[idx] for m, a in per.items()}
        out[str(v)] = {"num_problems": int(len(idx)), **_summarise(sub, ks, n_resamples, confidence, seed)}
    return out


# ------------------------------------------------------------------------ diagnostics (Invisible Leash; RLCR)
def answer_entropy(extracted: Sequence[str | None]) -> float:
    """The Shannon entropy, in bits, of one problem's empirical distribution of final answers.

    Wu et al. 2025 ("The Invisible Leash: Why RLVR May Not Escape Its Origin") track answer-level entropy
    ``H = -sum_a p(a) log2 p(a)`` over the n samples' answers (``p(a)``: the share of samples whose normalised
    answer, the vote key, is ``a``; samples with no answer form one bucket of their own): 0 when every sample
    gives the same answer, ``log2 n`` when all differ.  Its fall under RL is the precision gain; together with
    :func:`support_change` it tells sharpening from new solutions.
    """
    n = len(extracted)
    if n == 0:
        return 0.0
    counts: dict[Any, int] = {}
    for a in extracted:
        key = ("<no answer>",) if a is None else a
        counts[key] = counts.get(key, 0) + 1
    p = np.asarray(list(counts.values()), dtype=float) / n
    return float(-(p * np.log2(p)).sum() + 0.0)


def support_change(base: dict[str, int], trained: dict[str, int]) -> dict[str, Any]:
    """How a trained policy's empirical support moved against the base's, over the problems both evaluated.

    Wu et al. 2025 (Invisible Leash, Sec. 4): with ``c_i`` the correct samples of problem ``i`` (at the n each
    was sampled), a problem is *preserved* when both solve it at least once, *shrunk* when only the base does
    (support lost), *expanded* when only the trained policy does (new support), *out of support* when neither.
    ``base`` / ``trained``: problem id -> number of correct samples.  Returns the four counts, their ids
    (shrunk and expanded, sorted) and ``shared`` (problems in both).
    """
    shared = sorted(set(base) & set(trained))
    kinds = {"preserved": [], "shrunk": [], "expanded": [], "out_of_support": []}
    for pid in shared:
        b, t = base[pid] > 0, trained[pid] > 0
        kinds["preserved" if b and t else "shrunk" if b else "expanded" if t else "out_of_support"].append(pid)
    return {"shared": len(shared), **{k: len(v) for k, v in kinds.items()},
            "shrunk_ids": kinds["shrunk"], "expanded_ids": kinds["expanded"]}


def calibration_metrics(confidences: Sequence[float | None], correct: Sequence[bool], *,
                        bins: int = 10) -> dict[str, Any] | None:
    """Calibration of the confidences a policy states (RLCR's evaluation), or None when none is stated.

    Over the samples that state one confidence ``q`` in [0, 1] (see
    :func:`rlvr.rewards.functions.calibration.stated_confidence`): the Brier score ``mean (q - c)^2`` and the
    expected calibration error ``ECE = sum_b |B_b|/N * |acc(B_b) - conf(B_b)|`` over ``bins`` equal-width bins
    (Guo et al. 2017; Damani et al. 2025, "Beyond Binary Rewards", Sec. 5), with ``stated_fraction`` (the share
    of all samples that state one) and ``accuracy_stated`` / ``mean_confidence`` over the stated ones.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    pairs = [(float(q), float(bool(c))) for q, c in zip(confidences, correct) if q is not None]
    if not pairs:
        return None
    q = np.asarray([p[0] for p in pairs])
    y = np.asarray([p[1] for p in pairs])
    ece = expected_calibration_error(q, y, bins)
    return {"num_stated": len(pairs), "stated_fraction": len(pairs) / max(1, len(confidences)),
            "brier": float(((q - y) ** 2).mean()), "ece": float(ece), "bins": bins,
            "accuracy_stated": float(y.mean()), "mean_confidence": float(q.mean())}


def expected_calibration_error(probs: Sequence[float], labels: Sequence[float], bins: int = 10) -> float:
    """ECE (Naeini et al. 2015; Guo et al. 2017): ``sum_b |B_b|/N * |mean(label in b) - mean(prob in b)|`` over
    ``bins`` equal-width bins of [0, 1] (the last bin closed).  NaN for no data."""
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=float)
    if len(p) == 0:
        return math.nan
    idx = np.minimum((p * bins).astype(int), bins - 1)
    ece = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            ece += sel.mean() * abs(y[sel].mean() - p[sel].mean())
    return float(ece)
