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
import subprocess
import sys
import tempfile
import time


def load_model(args):
    """The bundled model, or (``--random-weights``) its architecture freshly initialised from a
    directory holding only config + tokenizer: the same work per step for fixed-length rollouts."""
    import torch

    from rlvr.models import load_policy, load_tokenizer

    if not args.random_weights:
        return load_policy(args.model)
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model), dtype=torch.float32)
    return model, load_tokenizer(args.model)


def run_variant(args) -> dict:
    import torch

    from rlvr.config import load_config
    from rlvr.train.accounting import peak_rss_mb
    from rlvr.train.config import RunConfig
    from rlvr.train.data import build_task
    from rlvr.train.grpo import train
    from rlvr.train.metrics import read_metrics

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"train.output_dir={out}", f"train.steps={args.steps}", f"train.prompts_per_step={args.prompts}",
            f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.new_tokens}", "rollout.ignore_eos=true",
            "rollout.dtype=bfloat16", "algorithm.skip_zero_advantage=false", "train.micro_batch_size=16",
            "train.lr=3e-5", "train.warmup_steps=0", "train.save_every=0", "train.progress=false",
            f"train.threads={args.threads}", "eval.before_training=false", "eval.after_training=false",
            "task.num_train=200", "task.num_heldout=1", f"model.device={getattr(args, 'device', 'cpu')}",
            f"model.name={args.model}",
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
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="model.device: cpu or cuda")
    ap.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.name (default: the bundled model)")
    ap.add_argument("--random-weights", action="store_true",
                    help="initialise --model's architecture randomly (a directory with config + tokenizer only)")
    args = ap.parse_args()
    if args.variant:  # child process: one variant, JSON on the last line
        print(json.dumps(run_variant(args)))
        return

    results = {}
    for variant in ("full", "lora"):
        cmd = [sys.executable, __file__, "--variant", variant, "--steps", str(args.steps), "--prompts",
               str(args.prompts), "--group", str(args.group), "--new-tokens", str(args.new_tokens), "--model", args.model,
               *(["--random-weights"] if args.random_weights else []),
               "--threads", str(args.threads), "--device", args.device]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{variant} failed:\n{out.stderr[-3000:]}")
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])

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
