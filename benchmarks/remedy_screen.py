"""A screen of training remedies against a baseline, over the same seeds: one table from the runs' own files.

Each argument is the root of a seeds sweep (``rlvr train CONFIG --seeds ...`` with ``eval.every``: one
``seed-<s>/`` run directory per seed); the first is the baseline.  For every sweep the script prints, per
seed, the final held-out accuracy (greedy and every other evaluation key), the largest fall of the held-out
greedy curve between two consecutive evaluations, the mean token entropy of the last 10 steps and the
training time per step (sampling and learner); per sweep, the median over seeds and the difference from
the baseline (``rlvr compare``'s two-level bootstrap over seeds and problems, and its exact permutation test
over seeds); and what each sweep's config changes against the baseline's.

    python benchmarks/remedy_screen.py runs/baseline runs/cosine runs/klcov --seeds 0-2 [--json screen.json] [--plot screen.png]

A screen of 3 seeds per arm cannot resolve a difference on its own (the permutation test's smallest p with
3 + 3 seeds is 0.1); it ranks the arms for a confirmation on more seeds.  Wall times are comparable only
between runs made under the same load (the table prints them; the comparison of speed belongs to a run
alone).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rlvr.evaluate.compare import compare_seed_summaries, config_differences
from rlvr.evaluate.seeds import summarize_seeds


def _defaults() -> dict:
    """Every setting's default, by dotted key (the run config of today's code)."""
    from rlvr.config import load_config
    from rlvr.evaluate.compare import _flat
    from rlvr.recipes.config import RunConfig

    return _flat(json.loads(load_config(RunConfig, None, []).model_dump_json()))


def real_changes(base: dict | None, other: dict | None) -> dict[str, tuple]:
    """:func:`config_differences` less the keys one side does not have and the other sets to today's default: an
    option added after the earlier run was saved, left off, changes nothing."""
    defaults = _defaults()
    missing = object()

    def flat(c):
        from rlvr.evaluate.compare import _flat
        return _flat(c or {})

    fa, fb = flat(base), flat(other)
    out = {}
    for k, (va, vb) in config_differences(base, other).items():
        one_sided = (k not in fa) != (k not in fb)
        present = vb if k not in fa else va
        if one_sided and json.dumps(present, default=str) == json.dumps(defaults.get(k, missing), default=str):
            continue
        out[k] = (va, vb)
    return out


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def largest_drop(curve: list[float]) -> float:
    """The largest fall between consecutive points of ``curve`` (0 when it never falls)."""
    return max([a - b for a, b in zip(curve, curve[1:])] + [0.0])


def run_stats(run_dir: Path, last: int = 10) -> dict:
    """Per-run numbers from ``metrics.jsonl``: mean entropy of the last ``last`` steps, mean step, sampling and
    learner seconds per step, learner tokens over the run."""
    rows = _rows(run_dir / "metrics.jsonl")
    tail = [r["entropy"] for r in rows[-last:] if r.get("entropy") is not None]

    def mean(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    return {"steps": len(rows), "entropy_last": sum(tail) / len(tail) if tail else None,
            "step_s": mean("step_time"), "gen_s": mean("gen_time"), "learn_s": mean("learn_time"),
            "learner_tokens": sum(r.get("learner_tokens", 0) for r in rows)}


def screen(roots: list[Path], seeds: list[int] | None, n_resamples: int = 2000) -> dict:
    """The screen's numbers (see the module docstring): ``{"arms": [...]}``, the baseline first."""
    summaries = [summarize_seeds(r, seeds, n_resamples=n_resamples) for r in roots]
    base = summaries[0]
    # the evaluation keys every finished seed of every arm has (a seed evaluated at an extra temperature that the
    # others were not gives no median and no comparison for it)
    keys = [k for k in base["metric_keys"]
            if all(k in r["after"] for s in summaries for r in s["runs"] if r["status"] == "finished")]
    arms = []
    for root, s in zip(roots, summaries):
        per_seed = []
        for r in s["runs"]:
            if r["status"] != "finished":
                per_seed.append({"seed": r["seed"], "status": r["status"]})
                continue
            curve = [a for _, a in r["curve"]]
            per_seed.append({"seed": r["seed"], "status": "finished", "after": r["after"],
                             "curve": [[int(st), float(a)] for st, a in r["curve"]],
                             "largest_drop": largest_drop(curve), **run_stats(root / r["dir"])})
        done = [p for p in per_seed if p["status"] == "finished"]
        medians = {k: statistics.median([p["after"][k] for p in done]) for k in keys} if done else {}
        arm = {"name": root.name, "root": str(root), "finished": len(done), "per_seed": per_seed,
               "median": medians,
               "median_largest_drop": statistics.median([p["largest_drop"] for p in done]) if done else None,
               "changes": real_changes(base.get("config"), s.get("config"))}
        if s is not base and done and base["finished"]:
            arm["vs_baseline"] = {c.metric: {"diff_mean": c.diff_mean, "diff_mean_ci": c.diff_mean_ci,
                                             "p_value": c.p_value, "poi": c.poi, "verdict": c.verdict}
                                  for c in compare_seed_summaries(base, s, name_a=roots[0].name, name_b=root.name,
                                                                  metrics=keys, n_resamples=n_resamples)}
        arms.append(arm)
    return {"seeds": seeds, "arms": arms}


def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}"


def format_screen(result: dict) -> list[str]:
    arms = result["arms"]
    keys = list(arms[0]["median"]) or ["greedy"]
    lines = ["| arm | seed | " + " | ".join(f"{k} after" for k in keys)
             + " | largest drop (pts) | entropy, last 10 steps | s/step (sampling + learner) |",
             "|---|---:|" + "---:|" * len(keys) + "---:|---:|---|"]
    for a in arms:
        for p in a["per_seed"]:
            if p["status"] != "finished":
                lines.append(f"| {a['name']} | {p['seed']} | {p['status']} |" + " |" * (len(keys) + 2))
                continue
            ent = "–" if p["entropy_last"] is None else f"{p['entropy_last']:.2f}"
            t = ("–" if p["step_s"] is None else
                 f"{p['step_s']:.1f} ({p['gen_s']:.1f} + {p['learn_s']:.1f})")
            lines.append(f"| {a['name']} | {p['seed']} | " + " | ".join(_pct(p["after"].get(k)) for k in keys)
                         + f" | {p['largest_drop'] * 100:.1f} | {ent} | {t} |")
    lines += ["", "| arm | seeds | " + " | ".join(f"median {k}" for k in keys)
              + " | " + " | ".join(f"{k}: mean diff vs baseline [95% CI], p" for k in keys)
              + " | median largest drop | changes against the baseline |",
              "|---|---:|" + "---:|" * len(keys) + "---|" * len(keys) + "---:|---|"]
    for a in arms:
        vs = a.get("vs_baseline", {})
        cells = []
        for k in keys:
            c = vs.get(k)
            cells.append("(baseline)" if a is arms[0] else "–" if c is None else
                         f"{c['diff_mean'] * 100:+.1f} [{c['diff_mean_ci'][0] * 100:+.1f}, "
                         f"{c['diff_mean_ci'][1] * 100:+.1f}], p = {c['p_value']:.2f}")
        changes = ", ".join(f"`{k}={vb}`" for k, (_, vb) in a["changes"].items()) or "–"
        drop = "–" if a["median_largest_drop"] is None else f"{a['median_largest_drop'] * 100:.1f}"
        lines.append(f"| {a['name']} | {a['finished']} | " + " | ".join(_pct(a["median"].get(k)) for k in keys)
                     + " | " + " | ".join(cells) + f" | {drop} | {changes} |")
    return lines


def plot_screen(result: dict, path: Path) -> None:
    """One panel per remedy: each of its seeds' held-out greedy curve (colour) over the baseline's (grey)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = result["arms"]
    others = arms[1:] or arms
    cols = min(4, len(others))
    rows = (len(others) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), sharex=True, sharey=True, squeeze=False)
    base = [p for p in arms[0]["per_seed"] if p["status"] == "finished"]
    for ax, arm in zip(axes.flat, others):
        for p in base:
            xs, ys = zip(*p["curve"])
            ax.plot(xs, [y * 100 for y in ys], color="0.7", lw=1)
        for p in arm["per_seed"]:
            if p["status"] == "finished":
                xs, ys = zip(*p["curve"])
                ax.plot(xs, [y * 100 for y in ys], lw=1.4, marker=".", label=f"seed {p['seed']}")
        ax.set_title(f"{arm['name']} ({arm['finished']} seeds)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    for ax in axes.flat[len(others):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("held-out greedy %")
    fig.suptitle(f"held-out greedy accuracy; grey: {arms[0]['name']} (baseline), same seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_seeds(text: str | None) -> list[int] | None:
    if not text:
        return None
    from rlvr.recipes.seeds import parse_seeds as parse

    return list(parse(text))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path, help="seeds sweep roots; the first is the baseline")
    ap.add_argument("--seeds", help="the seeds to read in every sweep, e.g. 0-2 (default: each sweep's own)")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates (default 2000)")
    ap.add_argument("--json", type=Path, help="also write the numbers as JSON")
    ap.add_argument("--plot", type=Path, help="also draw every arm's held-out curves over the baseline's (PNG)")
    args = ap.parse_args(argv)
    result = screen(args.roots, parse_seeds(args.seeds), args.resamples)
    print("\n".join(format_screen(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.plot:
        plot_screen(result, args.plot)


if __name__ == "__main__":
    main()
