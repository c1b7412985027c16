"""Rollout throughput: rlvr's HF engine vs plain ``model.generate`` vs a matmul roofline.

All numbers are measured in the same run on the same machine, for each sampler
precision (float32, bfloat16) and each batch shape of 64 decoded rows
(64 distinct prompts x 1 sample, and GRPO's 8 prompts x 8 samples):

* roofline: tokens/s the machine could reach if a decode step cost exactly
  ``2 x parameters`` FLOPs at the speed of a large dense matmul *in the same
  precision* measured here (it ignores attention, sampling, memory bandwidth
  and Python overhead: a hard upper bound);
* ``model.generate``: transformers' own sampler on the same model copy, prompts,
  batch and length (``num_return_sequences`` for groups);
* rlvr ``HFEngine``: the engine training and evaluation use.

Two ratios are printed: ``rlvr/roof`` against the roofline of the sampler's own
precision, and ``rlvr/fp32roof`` against the float32 roofline (the yardstick of the goal
"50% of the fp32 roofline at batch 64").  A bf16 sampler can clear the second
while sitting far below the first; both are reported so neither hides the other.

Generation is forced to the full length (``ignore_eos`` in rlvr, ``min_new_tokens``
in transformers) so both samplers do the same work.  Usage::

    python benchmarks/rollout_throughput.py [--model NAME] [--new-tokens 64] [--dtypes float32 bfloat16]
        [--decodes dynamic static compiled] [--share-prefix 0 16]
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rates import gemm_flops  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=64, help="sequences decoded together")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt in the grouped shape")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="sampler precisions to measure")
    ap.add_argument("--repeats", type=int, default=2, help="timed repetitions (best is kept)")
    ap.add_argument("--decodes", nargs="+", default=["dynamic"], choices=["dynamic", "static", "compiled"],
                    help="HFEngine decode modes to time (compiled: static cache + torch.compile; its compile "
                         "time falls in the untimed warm-up call)")
    ap.add_argument("--matmul", choices=["aten", "onednn"], default="aten",
                    help="float32 matmul backend for rlvr's engine (model.matmul); the script then also prints the "
                         "roofline at oneDNN's GEMM rate, which on AMD CPUs is about twice MKL's")
    ap.add_argument("--share-prefix", nargs="+", type=int, default=[0], metavar="N",
                    help="HFEngine share_prefix values to time (0: off; N: prefill a chunk's common prompt prefix "
                         "once when it is at least N tokens; the chat template's is 27 tokens here)")
    args = ap.parse_args()

    from rlvr.models import load_policy
    from rlvr.models.matmul import matmul_backend
    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.engines.hf import format_prompt
    from rlvr.tasks import ArithmeticSpec, arithmetic_split

    base, tok = load_policy(args.model)
    base.eval()
    n_params = sum(p.numel() for p in base.parameters())
    _, problems = arithmetic_split(ArithmeticSpec(), 0, args.batch, seed=0)
    eos = tok.eos_token_id
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print(f"model: {args.model} ({n_params / 1e6:.1f}M params), {args.batch} rows, {args.new_tokens} new tokens")
    fp32_roofline = gemm_flops(torch.float32, tries=2) / (2 * n_params)
    if args.matmul == "onednn":
        with matmul_backend("onednn"):
            onednn_roofline = gemm_flops(torch.float32, tries=2) / (2 * n_params)
        print(f"rlvr's engine runs with model.matmul=onednn; fp32 roofline at MKL's GEMM rate (torch.mm, the "
              f"columns below) {fp32_roofline:.0f} tok/s, at oneDNN's {onednn_roofline:.0f} tok/s")
    print(f"{'dtype':9} {'decode':9} {'share':>5} {'shape':12} {'roofline':>9} {'generate':>9} {'rlvr':>9} {'rlvr/roof':>9} "
          f"{'rlvr/fp32roof':>13} {'rlvr/gen':>8}")

    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        model = base if dtype == torch.float32 else copy.deepcopy(base).to(dtype)
        roofline = fp32_roofline if dtype == torch.float32 else \
            gemm_flops(dtype, tries=2) / (2 * n_params)
        engines = {(d, s): HFEngine(model, tok, batch_size=args.batch, decode=d, share_prefix=s)
                   for d in args.decodes for s in args.share_prefix}
        for n in (1, args.group):
            probs = problems[: args.batch // n]
            rows = len(probs) * n

            def run_engine(engine) -> float:
                t0 = time.perf_counter()
                out = engine.generate(probs, SamplingParams(n=n, max_new_tokens=args.new_tokens, temperature=1.0,
                                                            seed=0, ignore_eos=True))
                dt = time.perf_counter() - t0
                assert all(s.num_tokens == args.new_tokens for g in out for s in g)
                return rows * args.new_tokens / dt

            prompts = [format_prompt(tok, p) for p in probs]
            width = max(map(len, prompts))
            ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
            mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()

            def run_generate() -> float:
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                         top_p=1.0, top_k=0, max_new_tokens=args.new_tokens,
                                         min_new_tokens=args.new_tokens, num_return_sequences=n,
                                         pad_token_id=tok.pad_token_id, suppress_tokens=[eos])
                dt = time.perf_counter() - t0
                assert out.shape == (rows, width + args.new_tokens)
                return rows * args.new_tokens / dt

            hf_tps = max(run_generate() for _ in range(args.repeats))
            shape = f"{len(probs)}x{n}"
            for (decode, share), engine in engines.items():
                with matmul_backend(args.matmul):
                    run_engine(engine)  # warm-up (and, for decode=compiled, compilation)
                    rlvr_tps = max(run_engine(engine) for _ in range(args.repeats))
                print(f"{dtype_name:9} {decode:9} {share:5d} {shape:12} {roofline:9.0f} {hf_tps:9.1f} {rlvr_tps:9.1f} "
                      f"{rlvr_tps / roofline:9.1%} {rlvr_tps / fp32_roofline:13.1%} {rlvr_tps / hf_tps:7.2f}x",
                      flush=True)
    print(f"tokens/s; roofline = matmul FLOP/s in that dtype / (2 x params); fp32 roofline {fp32_roofline:.0f}")


if __name__ == "__main__":
    main()
