"""A task mixture against each of its tasks trained alone, at an equal number of steps: per-task held-out accuracy.

The arms are ``configs/mixture.yaml`` as it ships (``mixture``) and, for each of its tasks, the same config with
that task's weight 1 and every other task's weight 0 (``alone-<label>``): a weight-0 task is never drawn for
training, but its held-out problems are still evaluated, so every arm reports every task's held-out accuracy
(what training on one task does to the others) with the same verifiers, rubrics, prompts and schedule.  Each
arm's config is written to ``<root>/<arm>.yaml`` and run as ``rlvr train <that file> --seeds S`` with the shared
overrides (``--steps``, ``--eval-every``, no evaluation before training, no checkpoints kept but the last); finished
seeds are skipped (``rlvr train --seeds`` resumes).  Then a table: per arm and seed, each task's held-out accuracy
at the last evaluation, and per task, the mixture's median against the median of the arm that trained on that
task alone: each median with its Wilson interval over the held-out problems, and a permutation p over seeds
(``rlvr.evaluate.stats.permutation_test``) where both have two or more finished seeds.

    python benchmarks/mixture_vs_alone.py --root runs/mixture_vs_alone --seeds 0 --steps 8 --threads 1
    python benchmarks/mixture_vs_alone.py --root ... --table-only   # the table from runs already made

"No task collapsing" is read from the table: a task whose held-out accuracy under the mixture falls below its
untrained level (the ``alone`` arms of the other tasks show it, as those runs never train on it) has collapsed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from remedy_screen import _rows, parse_seeds  # noqa: E402
from technique_screen import run_rlvr  # noqa: E402

CONFIG = ROOT / "configs" / "mixture.yaml"


def _label(entry: dict) -> str:
    """A mixture entry's label (``label``, else its task's name), as rlvr keys its metrics."""
    return entry.get("label") or entry["task"]


def labels(cfg: dict) -> list[str]:
    """The mixture's task labels, in config order."""
    return [_label(t) for t in cfg["mixture"]["tasks"]]


def arm_configs(base: dict) -> dict[str, dict]:
    """``{"mixture": base, "alone-<label>": base with only that task's weight > 0, ...}`` (copies)."""
    out = {"mixture": copy.deepcopy(base)}
    for keep in labels(base):
        cfg = copy.deepcopy(base)
        for t in cfg["mixture"]["tasks"]:
            t["weight"] = 1.0 if _label(t) == keep else 0.0
        out[f"alone-{keep}"] = cfg
    return out


def commands(root: Path, seeds: str, steps: int, eval_every: int, threads: int,
             extra: tuple[str, ...] = ()) -> list[tuple[str, Path, list[str]]]:
    """``(arm, config file, command)`` of each arm; writes each arm's config under ``root``."""
    base = yaml.safe_load(CONFIG.read_text())
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for arm, cfg in arm_configs(base).items():
        path = root / f"{arm}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        out.append((arm, path, [sys.executable, "-m", "rlvr.cli", "train", str(path), "--seeds", seeds,
                                f"train.output_dir={root / arm}", f"train.steps={steps}", f"eval.every={eval_every}",
                                f"train.threads={threads}", "train.save_every=0", "train.keep_checkpoints=1",
                                "eval.before_training=false", "train.progress=false", *extra]))
    return out


def last_heldout(run: Path) -> dict[str, float]:
    """``{label: held-out accuracy}`` at the run's last evaluation (``heldout_accuracy/<label>``)."""
    rows = _rows(run / "heldout.jsonl")
    if not rows or not (run / "summary.json").is_file():
        return {}
    prefix = "heldout_accuracy/"
    return {k[len(prefix):]: float(v) for k, v in rows[-1].items() if k.startswith(prefix) and v is not None}


def _with_ci(acc: float, n: int) -> str:
    """``acc`` in percent with its Wilson 95% interval over ``n`` held-out problems (over problems, not seeds)."""
    from rlvr.evaluate.stats import wilson_interval

    lo, hi = wilson_interval(acc * n, n) if n else (float("nan"), float("nan"))
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def table(root: Path, seeds: list[int]) -> list[str]:
    """The markdown table (see the module docstring), for the tasks of the mixture config the runs were made with
    (``<root>/mixture.yaml``, else the shipped one)."""
    from rlvr.evaluate.stats import permutation_test

    written = root / "mixture.yaml"
    cfg = yaml.safe_load((written if written.is_file() else CONFIG).read_text())
    names = labels(cfg)
    heldout = {n: t.get("num_heldout") or cfg.get("task", {}).get("num_heldout", 0)
               for n, t in zip(names, cfg["mixture"]["tasks"])}
    arms = ["mixture"] + [f"alone-{n}" for n in names]
    acc = {a: {s: last_heldout(root / a / f"seed-{s}") for s in seeds} for a in arms}
    lines = [f"| arm | seed | {' | '.join(names)} |", "|---|---:|" + "---:|" * len(names)]
    for a in arms:
        for s in seeds:
            row = acc[a][s]
            lines.append(f"| {a} | {s} | " + " | ".join(f"{100 * row[n]:.1f}" if n in row else "–" for n in names)
                         + " |")
    lines += ["", "| task | mixture (median) | alone (median) | mixture - alone | p (seeds) |", "|---|---|---|---:|---:|"]
    for n in names:
        mix = [acc["mixture"][s][n] for s in seeds if n in acc["mixture"][s]]
        alone = [acc[f"alone-{n}"][s][n] for s in seeds if n in acc[f"alone-{n}"][s]]
        if not mix or not alone:
            lines.append(f"| {n} | – | – | – | – |")
            continue
        m, a = statistics.median(mix), statistics.median(alone)
        p = f"{permutation_test(mix, alone)['p_value']:.2f}" if len(mix) > 1 and len(alone) > 1 else "–"
        lines.append(f"| {n} | {_with_ci(m, heldout[n])} | {_with_ci(a, heldout[n])} | {100 * (m - a):+.1f} | {p} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("runs/mixture_vs_alone"), help="where the arms go")
    ap.add_argument("--seeds", default="0", help="seeds of every arm (default 0)")
    ap.add_argument("--steps", type=int, default=8, help="training steps of every arm (default 8)")
    ap.add_argument("--eval-every", type=int, default=0, help="held-out evaluation every N steps (0: --steps)")
    ap.add_argument("--threads", type=int, default=1, help="train.threads")
    ap.add_argument("--override", action="append", default=[], help="an override every run gets (repeatable)")
    ap.add_argument("--arms", help="comma-separated arms to run (default: all; e.g. alone-code), so that two "
                                   "processes can run different arms side by side; the table shows them all")
    ap.add_argument("--table-only", action="store_true", help="print the table from the runs already made")
    ap.add_argument("--dry-run", action="store_true", help="write the configs, print the commands, run nothing")
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    if not args.table_only:
        for arm, _, cmd in commands(args.root, args.seeds, args.steps, args.eval_every or args.steps, args.threads,
                                    tuple(args.override)):
            if args.arms and arm not in args.arms.split(","):
                continue
            print("$ rlvr " + " ".join(cmd[3:]), flush=True)
            if not args.dry_run and run_rlvr(cmd) != 0:
                print(f"mixture_vs_alone: {arm} failed", file=sys.stderr)
                return 1
        if args.dry_run:
            return 0
    print("\n".join(table(args.root, seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
