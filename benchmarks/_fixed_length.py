"""Shared pieces of the benchmarks that compare GRPO variants on fixed-length work
(``async_rollouts.py``, ``lora_vs_full.py``): the model, the common config, and the
one-process-per-variant driver (so each variant's peak memory is its own)."""

from __future__ import annotations

import json
import subprocess
import sys


def add_fixed_length_args(ap, steps: int) -> None:
    """The options every variant process shares (``run_variants`` passes exactly these on)."""
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.name (default: the bundled model)")
    ap.add_argument("--random-weights", action="store_true",
                    help="initialise --model's architecture randomly (a directory with config + tokenizer only)")


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


def fixed_length_overrides(args, out: str) -> list[str]:
    """GRPO config shared by every variant: generation forced to ``--new-tokens`` (EOS ignored)
    and every sequence through the learner, so each variant does the same work per step."""
    return [
        f"train.output_dir={out}", f"train.steps={args.steps}", f"train.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.new_tokens}", "rollout.ignore_eos=true",
        "rollout.dtype=bfloat16", "algorithm.skip_zero_advantage=false", "train.micro_batch_size=16",
        "train.lr=3e-5", "train.warmup_steps=0", "train.save_every=0", "train.progress=false",
        "eval.before_training=false", "eval.after_training=false", "task.params.num_train=200", "task.num_heldout=1",
        f"model.device={getattr(args, 'device', 'cpu')}", f"model.name={args.model}"]


def run_variants(script: str, variants, args, extra: list[str] = ()) -> dict[str, dict]:
    """Run ``script --variant V`` in a fresh process per variant; each prints its result JSON last."""
    results = {}
    for variant in variants:
        cmd = [sys.executable, script, "--variant", variant, "--steps", str(args.steps), "--prompts",
               str(args.prompts), "--group", str(args.group), "--new-tokens", str(args.new_tokens), "--model", args.model,
               *(["--random-weights"] if args.random_weights else []), *extra]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{variant} failed:\n{out.stderr[-3000:]}")
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    return results
