"""Asynchronous multi-turn rollouts against synchronous ones on ``make demo-tools``, over seeds: time and accuracy.

Two arms of ``rlvr train configs/calculator_tools.yaml --seeds S`` at an equal number of steps, run one after
the other and interleaved by seed (sync 0, async 0, sync 1, ...), so a drift in the machine's speed falls on
both arms alike:

- ``sync`` (the anchor): the config as ``make demo-tools`` runs it alone on the machine, one process with
  ``--threads`` torch threads (default: every core, at most 2);
- ``async``: a generator process samples the next step's episodes while the learner trains on the current
  ones (``train.async_steps=1``, truncated importance correction ``algorithm.is_correction=tis``), one torch
  thread per process, so both arms use the same cores.

Each seed's run goes to ``<root>/<arm>/seed-<s>/``; a finished one is skipped (``rlvr train --seeds`` resumes
an interrupted one), so the benchmark can be stopped and continued.  The initial policy is evaluated once, in
the anchor's first seed (every arm starts from the same weights and the held-out set does not depend on the
seed).  When every run has finished the script prints, per seed, the training time (the sum of the steps'
wall times, which excludes loading and the evaluations both arms share), the whole run's wall time where this
script timed it, and the held-out accuracy after training; then the speed-up sync / async per seed with its
median, and the accuracy difference with ``rlvr compare``'s interval (``benchmarks/remedy_screen.py``'s table).

    python benchmarks/async_multiturn.py --root runs/async_tools --seeds 0-2
    python benchmarks/async_multiturn.py --root runs/async_tools --seeds 0-2 --report   # the table only

Run it alone on the machine: the times compare nothing when another process shares the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from remedy_screen import format_screen, parse_seeds, screen  # noqa: E402

CONFIG = "configs/calculator_tools.yaml"
WALL = "bench_wall.json"  # per run directory: the whole run's wall time, written by this script


def arm_overrides(threads: int) -> dict[str, list[str]]:
    """Arm name -> its overrides of the demo-tools config (the anchor first)."""
    return {"sync": [f"train.threads={threads}"],
            "async": ["train.async_steps=1", "algorithm.is_correction=tis", "train.threads=1"]}


def command(root: Path, arm: str, seed: int, overrides: list[str], before: bool,
            shared: tuple[str, ...] = ()) -> list[str]:
    """``shared``: overrides every arm takes (e.g. a cheaper evaluation), before the arm's own."""
    return [sys.executable, "-m", "rlvr.cli", "train", CONFIG, "--seeds", str(seed),
            f"train.output_dir={root / arm}", "train.progress=false",
            f"eval.before_training={str(before).lower()}", *shared, *overrides]


def report(root: Path, arms: list[str], seeds: list[int]) -> list[str]:
    result = screen([root / a for a in arms], seeds)
    lines = ["| arm | seed | training s (sum of steps) | whole run s | s/step | greedy after |",
             "|---|---:|---:|---:|---:|---:|"]
    train = {a: {} for a in arms}
    for a in result["arms"]:
        for p in a["per_seed"]:
            if p["status"] != "finished":
                continue
            run = root / a["name"] / f"seed-{p['seed']}"
            t = p["step_s"] * p["steps"]  # the sum of the steps' wall times: sampling, learner, waits; no eval
            train[a["name"]][p["seed"]] = t
            wall = json.loads((run / WALL).read_text())["wall_s"] if (run / WALL).is_file() else None
            lines.append(f"| {a['name']} | {p['seed']} | {t:.0f} | " + ("–" if wall is None else f"{wall:.0f}")
                         + f" | {p['step_s']:.1f} | {p['after'].get('greedy', float('nan')) * 100:.1f} |")
    base, other = arms[0], arms[1]
    common = sorted(set(train[base]) & set(train[other]))
    ratios = [train[base][s] / train[other][s] for s in common]
    lines += ["", "speed-up " + base + " / " + other + " (training time), per seed: "
              + ", ".join(f"{s}: {r:.2f}x" for s, r in zip(common, ratios))
              + (f"; median {statistics.median(ratios):.2f}x over {len(ratios)} seeds" if ratios else ""), ""]
    return lines + format_screen(result)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("runs/async_tools"), help="where each arm's seeds go")
    ap.add_argument("--seeds", default="0-2", help="seeds of both arms (default 0-2)")
    ap.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                    help="torch threads of the synchronous anchor (the async arm runs 2 processes x 1 thread)")
    ap.add_argument("--override", action="append", default=[],
                    help="a config override every arm takes, e.g. 'eval.extra_temperatures=[]' (repeatable)")
    ap.add_argument("--report", action="store_true", help="print the table of the runs there, train nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    arms = arm_overrides(args.threads)
    if not args.report:
        for i, seed in enumerate(seeds):
            for arm, overrides in arms.items():
                run = args.root / arm / f"seed-{seed}"
                if (run / "summary.json").is_file():
                    continue
                cmd = command(args.root, arm, seed, overrides, before=(i == 0 and arm == "sync"),
                              shared=tuple(args.override))
                print("$ " + " ".join(shlex.quote(c) for c in cmd[2:]), flush=True)
                if args.dry_run:
                    continue
                start = time.monotonic()
                done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
                if done.returncode != 0:
                    print(f"async_multiturn: {arm} seed {seed} failed (exit {done.returncode})", file=sys.stderr)
                    return done.returncode
                (run / WALL).write_text(json.dumps({"wall_s": time.monotonic() - start}))
        if args.dry_run:
            return 0
    print("\n".join(report(args.root, list(arms), seeds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
