"""``rlvr seeds summarize DIR``: rebuild a seed sweep's summary from its seed-<s> runs."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr.cli._common import add_common, error


def run(ns) -> int:
    from rlvr.evaluate.seeds import format_seeds_markdown, write_seeds_summary
    from rlvr.recipes.seeds import SeedsError, parse_seeds

    try:
        seeds = parse_seeds(ns.seeds) if ns.seeds else None
    except SeedsError as e:
        print(f"rlvr: error: --seeds: {e}", file=sys.stderr)
        return 2
    if not Path(ns.dir).is_dir():
        print(f"rlvr: error: {ns.dir}: no such directory", file=sys.stderr)
        return 2
    try:  # --out: written elsewhere, the run directories stay untouched
        summary = write_seeds_summary(ns.dir, seeds, out_dir=ns.out, plot=not ns.no_plot, n_resamples=ns.resamples,
                                      confidence=ns.confidence)
    except (ValueError, OSError) as e:
        error(e)
        return 2
    print(format_seeds_markdown(summary))
    print("written: " + ", ".join(summary["paths"].values()))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("seeds", help="seed sweeps: `rlvr seeds summarize DIR` (median, IQR, curves; no training)")
    seeds_sub = p.add_subparsers(dest="seeds_command", required=True, metavar="ACTION")
    t = seeds_sub.add_parser("summarize", help="(re)build seeds.json/.md/.png from seed-<s> runs",
                             description="Read the seed-<s> run directories under DIR (made by `rlvr train CONFIG "
                                         "--seeds ...`, or by hand: one run per seed with train.output_dir="
                                         "DIR/seed-<s>) and write DIR/seeds.json, seeds.md and seeds.png: per seed "
                                         "the held-out accuracy before and after training (each evaluation "
                                         "temperature) and its curve over steps (eval.every); over the finished "
                                         "seeds the median, interquartile range, minimum, maximum and mean, with "
                                         "bootstrap intervals over seeds and held-out problems. Trains nothing; "
                                         "unfinished seeds are shown and left out of the statistics.\n\n"
                                         "Example: rlvr seeds summarize runs/arithmetic_grpo")
    t.add_argument("dir", help="the sweep's directory (train.output_dir of `rlvr train --seeds`)")
    t.add_argument("--seeds", metavar="LIST", help="only these seeds (e.g. 0-4; default every seed-<s> directory)")
    t.add_argument("--out", metavar="DIR", help="write the three files here instead of into DIR")
    t.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates (default 2000)")
    t.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    t.add_argument("--no-plot", action="store_true", help="skip seeds.png")
    add_common(t)
    t.set_defaults(func=run)
