"""Many seeds of one configuration: read the seeds' run directories, summarise the spread, draw the curves.

``rlvr train CONFIG --seeds 0-4`` (:mod:`rlvr.recipes.seeds`) trains one run per seed in
``<root>/seed-<s>/`` (``<root>`` is ``train.output_dir``); :func:`summarize_seeds` (also
``rlvr seeds summarize ROOT``) reads what those runs wrote and never trains:

* ``eval_before.json`` / ``eval_after.json``: held-out accuracy at ``eval.temperature`` (key
  ``greedy`` at 0, else ``T=<t>``) and at each of ``eval.extra_temperatures`` (``T=<t>``), each
  with its ``per_problem`` scores;
* ``heldout.jsonl``: the held-out accuracy every ``eval.every`` steps (at ``eval.temperature``);
* ``summary.json``: written when the run finished (its ``steps`` and ``code``); a seed
  without it is *unfinished* and left out of the final-accuracy statistics;
* ``config.yaml``: the run's resolved config.

It writes ``<root>/seeds.json`` (everything below, plus each finished seed's per-problem
final scores, which ``rlvr compare`` resamples), ``<root>/seeds.md`` (the same as tables) and
``<root>/seeds.png`` (every seed's held-out curve over steps, from step 0 = ``eval_before``
through the ``eval.every`` points to the last step = ``eval_after``; and a strip plot of the
final accuracies).

Statistics, per evaluation key, over the finished seeds' final accuracies: median, quartiles
and interquartile range (linear interpolation, numpy's default), minimum, maximum, mean, and
a two-level bootstrap interval for the mean and the median
(:func:`rlvr.evaluate.compare.stratified_bootstrap`, ``runs+problems``): each replicate draws
the seeds with replacement and, once for all of them, the held-out problems with replacement,
and recomputes every drawn seed's accuracy on the drawn problems.  The problems are drawn
once per replicate, not once per seed, because every seed is evaluated on the same held-out
problems (seeds and problems are crossed, not nested): a separate draw per seed would treat a
problem's difficulty as independent from seed to seed and understate the noise of a finite
held-out set.  The interval therefore covers both sources of noise: another set of seeds, and
another held-out sample of the same size.  With fewer than about 5 seeds the bootstrap over
seeds is too narrow (it cannot see values it did not draw); ``rlvr compare`` adds a
permutation test that is exact at any size.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import yaml

from rlvr.evaluate.compare import stratified_bootstrap
from rlvr.evaluate.stats import spread_summary
from rlvr.version import code_version

__all__ = ["SEED_DIR", "SeedRun", "seed_dir", "find_seed_dirs", "read_seed_run", "summarize_seeds",
           "write_seeds_summary", "format_seeds_markdown", "plot_seeds", "result_line", "headline",
           "SUMMARY_KIND", "IGNORED_CONFIG_KEYS"]

SEED_DIR = "seed-{}"
SUMMARY_KIND = "rlvr.seeds"
_SEED_RE = re.compile(r"^seed-(\d+)$")
IGNORED_CONFIG_KEYS = ("train.seed", "train.output_dir", "train.resume", "train.progress", "train.overwrite",
                       "train.resume_changes")
"""Config keys that may differ between the seeds of one summary (and between a seed's run and a re-run)."""


def seed_dir(root: str | os.PathLike, seed: int) -> Path:
    """``<root>/seed-<seed>``: where ``--seeds`` trains seed ``seed``."""
    return Path(root) / SEED_DIR.format(seed)


def find_seed_dirs(root: str | os.PathLike) -> list[int]:
    """The seeds that have a ``seed-<s>`` directory under ``root``, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _SEED_RE.match(p.name)))


@dataclass
class SeedRun:
    """What one seed's run directory holds (see the module docstring)."""

    seed: int
    path: Path
    status: str
    """``finished`` (summary.json), ``unfinished`` (some files, no summary.json) or ``missing`` (no directory)."""
    steps: int = 0
    """Steps done: summary.json's ``steps``, else the last metrics.jsonl row's."""
    before: dict[str, dict] = field(default_factory=dict)
    after: dict[str, dict] = field(default_factory=dict)
    curve: list[tuple[int, float]] = field(default_factory=list)
    code: str | None = None
    config: dict | None = None

    def accuracy(self, when: str, key: str) -> float | None:
        r = (self.before if when == "before" else self.after).get(key)
        return None if r is None else float(r["accuracy"])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot be read as JSON ({e})") from None


def _read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (a killed run) ends the rows."""
    rows: list[dict] = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _primary_key(evals: Iterable[dict]) -> str | None:
    """The evaluation key of ``eval.temperature`` (the first key an eval_*.json holds)."""
    for e in evals:
        if e:
            return next(iter(e))
    return None


def read_seed_run(root: str | os.PathLike, seed: int) -> SeedRun:
    """Read ``<root>/seed-<seed>`` (never written to)."""
    path = seed_dir(root, seed)
    if not path.is_dir():
        return SeedRun(seed, path, "missing")
    summary = _read_json(path / "summary.json")
    before = _read_json(path / "eval_before.json") or {}
    after = (_read_json(path / "eval_after.json") or {}) if summary is not None else {}
    metrics = _read_jsonl(path / "metrics.jsonl")
    steps = int(summary["steps"]) if summary is not None and "steps" in summary else \
        int(metrics[-1].get("step", 0)) if metrics else 0
    config = None
    if (path / "config.yaml").is_file():
        config = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    primary = _primary_key([before, after])
    points: dict[int, float] = {}
    if primary is not None and primary in before:
        points[0] = float(before[primary]["accuracy"])
    for row in _read_jsonl(path / "heldout.jsonl"):
        if "heldout_accuracy" in row and "step" in row:
            points[int(row["step"])] = float(row["heldout_accuracy"])
    if primary is not None and primary in after:
        points[steps] = float(after[primary]["accuracy"])  # the final model; same as a heldout row at that step
    return SeedRun(seed, path, "finished" if summary is not None else "unfinished", steps, before, after,
                   sorted(points.items()), (summary or {}).get("code"), config)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _config_differences(runs: Sequence[SeedRun]) -> dict[str, dict[str, Any]]:
    """``{dotted key: {seed: value}}`` for config keys (other than :data:`IGNORED_CONFIG_KEYS`) that differ."""
    flat = {r.seed: _flatten(r.config) for r in runs if r.config is not None}
    keys = sorted({k for f in flat.values() for k in f} - set(IGNORED_CONFIG_KEYS))
    return {k: {str(s): f.get(k) for s, f in flat.items()} for k in keys
            if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat.values()}) > 1}


def _metric_stats(runs: Sequence[SeedRun], key: str, n_resamples: int, confidence: float, seed: int) -> dict:
    out: dict[str, Any] = {}
    for when in ("before", "after"):
        vals = [r.accuracy(when, key) for r in runs]
        vals = [v for v in vals if v is not None]
        if vals:
            out[when] = spread_summary(vals)
    gains = [r.accuracy("after", key) - r.accuracy("before", key) for r in runs
             if r.accuracy("after", key) is not None and r.accuracy("before", key) is not None]
    if gains:
        out["gain"] = spread_summary(gains)
    per = [r.after[key]["per_problem"] for r in runs if key in r.after and r.after[key].get("per_problem")]
    if "after" in out and len(per) == out["after"]["n"] and len({len(p) for p in per}) == 1:
        (reps,) = stratified_bootstrap([{"heldout": np.asarray(per, dtype=float)}], n_resamples, seed,
                                       "runs+problems")  # [B, seeds]: each drawn seed's accuracy on drawn problems
        q = [(1 - confidence) / 2, (1 + confidence) / 2]
        out["after"]["mean_ci"] = [float(v) for v in np.quantile(reps.mean(1), q)]
        out["after"]["median_ci"] = [float(v) for v in np.quantile(np.median(reps, 1), q)]
        out["after"]["problems"] = len(per[0])
    return out


def summarize_seeds(root: str | os.PathLike, seeds: Sequence[int] | None = None, *, n_resamples: int = 2000,
                    confidence: float = 0.95, bootstrap_seed: int = 0) -> dict:
    """The seeds summary of ``root`` as a dict (what ``seeds.json`` holds); reads the run directories only.

    ``seeds``: which seeds belong to it (default: every ``seed-<s>`` directory under ``root``);
    a listed seed without a directory is reported as ``missing``.
    """
    root = Path(root)
    if seeds is None:
        seeds = find_seed_dirs(root)
        if not seeds:
            raise ValueError(f"{root}: no seed-<s> run directories (made by `rlvr train CONFIG --seeds ...`)")
    runs = [read_seed_run(root, s) for s in seeds]
    keys: list[str] = []
    for r in runs:
        for k in list(r.after) + list(r.before):
            if k not in keys:
                keys.append(k)
    finished = [r for r in runs if r.status == "finished"]
    config_run = next((r for r in finished if r.config is not None), None) or \
        next((r for r in runs if r.config is not None), None)
    per_seed = []
    for r in runs:
        per_seed.append({
            "seed": r.seed, "dir": r.path.name, "status": r.status, "steps": r.steps, "code": r.code,
            "before": {k: float(v["accuracy"]) for k, v in r.before.items()},
            "after": {k: float(v["accuracy"]) for k, v in r.after.items()},
            "after_ci": {k: [float(v["ci_low"]), float(v["ci_high"])] for k, v in r.after.items()
                         if "ci_low" in v},
            "curve": [[s, a] for s, a in r.curve],
            "per_problem_after": {k: [float(x) for x in v["per_problem"]] for k, v in r.after.items()
                                  if v.get("per_problem")},
        })
    return {
        "kind": SUMMARY_KIND,
        "root": str(root),
        "seeds": list(seeds),
        "finished": [r.seed for r in finished],
        "metric_keys": keys,
        "primary": _primary_key([r.before for r in runs] + [r.after for r in runs]),
        "code": code_version(),
        "run_codes": sorted({str(r.code) for r in finished}),
        "config": config_run.config if config_run else None,
        "config_from": str(config_run.path / "config.yaml") if config_run else None,
        "config_differences": _config_differences(runs),
        "statistics": {k: _metric_stats(finished, k, n_resamples, confidence, bootstrap_seed) for k in keys},
        "confidence": confidence,
        "bootstrap": {"resamples": n_resamples, "seed": bootstrap_seed,
                      "method": "seeds and problems resampled (problems drawn once per replicate for all seeds)"},
        "runs": per_seed,
    }


# ----------------------------------------------------------------------------------------- text
def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


def result_line(run: SeedRun) -> str:
    """``greedy 24.6% -> 73.0%, T=1.0 4.7% -> 69.5%`` (before -> after, each evaluation key)."""
    keys = list(dict.fromkeys(list(run.before) + list(run.after)))
    if not keys:
        return "no held-out evaluation"
    return ", ".join(f"{k} {_pct(run.accuracy('before', k))} -> {_pct(run.accuracy('after', k))}" for k in keys)


def headline(summary: dict) -> str:
    """One line per evaluation key: median, IQR, range and mean with its interval over the finished seeds."""
    lines = []
    n = len(summary["finished"])
    for k in summary["metric_keys"]:
        a = summary["statistics"][k].get("after")
        if a is None:
            continue
        ci = a.get("mean_ci")
        ci_txt = f" [{ci[0]:.1%}, {ci[1]:.1%}]" if ci else ""
        lines.append(f"{k} after training over {n} seed{'s' if n != 1 else ''}: median {a['median']:.1%} "
                     f"(IQR {a['q1']:.1%}-{a['q3']:.1%}), min {a['min']:.1%}, max {a['max']:.1%}, "
                     f"mean {a['mean']:.1%}{ci_txt}")
    return "\n".join(lines) if lines else ("no final held-out accuracy to summarise yet (no seed has finished, or "
                                           "eval.after_training is off)")


def format_seeds_markdown(summary: dict) -> str:
    """``seeds.md``: the per-seed table, the statistics table, the code and the config's provenance."""
    keys, runs = summary["metric_keys"], summary["runs"]
    pct = int(round(summary["confidence"] * 100))
    root = Path(summary["root"])
    lines = [f"# {root.name}: {len(runs)} seeds ({len(summary['finished'])} finished)", ""]
    codes = ", ".join(c for c in summary["run_codes"]) or "unknown"
    lines.append(f"Runs in `{root}`, one directory per seed (`seed-<s>/`). Code of the finished runs: {codes}; "
                 f"this summary written by {summary['code'] or 'an rlvr outside a git checkout'}.")
    if len(summary["run_codes"]) > 1:
        lines.append("**The finished runs were made by different code: they are not one experiment.**")
    if summary["config_from"]:
        lines.append(f"Config: `{summary['config_from']}` (every seed's config.yaml; only `train.seed` and the "
                     "output directory vary).")
    diffs = summary["config_differences"]
    if diffs:
        lines.append("**Config keys that differ between seeds:** " + "; ".join(
            f"`{k}`: " + ", ".join(f"seed {s}: {v}" for s, v in by_seed.items()) for k, by_seed in diffs.items()))
    lines += ["", "| seed | status | steps | " + " | ".join(f"{k} before | {k} after" for k in keys) + " |",
              "|---:|---|---:|" + "---:|---:|" * len(keys)]
    for r in runs:
        cells = " | ".join(f"{_pct(r['before'].get(k))} | {_pct(r['after'].get(k))}" for k in keys)
        lines.append(f"| {r['seed']} | {r['status']} | {r['steps']} | {cells} |")
    lines += ["", f"Final held-out accuracy over the {len(summary['finished'])} finished seeds "
                  f"({pct}% intervals: {summary['bootstrap']['resamples']} bootstrap replicates over seeds and "
                  "held-out problems):", "",
              "| statistic | " + " | ".join(f"{k} after" for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    stats = [summary["statistics"][k].get("after") for k in keys]

    def row(label: str, fmt) -> str:
        return f"| {label} | " + " | ".join("–" if s is None else fmt(s) for s in stats) + " |"

    def with_ci(s: dict, name: str) -> str:
        ci = s.get(f"{name}_ci")
        return f"{s[name]:.1%}" + (f" [{ci[0]:.1%}, {ci[1]:.1%}]" if ci else "")

    lines += [row("median", lambda s: with_ci(s, "median")),
              row("interquartile range", lambda s: f"{s['iqr'] * 100:.1f} pts ({s['q1']:.1%} – {s['q3']:.1%})"),
              row("minimum – maximum", lambda s: f"{s['min']:.1%} – {s['max']:.1%}"),
              row("mean", lambda s: with_ci(s, "mean"))]
    gains = [summary["statistics"][k].get("gain") for k in keys]
    if any(g is not None for g in gains):
        lines.append("| median gain over before | " + " | ".join(
            "–" if g is None else f"{g['median'] * 100:+.1f} pts" for g in gains) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------- picture
def plot_seeds(summary: dict, path: str | os.PathLike) -> Path:
    """``seeds.png``: every seed's held-out curve over steps (left) and the final accuracies (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker.MaxNLocator below)

    runs, keys = summary["runs"], summary["metric_keys"]
    colors = plt.get_cmap("tab10")
    fig, (ax, strip) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.3, 1]})
    for i, r in enumerate(runs):
        if not r["curve"]:
            continue
        steps, acc = zip(*r["curve"])
        final = r["after"].get(summary["primary"]) if summary["primary"] else None
        label = f"seed {r['seed']}" + (f": {final:.1%}" if final is not None else f" ({r['status']})")
        ax.plot(steps, acc, marker="o", ms=3, lw=1.4, color=colors(i % 10), label=label,
                ls="-" if r["status"] == "finished" else "--")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(f"held-out accuracy ({summary['primary'] or 'eval'})")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if any(r["curve"] for r in runs):
        ax.legend(fontsize=8, ncol=2 if len(runs) > 6 else 1, loc="best")
    ax.set_title("held-out accuracy over training, one line per seed", fontsize=10)
    for j, k in enumerate(keys):
        pts = [(i, r["after"][k]) for i, r in enumerate(runs) if r["status"] == "finished" and k in r["after"]]
        if not pts:
            continue
        offsets = np.linspace(-0.18, 0.18, len(pts)) if len(pts) > 1 else [0.0]
        for off, (i, v) in zip(offsets, sorted(pts, key=lambda p: p[1])):
            strip.scatter(j + off, v, color=colors(i % 10), s=36, zorder=3, edgecolor="black", linewidth=0.4)
        med = float(np.median([v for _, v in pts]))
        strip.hlines(med, j - 0.3, j + 0.3, color="black", lw=2, zorder=2)
        before = summary["statistics"][k].get("before")
        if before is not None:
            strip.hlines(before["median"], j - 0.3, j + 0.3, color="gray", lw=1.2, ls=":", zorder=1)
    strip.set_xticks(range(len(keys)), keys)
    strip.set_xlim(-0.6, len(keys) - 0.4)
    strip.set_ylim(-0.02, 1.02)
    strip.grid(axis="y", alpha=0.3)
    strip.set_title("final accuracy per seed (bar: median;\ndotted: before training)", fontsize=10)
    root = Path(summary["root"])
    fig.suptitle(f"{root.name}: {len(summary['finished'])} finished seeds of {len(runs)}", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_seeds_summary(root: str | os.PathLike, seeds: Sequence[int] | None = None, *,
                        out_dir: str | os.PathLike | None = None, plot: bool = True, **kwargs: Any) -> dict:
    """:func:`summarize_seeds` of ``root``, written to ``seeds.json``, ``seeds.md`` and (``plot``) ``seeds.png`` in
    ``out_dir`` (default ``root``); each file is replaced atomically.  Returns the summary with ``paths`` added.
    """
    summary = summarize_seeds(root, seeds, **kwargs)
    out = Path(out_dir) if out_dir is not None else Path(root)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "seeds.json", "markdown": out / "seeds.md"}
    _atomic_write(paths["json"], json.dumps(summary, indent=1, default=str) + "\n")
    _atomic_write(paths["markdown"], format_seeds_markdown(summary))
    if plot:
        tmp = out / "seeds.tmp.png"
        plot_seeds(summary, tmp)
        os.replace(tmp, out / "seeds.png")
        paths["plot"] = out / "seeds.png"
    summary["paths"] = {k: str(v) for k, v in paths.items()}
    return summary
