"""Budget sweeps over stored samples: accuracy against N and against generated tokens, one chart.

For every strategy and every budget ``N`` (samples per problem) the sweep
records accuracy and the generated tokens actually consumed (the sum of the
``N`` used samples' ``num_tokens``, averaged over problems), all on the same
stored samples, plus the compute-optimal allocation (:mod:`.allocator`).

**Efficiency ratio** of strategy S at one of its points (accuracy ``a``,
tokens ``t_S``) relative to best-of-N: ``t_BoN(a) / t_S``, where ``t_BoN(a)`` is
the token count at which best-of-N's accuracy-vs-tokens curve first reaches
``a`` (piecewise-linear interpolation between measured budgets; the smallest
measured budget if best-of-N is already there, which makes the ratio an upper
bound).  ``> 1``: S reaches that accuracy with fewer tokens than best-of-N.
``None``: best-of-N never reaches ``a`` within the sweep, or ``a == 0`` (nothing
to be efficient about).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from rlvr.search.allocator import compute_optimal, estimate_difficulty
from rlvr.search.strategies import STRATEGIES, evaluate_strategy

__all__ = ["SweepResult", "run_sweep", "tokens_to_reach", "efficiency_ratios", "plot_sweep", "default_budgets"]


def default_budgets(n: int) -> list[int]:
    """Powers of two up to ``n``, plus ``n`` itself: 1, 2, 4, ..., n."""
    out, b = [], 1
    while b < n:
        out.append(b)
        b *= 2
    return out + [n]


def tokens_to_reach(tokens: Sequence[float], accuracy: Sequence[float], target: float) -> float | None:
    """Tokens at which the curve ``(tokens, accuracy)`` first reaches ``target`` (linear interpolation).

    Points are taken in increasing token order.  Returns the first point's tokens
    when it already reaches ``target``, and None when no point does.
    """
    order = np.argsort(np.asarray(tokens, dtype=float), kind="stable")
    t = np.asarray(tokens, dtype=float)[order]
    a = np.asarray(accuracy, dtype=float)[order]
    eps = 1e-12
    for i in range(len(t)):
        if a[i] >= target - eps:
            if i == 0 or a[i] - a[i - 1] <= eps:
                return float(t[i])
            frac = (target - a[i - 1]) / (a[i] - a[i - 1])
            return float(t[i - 1] + min(max(frac, 0.0), 1.0) * (t[i] - t[i - 1]))
    return None


def efficiency_ratios(curves: dict[str, list[dict]], reference: str = "best_of_n") -> dict[str, list[float | None]]:
    """Per strategy and point: tokens the ``reference`` curve needs for that accuracy / tokens the point used."""
    if reference not in curves:
        return {}
    ref = curves[reference]
    rt, ra = [p["mean_tokens"] for p in ref], [p["accuracy"] for p in ref]
    out = {}
    for name, pts in curves.items():
        ratios = []
        for p in pts:
            need = tokens_to_reach(rt, ra, p["accuracy"]) if p["accuracy"] > 0 else None
            ratios.append(None if need is None or p["mean_tokens"] <= 0 else need / p["mean_tokens"])
        out[name] = ratios
    return out


@dataclass
class SweepResult:
    """Curves (strategy -> points ``{"n", "accuracy", "mean_tokens", ...}``) and efficiency ratios."""

    curves: dict[str, list[dict]]
    efficiency: dict[str, list[float | None]]
    budgets: list[int]
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        curves = {}
        for name, pts in self.curves.items():
            eff = self.efficiency.get(name, [None] * len(pts))
            curves[name] = [{**p, "efficiency_vs_best_of_n": e} for p, e in zip(pts, eff)]
        return {"budgets": self.budgets, "settings": self.settings, "curves": curves}


def run_sweep(*, correct, answers, scores=None, num_tokens=None, strategies: Sequence[str] | None = None,
              budgets: Sequence[int] | None = None, subsets: str = "first", draws: int = 16, seed: int = 0,
              allocator: bool = True, probe: int = 4, num_bins: int = 5, folds: int = 5,
              difficulty=None) -> SweepResult:
    """Accuracy and tokens of every strategy at every budget, plus the compute-optimal allocation.

    ``correct`` [P, n], ``answers`` [P][n], ``scores`` [P, n] (None: only majority
    vote runs), ``num_tokens`` [P, n].  ``difficulty`` [P] defaults to
    :func:`~rlvr.search.allocator.estimate_difficulty` of ``scores`` over the first
    ``probe`` samples (model-predicted difficulty).
    """
    correct = np.asarray(correct, dtype=bool)
    n = correct.shape[1]
    budgets = sorted({int(b) for b in (budgets or default_budgets(n))})
    bad = [b for b in budgets if not 1 <= b <= n]
    if bad:
        raise ValueError(f"budgets {bad} outside 1..{n} (samples stored per problem)")
    names = list(strategies or STRATEGIES)
    if scores is None:
        names = [s for s in names if s == "majority"]
    results, curves = {}, {}
    for s in names:
        curves[s] = []
        for b in budgets:
            r = evaluate_strategy(s, b, correct=correct, answers=answers, scores=scores, num_tokens=num_tokens,
                                  subsets=subsets, draws=draws, seed=seed)
            results[(s, b)] = r
            curves[s].append(r.to_dict())
    settings = {"subsets": subsets, "draws": draws if subsets == "random" else 1, "seed": seed,
                "num_problems": int(correct.shape[0]), "samples_per_problem": n}
    if allocator and len(results) > 1 and probe <= max(budgets):
        diff = difficulty if difficulty is not None else estimate_difficulty(
            scores if scores is not None else correct, probe=probe)
        alloc = compute_optimal(results, diff, budgets, probe=probe, num_bins=num_bins, folds=folds, seed=seed)
        if alloc:
            curves["compute_optimal"] = [a.to_dict() for a in alloc]
        settings.update({"probe": probe, "num_bins": num_bins, "folds": folds})
    return SweepResult(curves=curves, efficiency=efficiency_ratios(curves), budgets=budgets, settings=settings)


_STYLE = {"best_of_n": ("o", "-"), "majority": ("s", "-"), "weighted_majority": ("^", "-"),
          "compute_optimal": ("D", "--"), "beam": ("*", ":")}


def plot_sweep(result: SweepResult, path: str | Path, title: str = "") -> Path:
    """One PNG with two panels: accuracy vs generated tokens per problem, and accuracy vs N (both log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig, (ax_t, ax_n) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    curves = [(name, pts) for name, pts in result.curves.items() if pts]
    for k, (name, pts) in enumerate(curves):
        marker, ls = _STYLE.get(name, ("x", "-"))
        acc = [100 * p["accuracy"] for p in pts]
        style = dict(marker=marker, linestyle=ls, label=name, alpha=0.85, markersize=9 - 1.2 * k)  # overlaps stay visible
        ax_t.plot([max(p["mean_tokens"], 1e-9) for p in pts], acc, **style)
        ax_n.plot([p["n"] for p in pts], acc, **style)
    ax_t.set_xscale("log")
    ax_t.set_xlabel("generated tokens per problem (mean)")
    ax_n.set_xscale("log", base=2)
    ns = sorted({p["n"] for _, pts in curves for p in pts})
    ax_n.set_xticks(ns, [str(n) for n in ns])
    ax_n.xaxis.set_minor_formatter(NullFormatter())
    ax_n.set_xlabel("samples per problem N")
    ax_t.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax_t.xaxis.set_major_formatter(ScalarFormatter())
    ax_t.xaxis.set_minor_formatter(NullFormatter())
    for ax in (ax_t, ax_n):
        ax.set_ylabel("accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
    ax_n.legend(loc="best", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
