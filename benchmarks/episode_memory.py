"""Peak resident memory of a held-out evaluation of multi-turn episodes, against the same evaluation with no
episode KV cache (the anchor), one fresh process each.

Each variant runs the recipe's set-up for CONFIG (model, engine, environment; no optimizer step) and then its
held-out evaluation at ``eval.temperature`` (``eval.extra_temperatures`` dropped) in a subprocess, so
high-water marks do not mix.  It prints, per variant, the resident set after set-up, after the evaluation
and its peak (``ru_maxrss``), the evaluation's wall time and accuracy, and the ratios of the peak's rise above
set-up and of the time against the anchor, ``rollout.engine_params={cache_mb: 0}`` (every turn prefilled in
full).  ``--trace`` also prints, after every ``generate`` call, the resident set and glibc's heap statistics
(``mallinfo2``: heap in use and free, mmapped): memory freed to the heap but kept by the process shows as
"free".

    python benchmarks/episode_memory.py configs/calculator_tools.yaml
    python benchmarks/episode_memory.py configs/code_feedback.yaml --set eval.num_problems=64 --trace
    python benchmarks/episode_memory.py configs/code_feedback.yaml --variants 0 128 256 1024
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _heap() -> str:
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return "heap: n/a (not glibc >= 2.33)"
    m, mib = libc.mallinfo2(), 2**20
    return f"heap in use {m.uordblks / mib:.0f} MiB, free {m.fordblks / mib:.0f} MiB, mmapped {m.hblkhd / mib:.0f} MiB"


def child(config: str, overrides: list[str], cache_mb: int, trace: bool) -> dict:
    from pathlib import Path
    import tempfile

    from rlvr.engines.hf import HFEngine
    from rlvr.recipes import rl
    from rlvr.recipes.api import _config
    from rlvr.utils.accounting import peak_rss_mb

    cfg = _config(config, [*overrides, "eval.extra_temperatures=[]"])
    params = dict(cfg.rollout.engine_params or {})
    params["cache_mb"] = cache_mb
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"engine_params": params})})
    if trace:
        generate = HFEngine.generate
        calls = [0]

        def traced(self, problems, sp, prefixes=None, cache=None):
            out = generate(self, problems, sp, prefixes=prefixes, cache=cache)
            calls[0] += 1
            held = f", cache {cache.nbytes / 2**20:.0f} MiB" if cache is not None else ""
            print(f"  generate {calls[0]}: {len(problems)} rows{held}; RSS {_rss_mib():.0f} MiB; {_heap()}",
                  file=sys.stderr, flush=True)
            return out

        HFEngine.generate = traced
    with tempfile.TemporaryDirectory() as tmp:
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"output_dir": tmp})})
        recipe = rl.RLRecipe(cfg)
        recipe.setup()
        if recipe.env is None or getattr(recipe.env, "single_turn", True):
            raise SystemExit(f"{config}: env {cfg.env.name!r} is single-turn: nothing to measure here")
        setup = _rss_mib()
        t = time.perf_counter()
        res = rl.evaluate_heldout(recipe.engine, recipe.heldout, recipe.verifier, cfg, "memory", Path(tmp),
                                  env=recipe.env)
        seconds = time.perf_counter() - t
    (name, r), = res.items()
    return {"cache_mb": cache_mb, "setup_mib": setup, "after_mib": _rss_mib(), "peak_mib": peak_rss_mb(),
            "seconds": seconds, "metric": name, "accuracy": r["accuracy"], "n": r["n"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--set", nargs="*", default=[], help="config overrides (key=value)")
    ap.add_argument("--variants", nargs="*", type=int, default=None,
                    help="cache_mb values to run (default: 0, the anchor, and the config's own)")
    ap.add_argument("--trace", action="store_true", help="RSS and heap statistics after every generate call")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.config, args.set, args.child, args.trace)))
        return 0
    if args.variants is None:
        from rlvr.recipes.api import _config

        own = int((_config(args.config, args.set).rollout.engine_params or {}).get("cache_mb", 1024))
        args.variants = [0, own] if own else [0]
    rows = []
    for mb in args.variants:
        cmd = [sys.executable, __file__, args.config, "--child", str(mb), "--set", *args.set]
        cmd += ["--trace"] if args.trace else []
        print(f"cache_mb={mb} ...", file=sys.stderr, flush=True)
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    anchor = rows[0]
    rise0 = max(anchor["peak_mib"] - anchor["setup_mib"], 1e-9)
    print(f"{args.config} {' '.join(args.set)}: held-out evaluation of episodes ({anchor['metric']}, "
          f"{anchor['n']} problems); ratios against cache_mb={anchor['cache_mb']} measured in this run")
    print("| cache_mb | RSS after set-up | peak | rise over set-up | RSS after | eval s | accuracy | rise ratio | "
          "time ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rise = r["peak_mib"] - r["setup_mib"]
        print(f"| {r['cache_mb']} | {r['setup_mib']:.0f} MiB | {r['peak_mib']:.0f} MiB | {rise:.0f} MiB | "
              f"{r['after_mib']:.0f} MiB | {r['seconds']:.0f} | {100 * r['accuracy']:.1f}% | "
              f"{rise / rise0:.2f} | {r['seconds'] / anchor['seconds']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
