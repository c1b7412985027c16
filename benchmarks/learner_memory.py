"""Peak resident memory of the learner step: full logits vs chunked log-probs (and packing), one process each.

Each variant runs in a fresh subprocess (so high-water marks do not mix): load the
bundled SmolLM2-135M-Instruct in float32, build AdamW, allocate its state (one
step on zero gradients), then run ``--steps`` ``update_policy`` calls on a batch
shaped like ``make demo``'s (``--prompts`` x 8 samples, the demo has 8 prompts;
prompts 48-50 tokens, completions 5-48 tokens, every advantage non-zero so no row is skipped) with the demo's
``micro_batch_size`` 16.  It prints the process's peak RSS (``ru_maxrss``), the
RSS after set-up, and the peak of the step above it, and the ratio of each
variant's peak against the full-logits path measured in the same invocation.

``--phases`` instead runs the demo recipe itself (configs/arithmetic_grpo.yaml,
``--steps`` steps, a smaller held-out evaluation) and prints the high-water mark
of every phase (set-up, evaluation, collect, advantages, learn), resetting
``VmHWM`` through ``/proc/self/clear_refs`` between phases (Linux only).

    python benchmarks/learner_memory.py                      # full vs chunked, demo shapes
    python benchmarks/learner_memory.py --variants full chunk256 chunk256+pack2048
    python benchmarks/learner_memory.py --phases --steps 2 --set train.logprob_chunk_size=256
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _demo import MEMORY_OPTIONS_OFF  # noqa: E402

VARIANTS = {  # name -> config overrides
    "full": [],
    "chunk128": ["train.logprob_chunk_size=128"],
    "chunk256": ["train.logprob_chunk_size=256"],
    "chunk1024": ["train.logprob_chunk_size=1024"],
    "chunk256+pack2048": ["train.logprob_chunk_size=256", "train.micro_batch_tokens=2048"],
    "chunk256+pack1024": ["train.logprob_chunk_size=256", "train.micro_batch_tokens=1024"],
    "chunk256+ckpt": ["train.logprob_chunk_size=256", "train.activation_checkpointing=true"],
    "chunk256+pack1024+ckpt": ["train.logprob_chunk_size=256", "train.micro_batch_tokens=1024",
                               "train.activation_checkpointing=true"],
    "chunk256+pack1024+ckpt+mmap": ["train.logprob_chunk_size=256", "train.micro_batch_tokens=1024",
                                    "train.activation_checkpointing=true", "env:MALLOC_MMAP_THRESHOLD_=65536"],
    "full+bf16": ["train.autocast=bfloat16"],
    "chunk256+bf16": ["train.logprob_chunk_size=256", "train.autocast=bfloat16"],
}


def _status_mb(key: str) -> float:
    return int(re.search(rf"{key}:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


def demo_batch(tokenizer_pad: int, seed: int = 0, prompts: int = 8, group: int = 8, max_new: int = 48):
    """A Batch shaped like one demo step: chat-formatted prompts of 48-50 tokens (the arithmetic task's, measured),
    completion lengths uniform in 5..max_new (the demo's mean response length moves from ~37 to ~15 over
    training, with up to half the completions cut at max_new early on), random tokens."""
    import torch

    from rlvr.learner.batching import collate
    from rlvr.types import Sample

    g = torch.Generator().manual_seed(seed)
    samples = []
    for p in range(prompts):
        plen = int(torch.randint(48, 51, (1,), generator=g))
        prompt = torch.randint(100, 20000, (plen,), generator=g).tolist()
        for i in range(group):
            c = int(torch.randint(5, max_new + 1, (1,), generator=g))
            comp = torch.randint(100, 20000, (c,), generator=g).tolist()
            samples.append(Sample(f"p{p}", prompt, comp, [-1.0] * c, "", "stop", i))
    adv = torch.randn(len(samples), generator=g)
    return collate(samples, adv, tokenizer_pad)


def child(overrides: list[str], steps: int, prompts: int) -> None:
    import torch

    torch.set_num_threads(1)
    from rlvr.config import load_config
    from rlvr.learner.update import update_policy
    from rlvr.models import load_policy
    from rlvr.recipes.config import RunConfig

    cfg = load_config(RunConfig, "configs/arithmetic_grpo.yaml", [*MEMORY_OPTIONS_OFF, *overrides])
    torch.manual_seed(0)
    model, tok = load_policy(cfg.model.name)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
    batch = demo_batch(tok.pad_token_id, prompts=prompts, max_new=cfg.rollout.max_new_tokens)
    for p in model.parameters():  # allocate AdamW's state first, so one step shows the steady-state peak
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    rest = _status_mb("VmRSS")
    times, m = [], {}
    for _ in range(steps):
        t0 = time.perf_counter()
        m = update_policy(model, opt, batch, cfg.learner_settings())
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rest_mb": rest, "peak_mb": peak, "step_s": times, "loss": m.get("loss"),
                      "grad_norm": m.get("grad_norm"), "tokens": m.get("learner_tokens")}))


class _Phases:
    """Per-phase VmHWM of the recipe (reset through /proc/self/clear_refs before each phase)."""

    def __init__(self):
        self.rows: list[tuple[str, float, float]] = []

    def wrap(self, obj, name: str):
        fn = getattr(obj, name)

        def wrapped(*a, **k):
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            before = _status_mb("VmRSS")
            out = fn(*a, **k)
            self.rows.append((name, before, _status_mb("VmHWM")))
            return out

        setattr(obj, name, wrapped)


def phases(args) -> None:
    import torch

    torch.set_num_threads(1)
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import RLRecipe

    over = [f"train.steps={args.steps}", f"eval.num_problems={args.eval_problems}", "train.progress=false",
            "train.save_every=0", f"train.output_dir={args.out}", "train.threads=1"] + args.set
    cfg = load_config(RunConfig, "configs/arithmetic_grpo.yaml", over)
    rec = RLRecipe(cfg)
    ph = _Phases()
    for name in ("setup", "evaluate", "collect", "advantages", "learn", "checkpoint"):
        ph.wrap(rec, name)
    rec.train()
    print(f"overrides: {' '.join(args.set) or '(none)'}")
    print(f"{'phase':12s} {'RSS before MB':>14s} {'peak MB':>9s} {'peak - before':>14s}")
    for name, before, peak in ph.rows:
        print(f"{name:12s} {before:14.0f} {peak:9.0f} {peak - before:14.0f}")
    print(f"process peak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["full", "chunk256"], choices=list(VARIANTS))
    ap.add_argument("--steps", type=int, default=1, help="learner steps per variant (--phases: recipe steps)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts x 8 samples in the batch (the demo: 8)")
    ap.add_argument("--phases", action="store_true", help="per-phase peaks of the demo recipe instead")
    ap.add_argument("--eval-problems", type=int, default=64, help="--phases: held-out problems evaluated")
    ap.add_argument("--set", nargs="*", default=[], help="--phases: extra config overrides")
    ap.add_argument("--out", default="/tmp/rlvr_learner_memory", help="--phases: train.output_dir")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args.child, args.steps, args.prompts)
    if args.phases:
        return phases(args)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = {}
    for v in args.variants:
        over = [o for o in VARIANTS[v] if not o.startswith("env:")]
        venv = dict(env, **dict(o[4:].split("=", 1) for o in VARIANTS[v] if o.startswith("env:")))
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--prompts", str(args.prompts),
                              "--child", *over],
                             env=venv, capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-3000:])
            raise SystemExit(f"variant {v} failed")
        res[v] = json.loads(out.stdout.strip().splitlines()[-1])
    base = res[args.variants[0]]
    print(f"demo-shaped learner step ({args.prompts} prompts x 8 samples, AdamW state allocated), "
          f"{args.steps} update_policy call(s), 1 thread; anchor: {args.variants[0]}")
    print(f"{'variant':20s} {'rest MB':>8s} {'peak MB':>8s} {'step peak MB':>13s} {'peak ratio':>11s} "
          f"{'step s (last)':>14s} {'loss':>10s}")
    for v, r in res.items():
        print(f"{v:20s} {r['rest_mb']:8.0f} {r['peak_mb']:8.0f} {r['peak_mb'] - r['rest_mb']:13.0f} "
              f"{r['peak_mb'] / base['peak_mb']:10.2f}x {r['step_s'][-1]:14.2f} {r['loss']:10.5f}")


if __name__ == "__main__":
    main()
