"""Wall time of GRPO steps: synchronous vs asynchronous rollouts (k = 1), two processes, bundled model.

Three runs of the same GRPO config on the bundled SmolLM2-135M-Instruct, each in
its own process tree:

* ``sync-2proc``: ``train.rollout_worker=true``, ``train.async_steps=0`` - the
  generator process samples batch ``b`` only after update ``b-1`` (on-policy);
  learner and generator strictly alternate.  **The anchor.**
* ``async-k1``: ``train.async_steps=1`` - the generator samples batch ``b`` with
  the weights of update ``b-2`` while the learner trains on batch ``b-1``
  (TIS correction on, cap 2).
* ``inproc-2threads``: the default in-process loop, one process with 2 torch
  threads (for reference: what a user gets without the extra process).

Both two-process runs give each process 1 torch thread (``train.threads=1``), so
the comparison isolates overlap: on 2 cores the synchronous pair leaves one core
idle at any moment, the asynchronous pair can keep both busy.  Same work in all
three: fixed-length generation (EOS ignored) and every sequence through the
learner (``algorithm.skip_zero_advantage=false``); TIS weights are computed in all.
Reported: the sum of learner step times over steps 2..N (steady state; step 1
includes starting the generator) and the wall time of the whole ``train`` call.
Prints the speed-up sync / async.

    python benchmarks/async_rollouts.py [--steps 5] [--prompts 2] [--group 8] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixed_length import add_fixed_length_args, fixed_length_overrides, load_model, run_variants  # noqa: E402

VARIANTS = {
    "sync-2proc": ["train.rollout_worker=true", "train.async_steps=0", "train.threads=1"],
    "async-k1": ["train.async_steps=1", "train.threads=1"],
    "inproc-2threads": ["train.threads=2"],
}


def run_variant(args) -> dict:
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.tasks.registry import build_task
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    with tempfile.TemporaryDirectory() as out:
        overrides = [*fixed_length_overrides(args, out), "algorithm.is_correction=tis", *VARIANTS[args.variant]]
        cfg = load_config(RunConfig, None, overrides)
        import torch

        torch.set_num_threads(cfg.train.threads)
        model, tok = load_model(args)
        t0 = time.perf_counter()
        train(cfg, model=model, tokenizer=tok, problems=build_task(cfg.task))
        wall = time.perf_counter() - t0
        rows = read_metrics(f"{out}/metrics.jsonl")
    steady = rows[1:]
    return {"variant": args.variant, "steady_s": sum(r["step_time"] for r in steady), "wall": wall,
            "step_median": statistics.median(r["step_time"] for r in steady),
            "gen_median": statistics.median(r["gen_time"] for r in steady),
            "learn_median": statistics.median(r["learn_time"] for r in steady),
            "wait_median": statistics.median(r.get("wait_time", 0.0) for r in steady),
            "sync_median": statistics.median(r["sync_time"] for r in steady),
            "staleness": [r.get("staleness", 0) for r in rows],
            "learner_peak_rss_mb": rows[-1]["peak_rss_mb"],
            "generator_peak_rss_mb": rows[-1].get("rollout_peak_rss_mb", 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fixed_length_args(ap, steps=5)
    ap.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args)))
        return

    results = run_variants(__file__, VARIANTS, args)

    print(f"{platform.processor() or platform.machine()}; {args.prompts} prompts x {args.group} completions x "
          f"{args.new_tokens} forced tokens; {args.steps} steps (steady state = steps 2..{args.steps})")
    cols = ["steady_s", "wall", "step_median", "gen_median", "learn_median", "wait_median", "sync_median",
            "learner_peak_rss_mb", "generator_peak_rss_mb"]
    print(f"| variant | {' | '.join(cols)} | staleness |")
    print("|---" * (len(cols) + 2) + "|")
    for v, r in results.items():
        print(f"| {v} | " + " | ".join(f"{r[c]:.0f}" if c.endswith("mb") else f"{r[c]:.2f}" for c in cols)
              + f" | {r['staleness']} |")
    s, a = results["sync-2proc"], results["async-k1"]
    print(f"speed-up async k=1 over sync (2 processes, 1 thread each): steady state "
          f"{s['steady_s'] / a['steady_s']:.2f}x, whole run {s['wall'] / a['wall']:.2f}x; "
          f"in-process 2 threads / async: {results['inproc-2threads']['steady_s'] / a['steady_s']:.2f}x")


if __name__ == "__main__":
    main()
