"""GRPO step time and peak memory: full fine-tuning vs LoRA, same config, bundled model.

Each variant runs in its own process (so ``peak_rss_mb``, the process's high-water
mark, is its own) on the bundled SmolLM2-135M-Instruct with the same GRPO config:
arithmetic prompts, ``--prompts`` x ``--group`` completions forced to
``--new-tokens`` tokens (EOS ignored) so both do the same generation work, every
sequence through the learner (``algorithm.skip_zero_advantage=false``), bf16
sampler copy (the demo's setting), AdamW.  LoRA: r=16, alpha=32 on q/k/v/o/gate/up/down,
sampled from a merged bf16 copy.  The first step is a warm-up and excluded;
medians over the rest.  Prints a table and the ratios LoRA / full.

    python benchmarks/lora_vs_full.py [--steps 4] [--prompts 2] [--group 8] [--new-tokens 32] [--threads 2]
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


def run_variant(args) -> dict:
    import torch

    from rlvr.config import load_config
    from rlvr.utils.accounting import peak_rss_mb
    from rlvr.recipes.config import RunConfig
    from rlvr.tasks.registry import build_task
    from rlvr.recipes.rl import train
    from rlvr.trackers import read_metrics

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out:
        overrides = [*fixed_length_overrides(args, out), f"train.threads={args.threads}",
                     f"model.lora.enabled={'true' if args.variant == 'lora' else 'false'}"]
        cfg = load_config(RunConfig, None, overrides)
        model, tok = load_model(args)
        loaded_rss = peak_rss_mb()
        t0 = time.perf_counter()
        train(cfg, model=model, tokenizer=tok, problems=build_task(cfg.task))
        wall = time.perf_counter() - t0
        rows = read_metrics(f"{out}/metrics.jsonl")
    steady = rows[1:]
    med = {k: statistics.median(r[k] for r in steady) for k in ("step_time", "gen_time", "learn_time", "sync_time")}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    cuda_peak = max((r.get("cuda_peak_mb", 0.0) for r in rows), default=0.0)
    return {"variant": args.variant, **med, "cuda_peak_mb": cuda_peak, "wall": wall, "peak_rss_mb": rows[-1]["peak_rss_mb"],
            "rss_after_load_mb": loaded_rss, "trainable_params": trainable,
            "adam_state_mb": 2 * trainable * 4 / 2**20, "steps": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fixed_length_args(ap, steps=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="model.device: cpu or cuda")
    ap.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:  # child process: one variant, JSON on the last line
        print(json.dumps(run_variant(args)))
        return

    results = run_variants(__file__, ("full", "lora"), args, ["--threads", str(args.threads), "--device", args.device])

    print(f"{platform.processor() or platform.machine()}, device {args.device}, torch threads {args.threads}; "
          f"{args.prompts} prompts x {args.group} completions x {args.new_tokens} forced tokens; "
          f"medians over steps 2..{args.steps}")
    cols = ["step_time", "gen_time", "learn_time", "sync_time", "peak_rss_mb", "rss_after_load_mb",
            "trainable_params", "adam_state_mb"] + (["cuda_peak_mb"] if args.device.startswith("cuda") else [])
    print(f"| variant | {' | '.join(cols)} |")
    print("|---" * (len(cols) + 1) + "|")
    for v, r in results.items():
        print(f"| {v} | " + " | ".join(f"{r[c]:.0f}" if c.endswith(("mb", "params")) else f"{r[c]:.2f}"
                                       for c in cols) + " |")
    f, lo = results["full"], results["lora"]
    print(f"LoRA / full: step time {lo['step_time'] / f['step_time']:.2f}x, learn time "
          f"{lo['learn_time'] / f['learn_time']:.2f}x, peak RSS {lo['peak_rss_mb'] / f['peak_rss_mb']:.2f}x "
          f"(above the loaded model: {(lo['peak_rss_mb'] - lo['rss_after_load_mb']) / max(1, f['peak_rss_mb'] - f['rss_after_load_mb']):.2f}x), "
          f"trainable parameters {lo['trainable_params'] / f['trainable_params']:.3f}x"
          + (f", CUDA peak {lo['cuda_peak_mb'] / f['cuda_peak_mb']:.2f}x" if f["cuda_peak_mb"] else ""))


if __name__ == "__main__":
    main()
