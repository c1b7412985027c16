"""Healthy and collapsing training runs side by side: which per-step metrics separate them, and when.

Reads the run directories that ``rlvr train`` wrote (``metrics.jsonl``, ``heldout.jsonl`` with
``eval.every``, ``eval_before.json`` / ``eval_after.json``), labels each run and prints, per label, the
mean of each diagnostic over windows of steps, then writes one figure with every run's curves.

A run is **collapsed** when its final held-out greedy accuracy is below the untrained model's
(``eval_before``), **unstable** when it is not collapsed but some held-out evaluation fell more than
``--drop`` points below the previous one, and **healthy** otherwise.

    python benchmarks/collapse_metrics.py runs/baseline-*/seed-* --plot docs/img/collapse.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

METRICS = [
    ("accuracy", "training-batch accuracy"),
    ("entropy", "token entropy"),
    ("response_length", "completion tokens"),
    ("grad_norm", "gradient norm (before clipping)"),
    ("logprob_mismatch", "mean |learner - sampler| log-prob"),
    ("logprob_mismatch_max", "max |learner - sampler| log-prob"),
    ("sampler_ratio_outside", "share of token ratios outside [0.9, 1.1]"),
    ("zero_variance_groups", "share of zero-variance groups"),
    ("clip_frac", "clipped share"),
    ("stop_fraction", "share ending at EOS"),
]


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_run(d: Path) -> dict:
    """One run's metrics rows, held-out curve (step 0 = before training) and final greedy accuracy."""
    rows = read_jsonl(d / "metrics.jsonl")
    curve = []
    before = json.loads((d / "eval_before.json").read_text()) if (d / "eval_before.json").is_file() else None
    after = json.loads((d / "eval_after.json").read_text()) if (d / "eval_after.json").is_file() else None
    if before:
        curve.append((0, before["greedy"]["accuracy"]))
    curve += [(r["step"], r["heldout_accuracy"]) for r in read_jsonl(d / "heldout.jsonl")]
    return {"name": str(d), "rows": rows, "curve": curve, "before": before and before["greedy"]["accuracy"],
            "after": after and after["greedy"]["accuracy"]}


def label(run: dict, drop: float) -> str:
    """collapsed / unstable / healthy (see the module docstring); ``unfinished`` without eval_after."""
    if run["after"] is None:
        return "unfinished"
    if run["before"] is not None and run["after"] < run["before"]:
        return "collapsed"
    accs = [a for _, a in run["curve"]]
    if any(b < a - drop for a, b in zip(accs, accs[1:])):
        return "unstable"
    return "healthy"


def window_means(rows: list[dict], key: str, width: int) -> list[float | None]:
    """Mean of ``key`` over steps 1..width, width+1..2 width, ... (None where a window has no value)."""
    if not rows:
        return []
    last = max(r["step"] for r in rows)
    out = []
    for lo in range(1, last + 1, width):
        vals = [r[key] for r in rows if lo <= r["step"] < lo + width and r.get(key) is not None]
        out.append(sum(vals) / len(vals) if vals else None)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=5, help="steps per window")
    ap.add_argument("--drop", type=float, default=0.10, help="held-out drop between evaluations that is unstable")
    ap.add_argument("--plot", type=Path, default=None, help="write the curves here (PNG)")
    args = ap.parse_args(argv)
    runs = [load_run(d) for d in args.runs if (d / "metrics.jsonl").is_file()]
    for r in runs:
        r["label"] = label(r, args.drop)
        curve = " ".join(f"{a:.0%}" for _, a in r["curve"])
        print(f"{r['label']:10s} {r['name']}: held-out greedy {curve}")
    labels = sorted({r["label"] for r in runs})
    for key, doc in METRICS:
        print(f"\n{key} ({doc}), mean per {args.window}-step window")
        for lab in labels:
            group = [window_means(r["rows"], key, args.window) for r in runs if r["label"] == lab]
            n = max((len(g) for g in group), default=0)
            cells = []
            for i in range(n):
                vals = [g[i] for g in group if i < len(g) and g[i] is not None]
                cells.append(f"{sum(vals) / len(vals):8.3f}" if vals else f"{'-':>8s}")
            print(f"  {lab:10s} ({len(group)} runs) {''.join(cells)}")
    if args.plot:
        plot(runs, args.plot)
        print(f"\nwrote {args.plot}")


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["heldout"] + [k for k, _ in METRICS[:7]]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
    colours = {"healthy": "tab:green", "unstable": "tab:orange", "collapsed": "tab:red", "unfinished": "tab:grey"}
    for ax, key in zip(axes.flat, keys):
        for r in runs:
            if key == "heldout":
                xs, ys = zip(*r["curve"]) if r["curve"] else ((), ())
            else:
                pts = [(row["step"], row[key]) for row in r["rows"] if row.get(key) is not None]
                xs, ys = zip(*pts) if pts else ((), ())
            ax.plot(xs, ys, color=colours[r["label"]], alpha=0.7, lw=1.2)
        ax.set_title("held-out greedy accuracy" if key == "heldout" else dict(METRICS)[key], fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    handles = [plt.Line2D([], [], color=c, label=lab) for lab, c in colours.items()
               if any(r["label"] == lab for r in runs)]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
