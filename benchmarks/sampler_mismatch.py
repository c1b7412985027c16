"""Where the sampler/learner log-prob mismatch of ``make demo`` comes from, cause by cause.

The learner's importance ratio compares its own log-probs with the sampler's (``Batch.sampler_logprobs``).
On the demo they differ for up to three reasons, each switched off in turn here on the same policy and the
same prompts:

* **precision**: the demo samples from a bf16 copy of the fp32 policy (``rollout.dtype=bfloat16``);
  ``fp32 sampler`` samples from the policy itself.
* **decode vs teacher forcing**: the sampler computes each token's log-prob in an incremental,
  KV-cached, left-padded decode of 64 rows; the learner re-reads the finished sequence in one forward.
  ``teacher-forced, sampler dtype`` re-reads the samples with the sampler's own weights (bf16 or fp32):
  its distance to the sampler is the decode's share, its distance to the learner the precision's.
* **batch composition**: the learner packs sequences into 1024-token rows with each group's prompt shared
  (``train.micro_batch_tokens`` / ``share_prompts``, chunked LM head); ``padded`` runs the same rows
  padded, 16 per micro-batch, and ``one row`` each sequence alone with full logits. Their distances to each
  other are what the layout alone changes.
* top-p/top-k truncation: the demo samples with ``top_p=1`` (no truncation), so it adds nothing there; the
  engine records log-probs before truncation, so with ``top_p < 1`` the recorded log-prob is not the
  probability the token was drawn with (it is lower by log of the kept mass) — ``--top-p 0.9`` reports
  that gap as ``truncation``.

Each row: mean and max |Delta log p| over completion tokens and the share of tokens whose ratio
exp(Delta) leaves [0.9, 1.1], for ``--prompts`` x 8 samples drawn from the policy at each ``--checkpoint``
(default: the bundled model before training).  The anchor is the fp32 learner against itself on another
layout, measured in the same run.

    python benchmarks/sampler_mismatch.py
    python benchmarks/sampler_mismatch.py --checkpoint runs/x/seed-0/checkpoints/step-000040 --prompts 16
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from rlvr.config import load_config
from rlvr.learner.batching import packed_logprobs, policy_logprobs
from rlvr.learner.update import sub_batch
from rlvr.recipes.config import RunConfig
from rlvr.recipes.rl import RLRecipe


def distance(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and max |a - b| over ``mask`` and the share of those tokens with exp(a - b) outside [0.9, 1.1]."""
    d = (a - b).float()[mask.bool()]
    if d.numel() == 0:
        return {"mean": 0.0, "max": 0.0, "outside": 0.0, "tokens": 0}
    r = d.exp()
    return {"mean": float(d.abs().mean()), "max": float(d.abs().max()),
            "outside": float(((r < 0.9) | (r > 1.1)).float().mean()), "tokens": int(d.numel())}


def learner_logprobs(model, batch, layout: str, chunk: int) -> torch.Tensor:
    """Per-token log-probs [B, T] (0 off the completion) of the fp32 learner in one layout, no gradient."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    rows = torch.arange(batch.input_ids.shape[0])
    groups = {"packed": [rows], "padded": list(rows.split(16)), "one row": [r.view(1) for r in rows]}[layout]
    with torch.no_grad():
        for g in groups:
            mb, start = sub_batch(batch, g)
            if layout == "packed":
                lp, _ = packed_logprobs(model, mb.input_ids, mb.attention_mask, start, 1.0, chunk_size=chunk,
                                        share_prompts=True)
            else:
                lp, _ = policy_logprobs(model, mb.input_ids, mb.attention_mask, start, 1.0,
                                        chunk_size=chunk if layout == "padded" else 0)
            hi = int(batch.attention_mask[g].any(0).nonzero()[-1]) + 1
            out[g, hi - lp.shape[1]:hi] = lp.float()
    return out * batch.completion_mask


def measure(cfg: RunConfig, top_p: float) -> list[dict]:
    recipe = RLRecipe(cfg)
    recipe.setup()
    recipe.params.top_p = top_p
    from rlvr.utils.accounting import StepAccounting

    recipe.acct = StepAccounting(recipe.device)
    recipe.acct.start_step()
    ro = recipe.collect(0)
    batch = recipe.advantages(ro).batch
    mask = batch.completion_mask
    sampler = batch.sampler_logprobs * mask
    chunk = cfg.train.logprob_chunk_size
    layouts = {k: learner_logprobs(recipe.model, batch, k, chunk) for k in ("packed", "padded", "one row")}
    # the sampler's own weights re-reading the finished samples (teacher forcing, no KV cache)
    tf = learner_logprobs(recipe.engine.model, batch, "one row", 0)
    rows = [
        {"compare": "learner (packed, demo) vs sampler", **distance(layouts["packed"], sampler, mask)},
        {"compare": "learner (padded) vs sampler", **distance(layouts["padded"], sampler, mask)},
        {"compare": "learner (one row) vs sampler", **distance(layouts["one row"], sampler, mask)},
        {"compare": "teacher-forced, sampler dtype vs sampler (decode)", **distance(tf, sampler, mask)},
        {"compare": "learner (one row) vs teacher-forced, sampler dtype (precision)",
         **distance(layouts["one row"], tf, mask)},
        {"compare": "learner packed vs one row (layout)", **distance(layouts["packed"], layouts["one row"], mask)},
        {"compare": "learner padded vs one row (layout)", **distance(layouts["padded"], layouts["one row"], mask)},
    ]
    if top_p < 1:
        with torch.no_grad():  # log of the probability mass the nucleus kept at each sampled token's step
            gap = truncation_gap(recipe.engine.model, batch, top_p)
        rows.append({"compare": f"truncation: drawn-with vs recorded (top_p={top_p})", **distance(gap, 0 * gap, mask)})
    return rows


def truncation_gap(model, batch, top_p: float) -> torch.Tensor:
    """-log(mass kept by top-p) at every completion position, [B, T]: what the recorded log-prob misses."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for r in range(batch.input_ids.shape[0]):
        mb, start = sub_batch(batch, torch.tensor([r]))
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits[0, start - 1:-1]
        p = logits.float().softmax(-1)
        sp, _ = p.sort(-1, descending=True)
        cum = sp.cumsum(-1)
        keep = (cum - sp) < top_p  # tokens kept by the nucleus (the first always)
        kept = (sp * keep).sum(-1)
        hi = int(batch.attention_mask[r].nonzero()[-1]) + 1
        out[r, hi - kept.shape[0]:hi] = -kept.log()
    return out * batch.completion_mask


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/arithmetic_grpo.yaml")
    ap.add_argument("--checkpoint", nargs="*", default=[None], help="rlvr checkpoints to sample from (default: the untrained model)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts (x 8 samples) per measurement")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')}")
    results = []
    for ckpt in args.checkpoint:
        for dtype in ("bfloat16", "float32"):
            cfg = load_config(RunConfig, args.config, [
                f"rollout.dtype={dtype}", f"train.prompts_per_step={args.prompts}", f"train.seed={args.seed}",
                "rollout.sleep_while_learning=false", "train.output_dir=/tmp/rlvr-sampler-mismatch",
                "train.progress=false", *([f"model.name={ckpt}"] if ckpt else [])])
            rows = measure(cfg, args.top_p)
            print(f"\n## policy {ckpt or 'untrained'}, sampler {dtype}")
            print(f"{'compare':66s} {'mean|d|':>9s} {'max|d|':>9s} {'outside':>8s} {'tokens':>7s}")
            for r in rows:
                print(f"{r['compare']:66s} {r['mean']:9.5f} {r['max']:9.5f} {r['outside']:8.2%} {r['tokens']:7d}")
                results.append({"policy": ckpt or "untrained", "sampler": dtype, **r})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
