"""What ``rlvr search`` runs: a budget sweep over a stored-samples file, or a live beam search on a task.

* :func:`search_samples`: read a samples file (``rlvr eval`` writes them,
  :mod:`rlvr.evaluate.samples`), score the samples with the verifier (for
  correctness and the voting answers) and with the chosen scorer (for
  best-of-N and weighted voting), sweep every strategy over the budgets, add
  the compute-optimal allocation and the oracle pass@N reference, write a JSON
  and one chart.
* :func:`run_beam`: beam search with a process scorer on a task's problems,
  verified against the references; its point (accuracy, tokens) can be added to
  a sweep's chart.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlvr.search.scorers import Scorer, load_scorer
from rlvr.search.strategies import evaluate_strategy
from rlvr.search.sweep import SweepResult, efficiency_ratios, plot_sweep, run_sweep

__all__ = ["score_records", "logprob_scores", "search_samples", "run_beam", "format_sweep"]


def score_records(scorer: Scorer, records: Sequence[Any], progress: bool = False) -> np.ndarray:
    """``[P, n]`` scores of every stored sample under ``scorer`` (records have ``prompt``, ``answer``, ``samples``)."""
    rows = []
    it = records
    if progress:
        from tqdm import tqdm

        it = tqdm(records, desc=f"score ({scorer.name})", unit="problem")
    for r in it:
        rows.append([float(scorer.score(r, s["text"])) for s in r.samples])
    return np.asarray(rows, dtype=float)


def logprob_scores(records: Sequence[Any]) -> np.ndarray:
    """``[P, n]`` the sampler's own confidence in each stored sample: ``exp(logprob_sum / num_tokens)``,
    the geometric-mean token probability, in (0, 1] (no extra model; a weak but deployable scorer)."""
    rows = []
    for r in records:
        row = []
        for s in r.samples:
            if "logprob_sum" not in s:
                raise ValueError(f"problem {r.id}: stored samples lack logprob_sum; use another --scorer")
            row.append(float(np.exp(float(s["logprob_sum"]) / max(1, int(s.get("num_tokens", 1))))))
        rows.append(row)
    return np.asarray(rows, dtype=float)


def search_samples(samples_path: str | Path, *, scorer: str = "oracle", strategies: Sequence[str] | None = None,
                   budgets: Sequence[int] | None = None, verifier: str | None = None, workers: int = 1,
                   subsets: str = "first", draws: int = 16, seed: int = 0, probe: int = 4, num_bins: int = 5,
                   folds: int = 5, allocator: bool = True, scorer_options: dict | None = None,
                   output: str | Path | None = None, plot: str | Path | None = None, extra_curves: dict | None = None,
                   progress: bool = True) -> dict:
    """Budget sweep of test-time strategies over a stored-samples file; returns (and writes) the report dict.

    ``scorer``: ``oracle`` (the verifier's verdicts: best-of-N becomes pass@N, an
    upper bound), ``logprob`` (the sampler's own mean token probability, from the
    stored samples: :func:`logprob_scores`), ``orm:PATH`` or ``prm:PATH``.  ``verifier`` defaults to
    ``numeric`` for gsm8k and ``math`` otherwise.  ``extra_curves`` (e.g. a beam
    search point) are added to the chart and the efficiency table.
    """
    from rlvr.evaluate.samples import read_samples, score_samples

    t0 = time.perf_counter()
    header, records = read_samples(samples_path)
    if not records:
        raise ValueError(f"{samples_path}: no complete problem in the samples file")
    verifier = verifier or ("numeric" if header.task == "gsm8k" else "math")
    scored = score_samples(records, verifier, workers=workers, progress=progress)
    correct = np.asarray(scored.correct, dtype=bool)
    t_verify = time.perf_counter() - t0
    if scorer == "oracle":
        scores, scorer_name = correct.astype(float), f"oracle:{verifier}"
    elif scorer == "logprob":
        scores, scorer_name = logprob_scores(records), "logprob"
    else:
        sc = load_scorer(scorer, verifier=verifier, **(scorer_options or {}))
        scores, scorer_name = score_records(sc, records, progress=progress), sc.name
    t_score = time.perf_counter() - t0 - t_verify
    res = run_sweep(correct=correct, answers=scored.extracted, scores=scores, num_tokens=scored.num_tokens,
                    strategies=strategies, budgets=budgets, subsets=subsets, draws=draws, seed=seed,
                    allocator=allocator, probe=probe, num_bins=num_bins, folds=folds)
    if scorer != "oracle":  # the verifier as a perfect scorer: the ceiling of any reranker
        res.curves["pass@n (oracle)"] = [
            evaluate_strategy("best_of_n", b, correct=correct, scores=correct.astype(float),
                              num_tokens=scored.num_tokens, subsets=subsets, draws=draws, seed=seed).to_dict()
            for b in res.budgets]
    for name, pts in (extra_curves or {}).items():
        res.curves[name] = list(pts)
    res.efficiency = efficiency_ratios(res.curves)
    report = {
        "samples_file": str(samples_path), "task": header.task, "model": header.model,
        "sampling": dict(header.sampling), "verifier": verifier, "scorer": scorer_name,
        "scorer_is_oracle": scorer == "oracle", "num_problems": len(records),
        **res.to_dict(),
        "timing": {"verify_s": t_verify, "score_s": t_score, "sweep_s": time.perf_counter() - t0 - t_verify - t_score},
    }
    if plot:
        title = (f"{header.model} on {header.task}: {len(records)} problems, n={header.n}, "
                 f"T={header.sampling.get('temperature')}, scorer {scorer_name}")
        try:
            report["plot"] = str(plot_sweep(res, plot, title=title))
        except ImportError:  # matplotlib is in the dev extra
            import logging

            logging.getLogger(__name__).warning("no chart: matplotlib is not installed (pip install matplotlib)")
            report["plot"] = None
    if output:
        out = Path(output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        report["output"] = str(out)
    return report


def _verified(problems: Sequence[Any], results, verifier: str) -> tuple[list[dict], float, float]:
    """Each live result's dict with its verdict (``correct``, ``extracted``); the accuracy and mean generated
    tokens."""
    from rlvr.verifiers import get_verifier, safe_verify

    verify = get_verifier(verifier)
    rows = []
    for p, r in zip(problems, results):
        v = safe_verify(verify, r.text, p.answer)
        rows.append({**r.to_dict(), "correct": bool(v.correct), "extracted": v.extracted})
    acc = float(np.mean([r["correct"] for r in rows])) if rows else 0.0
    tokens = float(np.mean([r["generated_tokens"] for r in rows])) if rows else 0.0
    return rows, acc, tokens


def run_beam(problems: Sequence[Any], engine: Any, scorer: Scorer, cfg, *, verifier: str = "math",
             progress: bool = True) -> dict:
    """Beam search (:func:`rlvr.search.beam.beam_search_many`) on ``problems``, verified; a summary dict."""
    from rlvr.search.beam import beam_search_many

    t0 = time.perf_counter()
    results = beam_search_many(engine, scorer, problems, cfg, progress=progress)
    rows, acc, tokens = _verified(problems, results, verifier)
    width = cfg.beam_width * cfg.expansions
    return {"strategy": "beam", "n": width, "accuracy": acc, "mean_tokens": tokens, "scorer": scorer.name,
            "config": dict(cfg.__dict__), "num_problems": len(rows), "seconds": time.perf_counter() - t0,
            "per_problem": rows}


def run_power(problems: Sequence[Any], engine: Any, cfg, *, verifier: str = "math", progress: bool = True) -> dict:
    """Power sampling (:func:`rlvr.search.power.power_sample_many`) on ``problems``, verified; a summary dict."""
    from rlvr.search.power import power_sample_many

    t0 = time.perf_counter()
    results = power_sample_many(engine, problems, cfg, progress=progress)
    rows, acc, tokens = _verified(problems, results, verifier)
    proposed = sum(r["proposed"] for r in rows)
    return {"strategy": "power", "n": 1 + cfg.steps, "accuracy": acc, "mean_tokens": tokens,
            "acceptance_rate": sum(r["accepted"] for r in rows) / proposed if proposed else 0.0,
            "config": dict(cfg.__dict__), "num_problems": len(rows), "seconds": time.perf_counter() - t0,
            "per_problem": rows}


def run_mcts(problems: Sequence[Any], engine: Any, scorer: Scorer, cfg, *, verifier: str = "math",
             progress: bool = True) -> dict:
    """MCTS (:func:`rlvr.search.mcts.mcts_search_many`) on ``problems``, verified; a summary dict."""
    from rlvr.search.mcts import mcts_search_many

    t0 = time.perf_counter()
    results = mcts_search_many(engine, scorer, problems, cfg, progress=progress)
    rows, acc, tokens = _verified(problems, results, verifier)
    return {"strategy": "mcts", "n": cfg.iterations, "accuracy": acc, "mean_tokens": tokens, "scorer": scorer.name,
            "config": dict(cfg.__dict__), "num_problems": len(rows), "seconds": time.perf_counter() - t0,
            "per_problem": rows}


def format_sweep(report: dict) -> str:
    """A text table: strategy, N, accuracy, tokens per problem, efficiency vs best-of-N."""
    lines = [f"{'strategy':<20} {'N':>4} {'accuracy':>9} {'tokens/problem':>15} {'eff. vs BoN':>11}"]
    for name, pts in report["curves"].items():
        for p in pts:
            e = p.get("efficiency_vs_best_of_n")
            lines.append(f"{name:<20} {p['n']:>4} {p['accuracy']:>9.1%} {p['mean_tokens']:>15.0f} "
                         f"{'-' if e is None else f'{e:.2f}x':>11}")
    co = report["curves"].get("compute_optimal")
    if co:
        last = co[-1]
        picks = ", ".join(f"bin {b}: {c['strategy']}@{c['n']} ({last['bin_sizes'].get(b, 0)} problems)"
                          for b, c in last["choices"].items())
        lines.append(f"compute-optimal choices at N={last['n']} (bins easy -> hard): {picks}")
    return "\n".join(lines)
