"""Rollout throughput: rlvr's HF engine vs plain ``model.generate`` vs a matmul roofline.

All three numbers are measured in the same run on the same machine:

* roofline: tokens/s the machine could reach if a decode step cost exactly
  ``2 x parameters`` FLOPs at the speed of a large dense matmul measured here
  (so it ignores attention, sampling and Python overhead: a hard upper bound);
* ``model.generate``: transformers' own sampler, same prompts, batch, length;
* rlvr ``HFEngine``: the engine training and evaluation use.

Generation is forced to the full length (``ignore_eos`` in rlvr, ``min_new_tokens``
in transformers) so both samplers do the same work.  Usage::

    python benchmarks/rollout_throughput.py [--model NAME] [--batch 64] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch


def matmul_flops(n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=64, help="sequences decoded together")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="timed repetitions (best is kept)")
    args = ap.parse_args()

    from rlvr.models import load_policy
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.rollout.hf import format_prompt
    from rlvr.tasks import ArithmeticSpec, arithmetic_split

    model, tok = load_policy(args.model)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    _, problems = arithmetic_split(ArithmeticSpec(), 0, args.batch, seed=0)
    engine = HFEngine(model, tok, batch_size=args.batch)

    flops = max(matmul_flops() for _ in range(2))
    roofline = flops / (2 * n_params)

    eos = tok.eos_token_id

    def run_engine() -> float:
        t0 = time.perf_counter()
        out = engine.generate(problems, SamplingParams(n=1, max_new_tokens=args.new_tokens, temperature=1.0, seed=0,
                                                           ignore_eos=True))
        dt = time.perf_counter() - t0
        assert all(s.num_tokens == args.new_tokens for g in out for s in g)
        return args.batch * args.new_tokens / dt

    prompts = [format_prompt(tok, p) for p in problems]
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()

    def run_generate() -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                 top_k=0, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 pad_token_id=tok.pad_token_id, suppress_tokens=[eos])
        dt = time.perf_counter() - t0
        assert out.shape[1] - width == args.new_tokens
        return args.batch * args.new_tokens / dt

    run_engine()  # warm-up
    rlvr_tps = max(run_engine() for _ in range(args.repeats))
    hf_tps = max(run_generate() for _ in range(args.repeats))

    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print(f"model: {args.model} ({n_params / 1e6:.1f}M params), batch {args.batch}, {args.new_tokens} new tokens")
    print(f"matmul: {flops / 1e9:.1f} GFLOP/s  ->  roofline {roofline:.0f} tokens/s (2 x params FLOPs per token)")
    print(f"model.generate: {hf_tps:8.1f} tokens/s  ({hf_tps / roofline:.1%} of roofline)")
    print(f"rlvr HFEngine:  {rlvr_tps:8.1f} tokens/s  ({rlvr_tps / roofline:.1%} of roofline)")
    print(f"ratio rlvr / model.generate: {rlvr_tps / hf_tps:.2f}x")


if __name__ == "__main__":
    main()
