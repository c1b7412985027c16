"""``rlvr compare A B [...]``: does B beat A beyond noise (seed sweeps, or eval results)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.cli._common import add_common, csv_list, error


def _seed_sweep(path: str) -> dict | None:
    """The seeds summary a compare argument names (a sweep directory, summarised now, or a seeds.json), else None."""
    from rlvr.evaluate.compare import RunFileError, load_seed_summary_file

    p = Path(path)
    if p.is_dir():
        from rlvr.evaluate.seeds import summarize_seeds

        return summarize_seeds(p)  # from the run directories as they are now; nothing is written
    if p.is_file() and p.suffix == ".json":
        try:
            return load_seed_summary_file(p)
        except RunFileError:
            return None
    return None


def _compare_seeds(ns, names: list[str], sweeps: list[dict]) -> int:
    from rlvr.evaluate.compare import compare_seed_summaries, format_seed_comparisons

    results, all_comps = [], []
    for name, sweep in zip(names[1:], sweeps[1:]):
        comps = compare_seed_summaries(sweeps[0], sweep, name_a=names[0], name_b=name, metrics=csv_list(ns.metric),
                                       n_resamples=ns.resamples, confidence=ns.confidence, seed=ns.seed,
                                       resample=ns.resample)
        print(format_seed_comparisons(comps, sweeps[0], sweep) + "\n")
        results += [c.to_dict() for c in comps]
        all_comps += comps
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps({"baseline": names[0], "comparisons": results}, indent=2))
        print(f"written to {ns.output}")
    if ns.plot:
        from rlvr.evaluate.compare import plot_seed_comparison

        print(f"plot: {plot_seed_comparison(sweeps, names, all_comps, ns.plot)}")
    return 0


def run(ns) -> int:
    from rlvr.evaluate.compare import RunFileError, compare_methods, format_comparison, load_methods

    specs = [spec.partition("=") for spec in ns.methods]
    paths = [(files if sep else name) for name, sep, files in specs]
    try:
        sweeps = [None if "," in p else _seed_sweep(p) for p in paths]
    except ValueError as e:  # a directory without seed-<s> runs, an unreadable run file
        error(e)
        return 2
    if any(s is not None for s in sweeps):
        if not all(s is not None for s in sweeps):
            bad = [p for p, s in zip(paths, sweeps) if s is None]
            print(f"rlvr: error: compare seed sweeps with seed sweeps: {', '.join(bad)} is not one (a directory "
                  "of seed-<s> runs or a seeds.json)", file=sys.stderr)
            return 2
        if len(sweeps) < 2:
            print("rlvr: error: give two seed sweeps (baseline first)", file=sys.stderr)
            return 2
        names = [name if sep else (Path(p).name if Path(p).is_dir() else Path(p).resolve().parent.name)
                 for (name, sep, _), p in zip(specs, paths)]
        try:
            return _compare_seeds(ns, names, sweeps)
        except ValueError as e:
            error(e)
            return 2
    if ns.plot:
        print("rlvr: error: --plot draws seed sweeps (directories of seed-<s> runs or seeds.json), not results files",
              file=sys.stderr)
        return 2
    names, groups = [], []
    for spec in ns.methods:
        name, sep, files = spec.partition("=")
        if not sep:
            name, files = Path(spec.split(",")[0]).stem.replace(".results", ""), spec
        names.append(name)
        groups.append([f for f in files.split(",") if f])
    try:
        datas = load_methods(groups)
    except RunFileError as e:
        error(e)
        return 2
    results = []
    for name, data in zip(names[1:], datas[1:]):
        c = compare_methods(datas[0], data, name_a=names[0], name_b=name, n_resamples=ns.resamples,
                            confidence=ns.confidence, seed=ns.seed, resample=ns.resample)
        print(format_comparison(c) + "\n")
        results.append(c.to_dict())
    _support(names, groups, results)
    print(f"({len(datas[0])} task(s): {', '.join(datas[0])}; IQM over run x task scores, Agarwal et al. 2021)")
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps({"baseline": names[0], "comparisons": results}, indent=2))
        print(f"written to {ns.output}")
    return 0


def _support(names: list[str], groups: list[list[str]], results: list[dict]) -> None:
    """Where every method is one ``rlvr eval`` results file: each one's support change against the baseline
    (Invisible Leash: problems solved by both, only by the baseline, only by the method, by neither)."""
    from rlvr.evaluate.compare import correct_counts
    from rlvr.evaluate.metrics import support_change

    if any(len(g) != 1 for g in groups):
        return
    counts = [correct_counts(g[0]) for g in groups]
    if any(c is None for c in counts):
        return
    for name, c, result in zip(names[1:], counts[1:], results):
        s = support_change(counts[0], c)
        result["support"] = s
        print(f"support of {name} against {names[0]} over {s['shared']} shared problems: {s['preserved']} solved by "
              f"both, {s['shrunk']} lost (solved only by {names[0]}), {s['expanded']} gained (only by {name}), "
              f"{s['out_of_support']} by neither")


DESCRIPTION = """\
Does method B beat method A beyond noise, and by how much?

Seed sweeps: give two directories made by `rlvr train CONFIG --seeds ...` (or
their seeds.json), baseline first. For each evaluation key (greedy, T=1.0, ...)
it reports the median and mean final held-out accuracy of each side, the
differences B - A with intervals from a two-level bootstrap (seeds resampled on
each side, then the held-out problems, drawn once per replicate and shared by
both sides when they were evaluated on the same problems), the probability that
a seed of B ends above a seed of A, and a permutation test over seeds (exact up
to 200,000 splits, e.g. 10 + 10 seeds; 100,000 random splits beyond).
B (or A) wins "beyond seed noise" only when the interval of the mean difference
excludes 0 and p < 1 - confidence; otherwise it says "not resolved" and why.

  rlvr compare runs/baseline runs/candidate          # directories of seed-<s> runs
  rlvr compare aten=runs/aten/seeds.json onednn=runs/onednn/seeds.json --metric greedy

Evaluation results (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"):

Each FILE is one run (one seed on one task): an `rlvr eval` results JSON
(per_problem accuracies with ids) or {"task": ..., "scores": {id: score}}.
Give a method several files with commas (seeds, tasks) and a name with NAME=.
Scores: interquartile mean (IQM) of the run x task matrix; 95% intervals by a
stratified bootstrap (within each task: runs and problems resampled, problems
paired across methods by id); verdict from the interval of IQM(B) - IQM(A),
plus the probability of improvement P(B > A). When each method is one results
file, it also prints the support change (Wu et al. 2025, "The Invisible Leash"):
problems solved at least once by both, only by A (lost), only by B (gained).

Example:
  rlvr compare base=runs/eval/base.results.json grpo=runs/eval/s0.results.json,runs/eval/s1.results.json
"""


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="does run B beat run A beyond noise? (seed sweeps, or eval results)",
                       description=DESCRIPTION)
    p.add_argument("methods", nargs="+", metavar="[NAME=]PATH",
                   help="a seed sweep (its directory or seeds.json), or results JSON files of one method (seeds "
                        "and tasks, comma-separated); the first is the baseline every other is compared with")
    p.add_argument("--metric", help="seed sweeps: evaluation keys to compare, e.g. greedy (default all shared)")
    p.add_argument("--resample", choices=("runs+problems", "runs", "problems"), default="runs+problems",
                   help="what the stratified bootstrap resamples within each task (default runs+problems)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates (default 2000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--output", help="write the comparisons as JSON here")
    p.add_argument("--plot", metavar="PNG", help="seed sweeps: draw each sweep's median held-out curve and every "
                                                 "seed's final accuracy per key, with the differences, to this PNG")
    add_common(p)
    p.set_defaults(func=run)
