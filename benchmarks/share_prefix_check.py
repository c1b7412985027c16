"""What ``HFEngine(share_prefix=N)`` changes: time, and how many sampled rows stay identical.

Sharing a chunk's common prompt prefix computes the same function with a different padding
layout (the pads sit after the prefix rather than before it), so the rounding changes. This
script samples the same 64 distinct arithmetic prompts with the option off and on, in each
sampler precision, greedy and at T = 1 with the same seed, and prints the time of each (best of
two after a warm-up), the speed-up, the number of rows whose tokens are identical, and the
largest log-prob difference over those rows. Usage::

    python benchmarks/share_prefix_check.py [--model NAME] [--share 16] [--dtypes float32 bfloat16]
"""

from __future__ import annotations

import argparse
import copy
import platform
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=64, help="distinct prompts, one sample each")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--share", type=int, default=16, help="share_prefix value compared with 0 (off)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args = ap.parse_args()

    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.models import load_policy
    from rlvr.tasks import ArithmeticSpec, arithmetic_split

    base, tok = load_policy(args.model)
    base.eval()
    _, problems = arithmetic_split(ArithmeticSpec(), 0, args.rows, seed=0)
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}; {args.rows} prompts x 1 sample, {args.new_tokens} new tokens")
    print(f"{'dtype':9} {'T':>3} {'off s':>7} {'on s':>7} {'speed-up':>8} {'identical rows':>14} {'max |dlogp|':>11}")
    for name in args.dtypes:
        dtype = getattr(torch, name)
        model = base if dtype == torch.float32 else copy.deepcopy(base).to(dtype)
        for temperature in (0.0, 1.0):
            params = SamplingParams(n=1, max_new_tokens=args.new_tokens, temperature=temperature, seed=0,
                                    ignore_eos=True)
            runs = {}
            for share in (0, args.share):
                engine = HFEngine(model, tok, batch_size=args.rows, share_prefix=share)
                engine.generate(problems, params)  # warm-up
                best, out = float("inf"), None
                for _ in range(2):
                    t0 = time.perf_counter()
                    out = engine.generate(problems, params)
                    best = min(best, time.perf_counter() - t0)
                runs[share] = (best, [g[0] for g in out])
            (t_off, off), (t_on, on) = runs[0], runs[args.share]
            same = [(a, b) for a, b in zip(off, on) if a.completion_ids == b.completion_ids]
            diff = max((abs(x - y) for a, b in same for x, y in zip(a.logprobs, b.logprobs)), default=float("nan"))
            print(f"{name:9} {temperature:3.0f} {t_off:7.2f} {t_on:7.2f} {t_off / t_on:7.2f}x "
                  f"{len(same):>7d} / {len(off):<4d} {diff:11.1e}", flush=True)


if __name__ == "__main__":
    main()
