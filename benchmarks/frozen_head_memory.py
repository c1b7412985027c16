"""Peak memory of one bf16 sampler prefill: a plain frozen copy vs ``rlvr.models.frozen.frozen_copy``.

PyTorch's CPU bf16 ``Linear``, with a weight that does not require grad and a
strided input, allocates far more than its output.  HF causal LMs feed their LM head
exactly such an input (hidden states sliced to the last ``logits_to_keep``
positions), so every prefill of a frozen bf16 sampler copy paid it.
``frozen_copy`` hands the head a contiguous copy instead.  This script measures
the resident-memory high-water mark of one prefill for both copies, in one
process, and prints the ratio (the anchor is the plain copy).  Linux only: it
resets ``VmHWM`` through ``/proc/self/clear_refs`` around each call.

    python benchmarks/frozen_head_memory.py                  # bundled model, 64 rows x 50 tokens
    python benchmarks/frozen_head_memory.py --rows 16 --tokens 200
"""

from __future__ import annotations

import argparse
import copy
import re

import torch


def _hwm_mb() -> float:
    return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


def _rss_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


def prefill_peak_mb(model, ids: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Memory above the resting RSS at the peak of one no-grad prefill (and its last-position logits)."""
    rest = _rss_mb()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current RSS
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    return _hwm_mb() - rest, logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model.name (default: the bundled model)")
    ap.add_argument("--rows", type=int, default=64, help="prompts in the prefill (rollout.batch_size)")
    ap.add_argument("--tokens", type=int, default=50, help="prompt length")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from rlvr.models import load_policy
    from rlvr.models.frozen import frozen_copy

    model, _ = load_policy(args.model)
    ids = torch.randint(100, 1000, (args.rows, args.tokens), generator=torch.Generator().manual_seed(0))
    plain = copy.deepcopy(model).to(torch.bfloat16).eval().requires_grad_(False)  # what rlvr did before
    plain_mb, plain_logits = prefill_peak_mb(plain, ids)
    del plain
    fixed = frozen_copy(model, torch.bfloat16)
    fixed_mb, fixed_logits = prefill_peak_mb(fixed, ids)
    diff = float((plain_logits.float() - fixed_logits.float()).abs().max())
    print(f"bf16 frozen copy of {args.model}, one prefill of {args.rows} x {args.tokens} tokens, "
          f"{args.threads} thread(s)")
    print(f"| copy | peak above resting RSS (MB) |\n| --- | --- |\n| plain (anchor) | {plain_mb:.0f} |\n"
          f"| frozen_copy | {fixed_mb:.0f} |")
    print(f"frozen_copy / plain: {fixed_mb / max(plain_mb, 1e-9):.3f}x peak memory; "
          f"max |logit difference| {diff:.3g}")


if __name__ == "__main__":
    main()
