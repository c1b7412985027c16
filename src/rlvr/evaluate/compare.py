"""Comparing runs beyond noise: IQM, stratified bootstrap intervals, probability of improvement.

Follows R. Agarwal, M. Schwarzer, P. S. Castro, A. Courville, M. G. Bellemare,
"Deep Reinforcement Learning at the Edge of the Statistical Precipice" (NeurIPS 2021):

* **IQM** (interquartile mean): the mean of the middle 50% of all run x task
  scores, i.e. ``scipy.stats.trim_mean(scores, 0.25, axis=None)``: sort the
  ``n`` scores, drop ``floor(n / 4)`` from each end, average the rest.  Robust to
  an outlier run like the median, but far less variable.
* **Stratified bootstrap**: resample with replacement *within each task* (the
  strata), recompute the statistic, take percentile intervals.
* **Probability of improvement** ``P(B > A) = 1/T sum_t P(B_t > A_t)`` with
  ``P(B_t > A_t) = 1/(N M) sum_i sum_j S(b_{t,i}, a_{t,j})``, ``S = 1`` if
  ``b > a``, ``1/2`` if equal, ``0`` otherwise (the Mann-Whitney U statistic).

Data model.  A *run* is one evaluation of one method on one task (one seed); it
holds a score per problem (accuracy of that problem's samples, in [0, 1]).  A
method's data is ``{task: array [runs, problems]}``; its run x task score matrix
is the mean over problems.  LM evaluations often have a single run (seed) per
task, where Agarwal's bootstrap over runs has nothing to resample; the finite
problem set is then the main source of noise.  So the bootstrap here resamples,
within each task, the runs **and** the problems (``resample="runs+problems"``,
default; problems are drawn with the same indices for A and B when both saw the
same problems, a paired bootstrap).  ``resample="runs"`` is Agarwal's procedure
exactly (problems fixed).

Two seed sweeps (``rlvr compare A B`` on two ``seeds.json`` summaries or two ``--seeds``
root directories, :func:`compare_seed_summaries`).  Each side is one configuration trained
with several seeds; a seed's score is its final held-out accuracy (per evaluation key:
``greedy``, ``T=1.0``, ...), and the question is whether B's distribution over seeds sits
above or below A's by more than the seed-to-seed spread.  For each key:

* **Differences** ``median(B) - median(A)`` and ``mean(B) - mean(A)`` over the finished seeds.
* **Two-level bootstrap interval** for both differences (:func:`stratified_bootstrap`,
  ``runs+problems``): each replicate draws A's seeds and B's seeds with replacement
  (separately: seed ``s`` of A and seed ``s`` of B share nothing that makes them a pair), then
  one draw of the held-out problems with replacement, shared by every seed of both sides when
  both were evaluated on the same problems (same ``task.*`` and ``eval.*`` keys), and
  recomputes every drawn seed's accuracy on the drawn problems.  The problems are crossed with
  the seeds (every seed answers the same problems), so they are drawn once per replicate
  rather than once per seed, which would understate the noise of the finite held-out set;
  sharing the draw between A and B pairs the two sides on the same problems, so a problem that
  is hard for both does not widen the interval of the difference.  The percentile interval
  at ``confidence`` (default 95%) is reported.
* **Permutation test over seeds** (:func:`rlvr.evaluate.stats.permutation_test`):
  two-sided, on the difference of the mean final accuracy.  Up to 200,000 splits of the pooled
  ``n_A + n_B`` seeds into groups of ``n_A`` and ``n_B`` (5 + 5 seeds: 252; 10 + 10: 184,756) every
  split is enumerated, so the p-value is exact at any sample size; beyond that (16 + 16: 601 million)
  ``PERMUTATION_RESAMPLES`` random splits are drawn (``p = (k + 1) / (n + 1)``, still a valid test;
  the table's footnote says which).  It stays valid where the bootstrap is too narrow (with few
  seeds a bootstrap cannot see values it did not draw).
* **P(B > A)**: the Mann-Whitney probability that a random seed of B ends above a random seed
  of A (ties count 1/2), the rank statistic behind the Mann-Whitney U test.

Verdict: B (or A) wins *beyond seed noise* only when both the interval of the mean difference
excludes 0 and the permutation p-value is below ``1 - confidence``; otherwise the comparison
is **not resolved**, with the reason(s): the interval covers 0, the p-value is too large, or
the numbers of seeds are too small for the test ever to reach that level (3 + 3 seeds: the
smallest possible p is 2/20 = 0.1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rlvr.evaluate.stats import permutation_test

__all__ = [
    "iqm",
    "run_scores",
    "stratified_bootstrap",
    "stratified_bootstrap_ci",
    "probability_of_improvement",
    "Comparison",
    "compare_methods",
    "load_run",
    "load_methods",
    "RunFileError",
    "format_comparison",
    "SeedComparison",
    "seed_scores",
    "compare_seed_summaries",
    "format_seed_comparisons",
    "load_seed_summary_file",
    "seed_comparison_plot_data",
    "plot_seed_comparison",
]

RESAMPLE_MODES = ("runs", "problems", "runs+problems")
PERMUTATION_RESAMPLES = 100_000
"""Random splits the seeds' permutation test draws when there are more than 200,000 to enumerate."""


class RunFileError(ValueError):
    """A results file that cannot be read as a run (the message names the file)."""


def iqm(scores, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean (Agarwal et al. 2021): mean of the scores left after dropping the lowest and
    highest ``floor(n / 4)``, over all entries (``axis=None``) or along ``axis``.

    Equals ``scipy.stats.trim_mean(scores, 0.25, axis)``.  ``iqm([1, 2, 3, 4, 100]) == 3.0``
    (``n = 5``: drop one each side, mean of 2, 3, 4).
    """
    x = np.asarray(scores, dtype=float)
    if axis is None:
        x, axis = x.reshape(-1), 0
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    if n == 0:
        raise ValueError("iqm needs at least one score")
    k = int(0.25 * n)
    out = np.sort(x, axis=-1)[..., k:n - k].mean(-1)
    return float(out) if out.ndim == 0 else out


def run_scores(data: Mapping[str, np.ndarray]) -> np.ndarray:
    """Run x task score matrix ``[R, T]`` (mean over problems) from ``{task: [runs, problems]}``.

    Every task must have the same number of runs (Agarwal's layout); use
    :func:`iqm` on a flat list when they differ.
    """
    cols = [np.asarray(v, dtype=float).mean(-1) for v in data.values()]
    if len({len(c) for c in cols}) != 1:
        raise ValueError("every task needs the same number of runs for a run x task matrix; got "
                         + ", ".join(f"{t}: {len(c)}" for t, c in zip(data, cols)))
    return np.stack(cols, axis=1)


def _as_tasks(data) -> dict[str, np.ndarray]:
    """Accept ``{task: [runs, problems]}`` or a run x task matrix ``[R, T]`` (one 'problem' per cell)."""
    if isinstance(data, Mapping):
        out = {}
        for t, v in data.items():
            a = np.asarray(v, dtype=float)
            if a.ndim == 1:
                a = a[None, :]  # one run
            if a.ndim != 2 or a.size == 0:
                raise ValueError(f"task {t!r}: expected a [runs, problems] array, got shape {a.shape}")
            out[str(t)] = a
        return out
    m = np.asarray(data, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"expected a run x task matrix, got shape {m.shape}")
    return {str(t): m[:, t:t + 1] for t in range(m.shape[1])}


def stratified_bootstrap(datas: Sequence[Mapping[str, np.ndarray]], n_resamples: int = 2000, seed: int = 0,
                         resample: str = "runs+problems", paired: bool = True) -> list[np.ndarray]:
    """Bootstrap replicates of each method's run x task matrix, stratified by task.

    For each replicate and each task independently: runs are drawn with
    replacement (separately per method, runs are not paired) and, unless
    ``resample == "runs"``, problems are drawn with replacement with the *same*
    indices for every method whose task has the same number of problems (paired:
    the methods answered the same problems; ``paired=False`` draws them separately
    per method, for problem sets that only happen to have the same size).  Returns
    one ``[n_resamples, R*T]`` array per method: the flattened resampled matrix of
    each replicate.
    """
    if resample not in RESAMPLE_MODES:
        raise ValueError(f"resample must be one of {RESAMPLE_MODES}, got {resample!r}")
    datas = [_as_tasks(d) for d in datas]
    tasks = list(datas[0])
    for d in datas[1:]:
        if set(d) != set(tasks):
            raise ValueError(f"methods cover different tasks: {sorted(tasks)} vs {sorted(d)}")
    rng = np.random.default_rng(seed)
    cols: list[list[np.ndarray]] = [[] for _ in datas]
    for t in tasks:
        num_problems = {d[t].shape[1] for d in datas}
        shared = None
        if resample != "runs" and len(num_problems) == 1 and paired:
            shared = rng.integers(0, num_problems.pop(), size=(n_resamples, datas[0][t].shape[1]))
        for m, d in enumerate(datas):
            a = d[t]  # [R, P]
            R, P = a.shape
            if resample == "runs":
                per_run = np.broadcast_to(a.mean(1), (n_resamples, R))  # [B, R]
            else:
                idx = shared if shared is not None else rng.integers(0, P, size=(n_resamples, P))
                per_run = a[:, idx].mean(-1).T  # [B, R]
            if resample != "problems" and R > 1:
                ridx = rng.integers(0, R, size=(n_resamples, R))
                per_run = np.take_along_axis(per_run, ridx, axis=1)
            cols[m].append(np.asarray(per_run))
    return [np.concatenate(c, axis=1) for c in cols]


def stratified_bootstrap_ci(data, stat=iqm, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                            resample: str = "runs+problems") -> tuple[float, float]:
    """Percentile interval of ``stat`` (default :func:`iqm`) of one method's run x task scores
    under the stratified bootstrap (Agarwal et al. 2021, Sec. 4).  ``stat`` takes ``axis``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    (reps,) = stratified_bootstrap([data], n_resamples, seed, resample)
    vals = np.asarray(stat(reps, axis=1), dtype=float)
    lo, hi = np.quantile(vals, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def _poi(a_runs: np.ndarray, b_runs: np.ndarray) -> np.ndarray:
    """P(b > a) per replicate for one task: Mann-Whitney over run pairs; inputs ``[..., R]``."""
    diff = b_runs[..., :, None] - a_runs[..., None, :]
    return ((diff > 0) + 0.5 * (diff == 0)).mean(axis=(-1, -2))


def probability_of_improvement(a, b) -> float:
    """``P(B > A)`` (Agarwal et al. 2021, Sec. 5): average over tasks of the Mann-Whitney probability
    that a random run of B scores above a random run of A on that task (ties count 1/2).

    ``a``, ``b``: run x task matrices ``[R, T]`` (runs may differ in number) or ``{task: [runs, problems]}``.
    """
    da, db = _as_tasks(a), _as_tasks(b)
    if set(da) != set(db):
        raise ValueError(f"methods cover different tasks: {sorted(da)} vs {sorted(db)}")
    return float(np.mean([_poi(da[t].mean(1), db[t].mean(1)) for t in da]))


@dataclass
class Comparison:
    """Result of :func:`compare_methods` for a baseline A and a candidate B."""

    name_a: str
    name_b: str
    iqm_a: float
    iqm_b: float
    ci_a: tuple[float, float]
    ci_b: tuple[float, float]
    mean_a: float
    mean_b: float
    diff: float
    """IQM(B) - IQM(A)."""
    diff_ci: tuple[float, float]
    poi: float
    """P(B > A)."""
    poi_ci: tuple[float, float]
    confidence: float
    resample: str
    num_tasks: int
    runs_a: int
    runs_b: int
    significant: bool
    """True when the interval of IQM(B) - IQM(A) excludes 0."""
    details: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        pct = int(round(self.confidence * 100))
        d = f"{self.diff:+.1%} IQM [{self.diff_ci[0]:+.1%}, {self.diff_ci[1]:+.1%}]"
        if self.significant and self.diff > 0:
            head = f"{self.name_b} beats {self.name_a} beyond noise"
        elif self.significant:
            head = f"{self.name_b} is worse than {self.name_a} beyond noise"
        else:
            head = f"no significant difference between {self.name_b} and {self.name_a}"
        return (f"{head}: {d} ({pct}% stratified bootstrap interval, {self.resample} resampled), "
                f"P({self.name_b} > {self.name_a}) = {self.poi:.2f} [{self.poi_ci[0]:.2f}, {self.poi_ci[1]:.2f}].")

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["verdict"] = self.verdict
        return d


def compare_methods(a, b, *, name_a: str = "A", name_b: str = "B", n_resamples: int = 2000,
                    confidence: float = 0.95, seed: int = 0, resample: str = "runs+problems") -> Comparison:
    """Does B beat A beyond noise, and by how much?

    ``a``, ``b``: ``{task: [runs, problems]}`` arrays of per-problem scores (or run x task matrices).
    Both methods are resampled in the same stratified bootstrap replicates
    (:func:`stratified_bootstrap`); the interval of ``IQM(B) - IQM(A)`` is the
    percentile interval of the per-replicate differences, and B is declared
    different when that interval excludes 0.  ``P(B > A)`` gets an interval the same way.
    """
    da, db = _as_tasks(a), _as_tasks(b)
    ra, rb = stratified_bootstrap([da, db], n_resamples, seed, resample)
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    ia, ib = iqm(ra, axis=1), iqm(rb, axis=1)
    lo, hi = np.quantile(ib - ia, q)
    # P(B > A) per replicate: reshape the flat [B, sum_t R_t] replicates back into tasks
    poi_reps, oa, ob = [], 0, 0
    for t in da:
        na, nb = da[t].shape[0], db[t].shape[0]
        poi_reps.append(_poi(ra[:, oa:oa + na], rb[:, ob:ob + nb]))
        oa, ob = oa + na, ob + nb
    poi_reps = np.mean(poi_reps, axis=0)
    flat_a = np.concatenate([v.mean(1) for v in da.values()])
    flat_b = np.concatenate([v.mean(1) for v in db.values()])
    diff = iqm(flat_b) - iqm(flat_a)
    return Comparison(
        name_a=name_a, name_b=name_b, iqm_a=iqm(flat_a), iqm_b=iqm(flat_b),
        ci_a=tuple(float(x) for x in np.quantile(ia, q)), ci_b=tuple(float(x) for x in np.quantile(ib, q)),
        mean_a=float(flat_a.mean()), mean_b=float(flat_b.mean()), diff=float(diff),
        diff_ci=(float(lo), float(hi)), poi=probability_of_improvement(da, db),
        poi_ci=tuple(float(x) for x in np.quantile(poi_reps, q)), confidence=confidence, resample=resample,
        num_tasks=len(da), runs_a=int(sum(v.shape[0] for v in da.values())),
        runs_b=int(sum(v.shape[0] for v in db.values())), significant=bool(lo > 0 or hi < 0))


# ----------------------------------------------------------------------------------------- files
def load_run(path: str | Path) -> tuple[str, list[str] | None, np.ndarray]:
    """``(task, problem ids or None, per-problem scores)`` of one results file (one run on one task).

    Accepted JSON objects (the task name is ``"task"``, default ``"task"``):

    * ``rlvr eval`` output: ``"per_problem"`` is a list of floats, or of objects
      with ``"id"`` and ``"accuracy"`` / ``"score"`` / ``"mean"``; or a mapping id -> score;
    * the simple format ``{"task": "math500", "scores": {"math500/0": 1.0, ...}}``
      (or ``"scores": [1.0, 0.0, ...]``).

    Scores are per-problem accuracies in [0, 1] (any real number is accepted).
    """
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunFileError(f"{p}: not a JSON file ({e})") from None
    if not isinstance(obj, dict):
        raise RunFileError(f"{p}: expected a JSON object with 'per_problem' or 'scores'")
    task = str(obj.get("task") or "task")
    per = obj.get("per_problem", obj.get("scores"))
    if per is None:
        raise RunFileError(f"{p}: no 'per_problem' or 'scores' field (keys: {', '.join(sorted(obj))})")
    ids: list[str] | None = None
    try:
        if isinstance(per, dict):
            ids, vals = [str(k) for k in per], [float(v) for v in per.values()]
        elif per and isinstance(per[0], dict):
            ids, vals = [], []
            for i, row in enumerate(per):
                key = next((k for k in ("accuracy", "score", "mean", "pass_rate") if k in row), None)
                if key is None or "id" not in row:
                    raise RunFileError(f"{p}: per_problem[{i}] needs 'id' and one of accuracy/score/mean")
                ids.append(str(row["id"]))
                vals.append(float(row[key]))
        else:
            vals = [float(v) for v in per]
    except (TypeError, ValueError) as e:
        if isinstance(e, RunFileError):
            raise
        raise RunFileError(f"{p}: per-problem scores must be numbers ({e})") from None
    if not vals:
        raise RunFileError(f"{p}: no per-problem scores")
    arr = np.asarray(vals, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise RunFileError(f"{p}: per-problem scores must be finite numbers")
    return task, ids, arr


def correct_counts(path: str | Path) -> dict[str, int] | None:
    """Problem id -> correct samples, from an ``rlvr eval`` results file whose ``per_problem`` rows carry
    ``num_correct`` (None for any other file: a simple scores file has no sample counts)."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = obj.get("per_problem") if isinstance(obj, dict) else None
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "num_correct" in r
                                                             and "id" in r for r in rows):
            return None
        return {str(r["id"]): int(r["num_correct"]) for r in rows}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError):
        return None


def load_methods(groups: Sequence[Sequence[str | Path]]) -> list[dict[str, np.ndarray]]:
    """One ``{task: [runs, problems]}`` per method, from results files (one file per run: seeds, tasks).

    Only tasks that every method has are kept.  Within a task, runs (of all
    methods) are aligned by problem id when every file has ids, keeping the
    problems present in all of them, in the first file's order; otherwise by
    position, and then runs of one method must have the same length.  Aligned
    problems let the bootstrap pair A and B on the same problems.
    """
    loaded: list[dict[str, list]] = []
    for paths in groups:
        by_task: dict[str, list] = {}
        for path in paths:
            task, ids, arr = load_run(path)
            by_task.setdefault(task, []).append((Path(path), ids, arr))
        loaded.append(by_task)
    tasks = [t for t in loaded[0] if all(t in m for m in loaded[1:])]
    if not tasks:
        raise RunFileError("the methods share no task: " + "; ".join(", ".join(sorted(m)) for m in loaded))
    out: list[dict[str, np.ndarray]] = [{} for _ in loaded]
    for t in tasks:
        runs = [r for m in loaded for r in m[t]]
        order = None
        if all(ids is not None for _, ids, _ in runs):
            common = set(runs[0][1]).intersection(*[set(ids) for _, ids, _ in runs[1:]])
            order = [i for i in runs[0][1] if i in common]
            if not order:
                raise RunFileError(f"task {t}: the runs share no problem id: " + ", ".join(str(p) for p, _, _ in runs))
        for k, m in enumerate(loaded):
            if order is not None:
                out[k][t] = np.stack([np.asarray([dict(zip(ids, arr))[i] for i in order]) for _, ids, arr in m[t]])
                continue
            lens = {len(arr) for _, _, arr in m[t]}
            if len(lens) != 1:
                raise RunFileError(f"task {t}: runs have different numbers of problems and no ids: "
                                   + ", ".join(f"{p} ({len(a)})" for p, _, a in m[t]))
            out[k][t] = np.stack([arr for _, _, arr in m[t]])
    return out


def format_comparison(c: Comparison) -> str:
    """A small text table (IQM, mean, intervals, runs) plus the verdict sentence."""
    pct = int(round(c.confidence * 100))
    rows = [(c.name_a, c.iqm_a, c.ci_a, c.mean_a, c.runs_a), (c.name_b, c.iqm_b, c.ci_b, c.mean_b, c.runs_b)]
    w = max(8, *(len(r[0]) for r in rows))
    lines = [f"{'method':<{w}}  {'IQM':>7}  {pct}% CI{'':<11}  {'mean':>7}  runs"]
    for name, v, (lo, hi), mean, runs in rows:
        lines.append(f"{name:<{w}}  {v:>7.1%}  [{lo:6.1%}, {hi:6.1%}]  {mean:>7.1%}  {runs}")
    lines.append(c.verdict)
    return "\n".join(lines)



# ----------------------------------------------------------------------------------------- seed sweeps
_SAME_PROBLEMS_IGNORED = ("eval.every", "eval.before_training", "eval.after_training")
_CONFIG_IGNORED = ("train.seed", "train.output_dir", "train.resume", "train.overwrite", "train.progress")


@dataclass
class SeedComparison:
    """:func:`compare_seed_summaries` for one evaluation key: baseline A, candidate B."""

    name_a: str
    name_b: str
    metric: str
    seeds_a: list[int]
    seeds_b: list[int]
    acc_a: list[float]
    """Final accuracy of each of A's finished seeds."""
    acc_b: list[float]
    median_a: float
    median_b: float
    mean_a: float
    mean_b: float
    diff_median: float
    """median(B) - median(A)."""
    diff_median_ci: tuple[float, float]
    diff_mean: float
    """mean(B) - mean(A)."""
    diff_mean_ci: tuple[float, float]
    p_value: float
    """Two-sided permutation test of the mean difference over seeds."""
    min_p: float
    """The smallest p-value the permutation test can give with these numbers of seeds."""
    exact: bool
    poi: float
    """P(B > A) over seed pairs (Mann-Whitney; ties 1/2)."""
    confidence: float
    resample: str
    n_resamples: int
    problems: int
    """Held-out problems per seed that the bootstrap resamples (0: per-problem scores missing, seeds only)."""
    paired: bool
    """Problems drawn with the same indices for A and B (both evaluated on the same held-out set)."""
    resolved: bool
    reasons: list[str] = field(default_factory=list)
    """Why the comparison is not resolved (empty when it is)."""

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    @property
    def verdict(self) -> str:
        pct = int(round(self.confidence * 100))
        nums = (f"mean {self.diff_mean * 100:+.1f} pts [{self.diff_mean_ci[0] * 100:+.1f}, "
                f"{self.diff_mean_ci[1] * 100:+.1f}], median {self.diff_median * 100:+.1f} pts "
                f"[{self.diff_median_ci[0] * 100:+.1f}, {self.diff_median_ci[1] * 100:+.1f}] ({pct}% bootstrap "
                f"intervals of {self.name_b} - {self.name_a}), permutation p = {self.p_value:.3g} over "
                f"{len(self.acc_a)} + {len(self.acc_b)} seeds, P({self.name_b} > {self.name_a}) = {self.poi:.2f}")
        if self.resolved:
            win, lose = (self.name_b, self.name_a) if self.diff_mean > 0 else (self.name_a, self.name_b)
            return f"{self.metric}: {win} beats {lose} beyond seed noise: {nums}."
        return f"{self.metric}: not resolved ({'; '.join(self.reasons)}): {nums}."

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["verdict"] = self.verdict
        return d


def load_seed_summary_file(path: str | Path) -> dict:
    """A ``seeds.json`` written by ``rlvr train --seeds`` / ``rlvr seeds summarize`` (the message names the file)."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunFileError(f"{p}: not a JSON file ({e})") from None
    if not isinstance(obj, dict) or obj.get("kind") != "rlvr.seeds" or "runs" not in obj:
        raise RunFileError(f"{p}: not a seeds summary (seeds.json of `rlvr train --seeds`)")
    return obj


def seed_scores(summary: dict, metric: str) -> tuple[list[int], np.ndarray, np.ndarray | None]:
    """``(seeds, final accuracy per seed [S], per-problem scores [S, P] or None)`` of a seeds summary's finished
    seeds for one evaluation key; the matrix is None when a seed lacks per-problem scores or their counts differ."""
    seeds, acc, per = [], [], []
    for r in summary["runs"]:
        if r.get("status") == "finished" and metric in r.get("after", {}):
            seeds.append(int(r["seed"]))
            acc.append(float(r["after"][metric]))
            per.append(r.get("per_problem_after", {}).get(metric))
    matrix = None
    if per and all(p for p in per) and len({len(p) for p in per}) == 1:
        matrix = np.asarray(per, dtype=float)
    return seeds, np.asarray(acc, dtype=float), matrix


def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def config_differences(a: dict | None, b: dict | None) -> dict[str, tuple]:
    """``{dotted key: (value in a, value in b)}`` for the keys two seed summaries' configs set differently
    (``train.seed``, the output directory, ``train.resume``, ``train.overwrite`` and ``train.progress`` ignored:
    none of them alters what is trained)."""
    fa, fb = _flat(a or {}), _flat(b or {})
    keys = set(fa) | set(fb)
    # a field unset (None) on one side and a mapping on the other shows as the mapping's own keys only
    parents = {k for k in keys if any(o.startswith(k + ".") for o in keys)}
    return {k: (fa.get(k), fb.get(k)) for k in sorted(keys - parents)
            if k not in _CONFIG_IGNORED and json.dumps(fa.get(k), default=str) != json.dumps(fb.get(k), default=str)}


def compare_seed_summaries(a: dict, b: dict, *, name_a: str = "A", name_b: str = "B",
                           metrics: Sequence[str] | None = None, n_resamples: int = 2000, confidence: float = 0.95,
                           seed: int = 0, resample: str = "runs+problems") -> list[SeedComparison]:
    """Does B beat A beyond seed noise?  One :class:`SeedComparison` per evaluation key both summaries have
    (or ``metrics``); the method is in the module docstring.  ``a``, ``b``: seeds summaries (``seeds.json``)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    keys = [k for k in a.get("metric_keys", []) if k in b.get("metric_keys", [])] if metrics is None else list(metrics)
    if not keys:
        raise ValueError(f"{name_a} and {name_b} share no evaluation key ({a.get('metric_keys')} vs "
                         f"{b.get('metric_keys')})")
    diffs = config_differences(a.get("config"), b.get("config"))
    same_problems = not any(k.startswith(("task.", "eval.")) and k not in _SAME_PROBLEMS_IGNORED for k in diffs)
    q = [(1 - confidence) / 2, (1 + confidence) / 2]
    out = []
    for key in keys:
        sa, xa, ma = seed_scores(a, key)
        sb, xb, mb = seed_scores(b, key)
        for name, s in ((name_a, sa), (name_b, sb)):
            if not s:
                raise ValueError(f"{name}: no finished seed with a final {key!r} accuracy")
        per_problem = ma is not None and mb is not None
        da = {"heldout": ma if per_problem else xa[:, None]}
        db = {"heldout": mb if per_problem else xb[:, None]}
        mode = resample if per_problem else "runs"
        ra, rb = stratified_bootstrap([da, db], n_resamples, seed, mode, paired=same_problems)
        d_mean = rb.mean(1) - ra.mean(1)
        d_med = np.median(rb, 1) - np.median(ra, 1)
        mean_ci = tuple(float(v) for v in np.quantile(d_mean, q))
        med_ci = tuple(float(v) for v in np.quantile(d_med, q))
        perm = permutation_test(xa, xb, seed=seed, n_resamples=PERMUTATION_RESAMPLES)
        alpha = 1 - confidence
        reasons = []
        if mean_ci[0] <= 0 <= mean_ci[1]:
            reasons.append(f"the {int(round(confidence * 100))}% interval of the mean difference covers 0")
        if perm["min_p"] >= alpha:
            reasons.append(f"with {len(xa)} + {len(xb)} seeds the permutation test cannot reach p < {alpha:.2g} "
                           f"(smallest possible p = {perm['min_p']:.3g}): add seeds")
        elif perm["p_value"] >= alpha:
            reasons.append(f"permutation p = {perm['p_value']:.3g} >= {alpha:.2g}")
        out.append(SeedComparison(
            name_a=name_a, name_b=name_b, metric=key, seeds_a=sa, seeds_b=sb, acc_a=xa.tolist(), acc_b=xb.tolist(),
            median_a=float(np.median(xa)), median_b=float(np.median(xb)), mean_a=float(xa.mean()),
            mean_b=float(xb.mean()), diff_median=float(np.median(xb) - np.median(xa)), diff_median_ci=med_ci,
            diff_mean=float(xb.mean() - xa.mean()), diff_mean_ci=mean_ci, p_value=perm["p_value"],
            min_p=perm["min_p"], exact=perm["exact"], poi=float(_poi(xa, xb)), confidence=confidence,
            resample=mode, n_resamples=n_resamples, problems=int(ma.shape[1]) if per_problem else 0,
            paired=bool(same_problems and per_problem and ma.shape[1] == mb.shape[1]),
            resolved=not reasons, reasons=reasons))
    return out


def format_seed_comparisons(comps: Sequence[SeedComparison], a: dict, b: dict) -> str:
    """A table (per key: each side's median and mean over seeds, the differences with intervals, P(B > A), p)
    followed by one verdict line per key and what else differs between the two sweeps."""
    if not comps:
        return ""
    c0 = comps[0]
    pct = int(round(c0.confidence * 100))
    lines = [f"{c0.name_a} ({len(c0.acc_a)} seeds) vs {c0.name_b} ({len(c0.acc_b)} seeds): final held-out accuracy"]
    diffs = config_differences(a.get("config"), b.get("config"))
    if diffs:
        lines.append(f"{c0.name_b} differs from {c0.name_a} in: " + ", ".join(
            f"{k} ({va!r} -> {vb!r})" for k, (va, vb) in diffs.items()))
    codes_a, codes_b = a.get("run_codes") or [], b.get("run_codes") or []
    if codes_a != codes_b or len(codes_a) > 1:
        lines.append(f"code: {c0.name_a} {', '.join(codes_a) or 'unknown'}; "
                     f"{c0.name_b} {', '.join(codes_b) or 'unknown'} "
                     "(runs made by different code compare the code as well as the setting)")
    head = (f"{'metric':<8} {'A median':>9} {'B median':>9} {'diff median [' + str(pct) + '% CI]':>26} "
            f"{'A mean':>7} {'B mean':>7} {'diff mean [' + str(pct) + '% CI]':>26} {'P(B>A)':>7} {'perm p':>7}")
    lines += ["", head]

    def pts(v: float, ci: tuple[float, float]) -> str:
        return f"{v * 100:+.1f} [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"

    for c in comps:
        lines.append(f"{c.metric:<8} {c.median_a:>9.1%} {c.median_b:>9.1%} {pts(c.diff_median, c.diff_median_ci):>26} "
                     f"{c.mean_a:>7.1%} {c.mean_b:>7.1%} {pts(c.diff_mean, c.diff_mean_ci):>26} {c.poi:>7.2f} "
                     f"{c.p_value:>7.3g}")
    n_splits = math.comb(len(c0.acc_a) + len(c0.acc_b), len(c0.acc_a))
    perm = ("exact permutation test over seeds" if c0.exact else
            f"permutation test over seeds, {PERMUTATION_RESAMPLES:,} random splits of the {n_splits:,}")
    lines.append("(differences in points, B - A; intervals: two-level bootstrap over seeds and held-out problems"
                 + ("" if c0.paired else ", problems not paired") + f"; p: {perm})")
    lines += [""] + [c.verdict for c in comps]
    return "\n".join(lines)


def seed_comparison_plot_data(sweeps: Sequence[dict], metrics: Sequence[str]) -> dict:
    """What :func:`plot_seed_comparison` draws, per evaluation key and sweep: the finished seeds' final
    accuracies and their median, and the held-out curve's median and quartiles over the finished seeds with a curve
    (``seeds``) at each step where every one of them was evaluated (curves are of the summaries' primary key)."""
    out: dict = {"final": {}, "curve": []}
    for key in metrics:
        out["final"][key] = []
        for s in sweeps:
            _, acc, _ = seed_scores(s, key)
            out["final"][key].append({"acc": acc.tolist(), "median": float(np.median(acc)) if acc.size else None})
    for s in sweeps:
        curves = [dict(r["curve"]) for r in s["runs"] if r.get("status") == "finished" and r.get("curve")]
        steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        vals = np.asarray([[c[k] for k in steps] for c in curves], dtype=float) if steps else np.zeros((0, 0))
        out["curve"].append({"seeds": len(curves), "steps": steps,
                             "median": np.median(vals, 0).tolist() if steps else [],
                             "q25": np.quantile(vals, 0.25, 0).tolist() if steps else [],
                             "q75": np.quantile(vals, 0.75, 0).tolist() if steps else []})
    return out


def plot_seed_comparison(sweeps: Sequence[dict], names: Sequence[str], comps: Sequence[SeedComparison],
                         path: str | Path) -> Path:
    """``rlvr compare --plot``: for seed sweeps, the median held-out curve of each sweep with its interquartile band
    over seeds (left), and per evaluation key a strip of every seed's final accuracy with the median as a bar, the
    difference from the baseline with its interval and p in the title (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys(c.metric for c in comps))
    data = seed_comparison_plot_data(sweeps, metrics)
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(4.6 + 3.2 * len(metrics), 4.2),
                             gridspec_kw={"width_ratios": [1.5] + [1] * len(metrics)})
    ax = axes[0]
    for i, (name, c) in enumerate(zip(names, data["curve"])):
        if c["steps"]:
            ax.plot(c["steps"], c["median"], marker="o", ms=3, color=colors(i % 10),
                    label=f"{name} ({c['seeds']} seeds)")
            ax.fill_between(c["steps"], c["q25"], c["q75"], color=colors(i % 10), alpha=0.2, lw=0)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("median over seeds (band: interquartile range)", fontsize=10)
    for j, key in enumerate(metrics):
        strip = axes[1 + j]
        for i, f in enumerate(data["final"][key]):
            acc = sorted(f["acc"])
            offsets = np.linspace(-0.25, 0.25, len(acc)) if len(acc) > 1 else [0.0]
            strip.scatter(i + np.asarray(offsets), acc, color=colors(i % 10), s=22, zorder=3, edgecolor="black",
                          linewidth=0.4)
            if f["median"] is not None:
                strip.hlines(f["median"], i - 0.35, i + 0.35, color="black", lw=2, zorder=2)
        strip.set_xticks(range(len(names)), names, fontsize=8)
        strip.set_xlim(-0.6, len(names) - 0.4)
        lo = min((min(f["acc"]) for f in data["final"][key] if f["acc"]), default=0.0)
        strip.set_ylim(max(0.0, lo - 0.1), 1.0)
        strip.grid(axis="y", alpha=0.3)
        notes = [f"{c.name_b} - {c.name_a}: {c.diff_mean * 100:+.1f} [{c.diff_mean_ci[0] * 100:+.1f}, "
                 f"{c.diff_mean_ci[1] * 100:+.1f}], p {c.p_value:.2g}" for c in comps if c.metric == key]
        strip.set_title(f"final {key} per seed (bar: median)\n" + "\n".join(notes), fontsize=8.5)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
