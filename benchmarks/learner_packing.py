"""Learner tokens/s: sequences packed into token-budget micro-batches vs padded micro-batches, in one process.

One ``update_policy`` call (forward, backward, AdamW step) of the bundled
SmolLM2-135M-Instruct in float32 on a batch shaped like ``make demo``'s
(``--prompts`` x 8 samples; chat-formatted prompts of 48-50 tokens, completions
uniform in 5..48 tokens: see ``learner_memory.demo_batch``).  Each variant is a
set of config overrides; the variants run in turn, ``--repeats`` rounds
(interleaved, so drift in the shared machine's load hits all of them), and the
best time of each is kept.  Tokens/s counts real tokens (prompt + completion, no
padding), the same number for every variant; the ratio is against the first
variant (the padded anchor) measured in the same run.

    python benchmarks/learner_packing.py                         # padded vs packed, chunked log-probs
    python benchmarks/learner_packing.py --variants padded packed padded-bf16 packed-bf16
    python benchmarks/learner_packing.py --variants padded packed shared   # + one copy of each group's prompt

Tokens/s always counts the unshared real tokens, so a variant that computes fewer
(``shared``: each group's prompt once) shows its saving as a higher rate.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _demo import MEMORY_OPTIONS_OFF  # noqa: E402

VARIANTS = {
    "padded-full": ["train.micro_batch_size=16"],
    "padded": ["train.micro_batch_size=16", "train.logprob_chunk_size=256"],
    "packed": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256"],
    "packed-2048": ["train.micro_batch_tokens=2048", "train.logprob_chunk_size=256"],
    "packed-full": ["train.micro_batch_tokens=1024"],
    "shared": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256", "train.share_prompts=true"],
    "shared-ckpt": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256", "train.share_prompts=true",
                    "train.activation_checkpointing=true"],
    "packed-ckpt": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256",
                    "train.activation_checkpointing=true"],
    "packed-bf16-ckpt": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256", "train.autocast=bfloat16",
                         "train.activation_checkpointing=true"],
    "padded-bf16": ["train.micro_batch_size=16", "train.logprob_chunk_size=256", "train.autocast=bfloat16"],
    "packed-bf16": ["train.micro_batch_tokens=1024", "train.logprob_chunk_size=256", "train.autocast=bfloat16"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["padded", "packed"], choices=list(VARIANTS))
    ap.add_argument("--prompts", type=int, default=4, help="prompts x 8 samples per batch (the demo: 8)")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best time is kept")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from learner_memory import demo_batch

    from rlvr.config import load_config
    from rlvr.learner.update import update_policy
    from rlvr.models import load_policy
    from rlvr.recipes.config import RunConfig

    base, tok = load_policy("smollm2-135m-instruct")
    state = {k: v.clone() for k, v in base.state_dict().items()}
    batch = demo_batch(tok.pad_token_id, prompts=args.prompts)
    real = int(batch.attention_mask.sum())
    padded_tokens = batch.input_ids.numel()
    times: dict[str, list[float]] = {v: [] for v in args.variants}
    metrics = {}
    for _ in range(args.repeats):
        for v in args.variants:
            cfg = load_config(RunConfig, "configs/arithmetic_grpo.yaml", [*MEMORY_OPTIONS_OFF, *VARIANTS[v]])
            base.load_state_dict(state)  # every variant steps from the same weights
            opt = torch.optim.AdamW(base.parameters(), lr=cfg.train.lr, betas=tuple(cfg.train.betas))
            t0 = time.perf_counter()
            metrics[v] = update_policy(base, opt, batch, cfg.learner_settings())
            times[v].append(time.perf_counter() - t0)
            if getattr(base, "_rlvr_checkpointing", False):  # the next variant starts without checkpointing
                (getattr(base, "activation_checkpointing_disable", None) or base.gradient_checkpointing_disable)()
                base._rlvr_checkpointing = False
    anchor = min(times[args.variants[0]])
    print(f"machine: {platform.machine()}, {args.threads} thread(s), torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"batch: {args.prompts} prompts x 8 samples, {real} real tokens "
          f"({padded_tokens} in the padded [B, T] layout); best of {args.repeats}")
    print(f"{'variant':14s} {'s/step':>8s} {'tokens/s':>9s} {'vs ' + args.variants[0]:>12s} {'loss':>10s}  overrides")
    for v in args.variants:
        t = min(times[v])
        print(f"{v:14s} {t:8.2f} {real / t:9.1f} {anchor / t:11.2f}x {metrics[v]['loss']:10.5f}  "
              f"{' '.join(VARIANTS[v])}")


if __name__ == "__main__":
    main()
