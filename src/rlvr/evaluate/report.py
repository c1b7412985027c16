"""Evaluation outputs: a results JSON, PNG plots and one self-contained HTML report.

:func:`build_results` turns a scored sample set into a JSON-ready dict
(metrics with intervals, MATH-500 breakdowns, token statistics, per-problem
scores, example completions).  :func:`write_report` writes into one directory:

* ``results.json``: that dict;
* ``passk.png``: pass@k, maj@k and avg@k against k (log2 axis) with 95% bands;
* ``by_level.png`` / ``by_subject.png``: accuracy (avg@n) per group with 95% error bars, when the
  problems carry ``level`` / ``subject`` metadata (MATH-500);
* ``report.html``: everything above in one file: CSS inline, images as base64
  ``data:`` URIs, text passed through :func:`html.escape`, no external URL, so it
  opens from disk in any browser with no server.

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlvr.evaluate.metrics import answer_entropy, breakdown, calibration_metrics, compute_metrics

__all__ = ["build_results", "write_report", "plot_curves", "plot_groups", "render_html", "BREAKDOWN_FIELDS"]

BREAKDOWN_FIELDS = ("level", "subject")
"""Metadata fields broken down when present (MATH-500 carries both)."""

_COLORS = {"pass@k": "#1f77b4", "maj@k": "#d62728", "avg@k": "#2ca02c"}
_MAX_FAILURE_ROWS = 500


# --------------------------------------------------------------------------- results
def _examples(records, scored, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` example completions: alternately a correct and a wrong one, from different problems."""
    wanted = [True, False]
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    for turn in range(limit * 4):
        if len(out) >= limit:
            break
        want = wanted[turn % 2]
        for i, rec in enumerate(records):
            if i in used:
                continue
            js = [j for j in range(len(rec.samples)) if bool(scored.correct[i][j]) == want]
            if js:
                j = js[0]
                s = rec.samples[j]
                out.append({"id": rec.id, "prompt": rec.prompt, "answer": rec.answer, "completion": s["text"],
                            "extracted": scored.raw_extracted[i][j], "vote_key": scored.extracted[i][j],
                            "correct": bool(scored.correct[i][j]), "reason": scored.reasons[i][j],
                            "num_tokens": int(s.get("num_tokens", 0)), "finish_reason": s.get("finish_reason")})
                used.add(i)
                break
        else:
            if all(i in used for i in range(len(records))):
                break
    return out


def build_results(header, records: Sequence, scored, *, ks: Sequence[int] | None = None, num_subsets: int = 64,
                  n_resamples: int = 2000, seed: int = 0, examples: int = 6,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The results dict of one evaluation (what ``results.json`` holds).

    Top level: ``task``, ``model``, ``sampling``, ``verifier``, ``num_problems``,
    ``samples_per_problem``; ``accuracy`` / ``ci_low`` / ``ci_high`` (avg@n with
    its bootstrap interval) and ``n`` (number of problems) as in earlier
    ``rlvr eval`` output; ``metrics`` (see :func:`~rlvr.evaluate.metrics.compute_metrics`);
    ``breakdown`` (``level`` / ``subject`` when present); ``tokens``;
    ``per_problem`` (id, accuracy, num_correct, maj@n, metadata level/subject, and for
    problems with a wrong sample ``failures``: wrong samples per reason bucket, and
    ``first_failure``: the first wrong sample's reason); ``failure_reasons`` (wrong samples
    per reason bucket over the whole set: ``wrong_answer``, ``syntax_error``... for code);
    ``examples``.
    """
    from collections import Counter

    from rlvr.rewards.monitors import reason_bucket

    correct = np.asarray(scored.correct, dtype=bool)
    P, n = correct.shape
    m = compute_metrics(correct, scored.extracted, ks=ks, num_subsets=num_subsets, n_resamples=n_resamples,
                        seed=seed)
    groups = {}
    for field in BREAKDOWN_FIELDS:
        b = breakdown(correct, scored.extracted, scored.metadata, field, ks=[k for k in (1, n) if k <= n],
                      num_subsets=num_subsets, n_resamples=n_resamples, seed=seed)
        if b:
            groups[field] = b
    tokens = np.asarray(scored.num_tokens, dtype=float)
    no_answer = np.array([[e is None for e in row] for row in scored.extracted], dtype=bool)
    from rlvr.evaluate.metrics import maj_at_k, vote_labels

    labels, ok = vote_labels(scored.extracted, correct)
    maj_n = maj_at_k(labels, ok, [n])[:, 0]
    entropies = [answer_entropy(row) for row in scored.extracted]
    per_problem = []
    all_failures: Counter = Counter()
    for i in range(P):
        row = {"id": scored.ids[i], "accuracy": float(correct[i].mean()), "num_correct": int(correct[i].sum()),
               "n": int(n), "maj": float(maj_n[i]), "answer_entropy": entropies[i]}
        for field in BREAKDOWN_FIELDS:
            if scored.metadata[i].get(field) is not None:
                row[field] = scored.metadata[i][field]
        wrong = [r for r, c in zip(scored.reasons[i], correct[i]) if not c]
        if wrong:
            fails = Counter(reason_bucket(r) for r in wrong)
            all_failures.update(fails)
            row["failures"] = dict(fails.most_common())
            row["first_failure"] = str(wrong[0])[:300]
        per_problem.append(row)
    avg_n = m["avg@k"][str(m["ks"][-1])]
    out = {
        "task": header.task, "task_fingerprint": header.task_fingerprint, "model": header.model,
        "model_fingerprint": header.model_fingerprint, "sampling": dict(header.sampling),
        "system_prompt": header.system_prompt, "verifier": scored.verifier, "rlvr_version": header.rlvr_version,
        "num_problems": int(P), "samples_per_problem": int(n), "n": int(P),
        "accuracy": avg_n["value"], "ci_low": avg_n["ci_low"], "ci_high": avg_n["ci_high"],
        "method": f"avg@n, percentile bootstrap over problems ({n_resamples} resamples)" if "ci_method" not in avg_n
        else "avg@n, Wilson score interval over problems (every problem scored the same)",
        "metrics": m, "breakdown": groups,
        "tokens": {"mean": float(tokens.mean()), "median": float(np.median(tokens)), "max": int(tokens.max()),
                   "truncated_fraction": float(np.asarray(scored.truncated, dtype=bool).mean()),
                   "no_answer_fraction": float(no_answer.mean())},
        "diagnostics": _diagnostics(records, scored, correct, entropies),
        "per_problem": per_problem,
        "failure_reasons": dict(all_failures.most_common()),
        "examples": _examples(records, scored, examples),
    }
    if extra:
        out.update(extra)
    return out


def _diagnostics(records, scored, correct: np.ndarray, entropies: list[float]) -> dict[str, Any]:
    """Answer-level entropy and distinct answers per problem (Invisible Leash) and, when the completions state a
    ``<confidence>``, the policy's calibration (RLCR's ECE and Brier score)."""
    from rlvr.rewards.functions.calibration import stated_confidence

    distinct = [len({("<no answer>",) if a is None else a for a in row}) for row in scored.extracted]
    confidences = [stated_confidence(str(s.get("text", ""))) for rec in records for s in rec.samples]
    flat = [bool(c) for i, rec in enumerate(records) for c in correct[i][:len(rec.samples)]]
    return {"answer_entropy_bits": float(np.mean(entropies)) if entropies else 0.0,
            "distinct_answers": float(np.mean(distinct)) if distinct else 0.0,
            "calibration": calibration_metrics(confidences, flat)}


# ----------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(metrics: dict[str, Any], path: str | os.PathLike, title: str = "") -> Path:
    """pass@k, maj@k, avg@k against k (log2 x-axis), each with its 95% bootstrap band."""
    plt = _plt()
    ks = [int(k) for k in metrics["ks"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for name in ("pass@k", "maj@k", "avg@k"):
        rows = [metrics[name][str(k)] for k in ks]
        y = np.array([r["value"] for r in rows]) * 100
        lo = np.array([r["ci_low"] for r in rows]) * 100
        hi = np.array([r["ci_high"] for r in rows]) * 100
        ax.plot(ks, y, marker="o", ms=3.5, color=_COLORS[name], label=name,
                linestyle="--" if name == "avg@k" else "-")
        ax.fill_between(ks, lo, hi, color=_COLORS[name], alpha=0.15, linewidth=0)
    if len(ks) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ks if len(ks) <= 10 else [k for k in ks if (k & (k - 1)) == 0 or k == ks[-1]])
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)  # the whole range: an all-zero curve is not stretched to a 0-0.05% axis
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", frameon=False)
    ax.set_title(title or "pass@k, maj@k, avg@k (95% bootstrap bands)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def plot_groups(groups: dict[str, Any], field: str, path: str | os.PathLike, k: int) -> Path:
    """avg@k (= accuracy) and pass@k per group value, bars with 95% error bars."""
    plt = _plt()
    names = list(groups)
    horizontal = field != "level"
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(names) + 1.4) if horizontal else (6.4, 3.8), dpi=110)
    pos = np.arange(len(names))
    width = 0.38
    for off, metric, label in ((-width / 2, "avg@k", f"accuracy (avg@{k})"), (width / 2, "pass@k", f"pass@{k}")):
        rows = [groups[g][metric][str(k if metric == "pass@k" else 1)] for g in names]
        y = np.array([r["value"] for r in rows]) * 100
        err = np.array([[r["value"] - r["ci_low"], r["ci_high"] - r["value"]] for r in rows]).T * 100
        bar = ax.barh if horizontal else ax.bar
        kw = {"xerr": err} if horizontal else {"yerr": err}
        bar(pos + off, y, width, color=_COLORS[metric], alpha=0.85, label=label, capsize=3, **kw)
    labels = [f"{g}\n({groups[g]['num_problems']})" if not horizontal else f"{g} ({groups[g]['num_problems']})"
              for g in names]
    if horizontal:
        ax.set_yticks(pos, labels)
        ax.invert_yaxis()
        ax.set_xlabel("%")
        ax.set_xlim(0, 100)
        ax.grid(True, axis="x", alpha=0.3)
    else:
        ax.set_xticks(pos, labels)
        ax.set_xlabel(f"{field} (problems)")
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False, fontsize=8)
    ax.set_title(f"by {field} (95% bootstrap intervals)", fontsize=10, pad=22)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


# ------------------------------------------------------------------------------ HTML
_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#222;
line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}th,td{border:1px solid #ddd;padding:.3em .6em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.muted{color:#777;font-size:.9em}
.cards{display:flex;gap:1em;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:9em}
.card .v{font-size:1.5em;font-weight:600}.card .ci{color:#777;font-size:.85em}
img{max-width:100%;border:1px solid #eee}.row{display:flex;gap:1.2em;align-items:flex-start;flex-wrap:wrap}
.row img{width:500px;flex:0 0 auto}.row table{flex:0 0 auto;margin-top:0;font-size:.85em}
pre{white-space:pre-wrap;word-wrap:break-word;background:#f8f8f8;border:1px solid #eee;padding:.6em;max-height:22em;
overflow:auto;font-size:.85em}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}
details{margin:.5em 0}summary{cursor:pointer}
"""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cell(row: dict) -> str:
    return (f"<td>{_pct(row['value'])} <span class='muted'>[{_pct(row['ci_low'])}, "
            f"{_pct(row['ci_high'])}]</span></td>")


def _img(path: Path | None, alt: str) -> str:
    if path is None or not Path(path).is_file():
        return ""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def render_html(results: dict[str, Any], images: dict[str, Path]) -> str:
    """The report as one HTML string (images embedded as base64, all text escaped)."""
    e = html.escape
    m = results["metrics"]
    ks = [str(k) for k in m["ks"]]
    n = results["samples_per_problem"]
    s = results["sampling"]
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>rlvr eval: {e(results['model'])} on {e(results['task'])}</title><style>{_CSS}</style></head><body>",
             f"<h1>{e(results['model'])} on {e(results['task'])}</h1>",
             f"<p class='muted'>{results['num_problems']} problems &times; {n} samples, temperature "
             f"{s.get('temperature')}, top-p {s.get('top_p')}, max {s.get('max_new_tokens')} new tokens, seed "
             f"{s.get('seed')}; verifier <code>{e(str(results['verifier']))}</code>; task fingerprint "
             f"<code>{e(results['task_fingerprint'])}</code>, model fingerprint "
             f"<code>{e(results['model_fingerprint'])}</code>. Intervals: 95% percentile bootstrap over problems.</p>"]
    # avg@n is pass@1 (the unbiased estimator at k = 1 is the mean correctness), and at k = 1 pass@k and maj@k
    # are that number again: one card for each distinct number
    cards = [(f"accuracy (avg@{n} = pass@1)" if n > 1 else "accuracy (pass@1)", m["avg@k"][ks[-1]])]
    if ks[-1] != "1":
        cards += [(f"pass@{ks[-1]}", m["pass@k"][ks[-1]]), (f"maj@{ks[-1]}", m["maj@k"][ks[-1]])]
    parts.append("<div class='cards'>" + "".join(
        f"<div class='card'><div>{e(name)}</div><div class='v'>{_pct(r['value'])}</div>"
        f"<div class='ci'>[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]</div></div>" for name, r in cards) + "</div>")
    t = results["tokens"]
    parts.append(f"<p class='muted'>Completion length: mean {t['mean']:.0f} tokens, median {t['median']:.0f}, "
                 f"max {t['max']}; {_pct(t['truncated_fraction'])} hit the token limit; "
                 f"{_pct(t['no_answer_fraction'])} gave no extractable answer.</p>")
    shown = ks if len(ks) <= 16 else [k for k in ks if (int(k) & (int(k) - 1)) == 0 or k == ks[-1]]
    if results.get("verdict_reasons"):
        parts.append("<p class='muted'>Verifier verdicts: " + ", ".join(
            f"{e(str(r))} {c}" for r, c in results["verdict_reasons"].items()) + ".</p>")
    parts.append("<h2>pass@k, maj@k, avg@k</h2><div class='row'>" + _img(images.get("passk"), "pass@k curves"))
    parts.append("<table><tr><th>k</th><th>pass@k</th><th>maj@k</th><th>avg@k</th></tr>" + "".join(
        f"<tr><td>{k}</td>{_cell(m['pass@k'][k])}{_cell(m['maj@k'][k])}{_cell(m['avg@k'][k])}</tr>" for k in shown)
        + "</table></div>")
    parts.append("<p class='muted'>pass@k: unbiased estimator 1 &minus; C(n&minus;c,k)/C(n,k) (Chen et al. 2021). "
                 "maj@k: expected correctness of a majority vote over k random samples (all subsets when at most "
                 "64, else 64 seeded random subsets per problem; ties score the fraction of tied answers that are "
                 "right; answers are bucketed by their normalised form, numbers by exact value). avg@k: mean "
                 "accuracy of a sample, the same for every k.</p>")
    for field, groups in results.get("breakdown", {}).items():
        parts.append(f"<h2>By {e(field)}</h2><div class='row'>" + _img(images.get(field), f"accuracy by {field}"))
        parts.append(f"<table><tr><th class='l'>{e(field)}</th><th>problems</th><th>accuracy (avg@{n})</th>"
                     f"<th>pass@{n}</th><th>maj@{n}</th></tr>" + "".join(
                         f"<tr><td class='l'>{e(g)}</td><td>{r['num_problems']}</td>{_cell(r['avg@k'][str(n)])}"
                         f"{_cell(r['pass@k'][str(n)])}{_cell(r['maj@k'][str(n)])}</tr>" for g, r in groups.items())
                     + "</table></div>")
    fails = results.get("failure_reasons") or {}
    if fails:
        total = sum(fails.values())
        parts.append("<h2>Failures</h2><table><tr><th class='l'>reason</th><th>wrong samples</th><th>share</th></tr>"
                     + "".join(f"<tr><td class='l'>{e(str(k))}</td><td>{c}</td><td>{_pct(c / total)}</td></tr>"
                               for k, c in fails.items()) + "</table>")
        rows = [r for r in results.get("per_problem", []) if r.get("failures")][:_MAX_FAILURE_ROWS]
        parts.append("<details><summary>Per-problem failures (" + str(len(rows)) + " problems with a wrong sample"
                     + ")</summary><table><tr><th class='l'>problem</th><th>accuracy</th><th class='l'>wrong samples "
                     "by reason</th><th class='l'>first failure</th></tr>" + "".join(
                         f"<tr><td class='l'><code>{e(str(r['id']))}</code></td><td>{_pct(r['accuracy'])}</td>"
                         f"<td class='l'>{e(', '.join(f'{k} {c}' for k, c in r['failures'].items()))}</td>"
                         f"<td class='l'>{e(r.get('first_failure', ''))}</td></tr>" for r in rows)
                     + "</table></details>")
    if results.get("examples"):
        parts.append("<h2>Example completions</h2>")
        for ex in results["examples"]:
            mark = "<span class='ok'>correct</span>" if ex["correct"] else "<span class='bad'>wrong</span>"
            parts.append(
                f"<details{' open' if ex is results['examples'][0] else ''}><summary>{mark} &middot; "
                f"<code>{e(str(ex['id']))}</code> &middot; reference <code>{e(str(ex['answer']))}</code> &middot; "
                f"extracted <code>{e(str(ex['extracted']))}</code> &middot; {ex['num_tokens']} tokens "
                f"({e(str(ex['finish_reason']))})</summary><p><b>Problem</b></p><pre>{e(ex['prompt'])}</pre>"
                f"<p><b>Completion</b> <span class='muted'>{e(ex['reason'])}</span></p><pre>{e(ex['completion'])}</pre>"
                "</details>")
    parts.append(f"<p class='muted'>Generated by rlvr {e(str(results.get('rlvr_version', '')))} "
                 f"<code>rlvr eval</code>.</p></body></html>")
    return "\n".join(parts)


def write_report(results: dict[str, Any], out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``results.json``, the PNG plots and ``report.html`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {"results": out / "results.json"}
    paths["results"].write_text(json.dumps(results, indent=2, ensure_ascii=False))
    title = f"{results['model']} on {results['task']} (n={results['samples_per_problem']})"
    images = {"passk": plot_curves(results["metrics"], out / "passk.png", title)}
    n = results["samples_per_problem"]
    for field, groups in results.get("breakdown", {}).items():
        images[field] = plot_groups(groups, field, out / f"by_{field}.png", n)
    paths.update(images)
    paths["html"] = out / "report.html"
    paths["html"].write_text(render_html(results, images), encoding="utf-8")
    return paths
