"""Generating an evaluation's samples: one problem per engine call vs chunks of problems.

    python benchmarks/eval_generate_batching.py [--task gsm8k] [--problems 32] [--n 1] [--temperature 0]
                                                [--max-new-tokens 128] [--batch-size 64] [--dtype auto]

``rlvr eval`` writes its samples with :func:`rlvr.evaluate.samples.generate_samples`.  Until
2026-11-24 it called the engine once per problem (``chunk=1`` here, the anchor): with ``n = 1``
the engine decodes a batch of one row, reading every weight from memory for one token.  Now it
decodes ``batch_size // n`` problems per call, each problem still drawing from its own seeded
generator (``SamplingParams.seeds``), so its samples are those of a one-problem call up to the
float rounding of the batch layout.  Both arms run here, on the bundled model and the first
``--problems`` problems of a shipped benchmark, into two fresh samples files; printed: seconds,
problems/s, the speed-up, and how many samples came out with the same text (the rest
differ where rounding flipped a token: expected to be rare in greedy decoding).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="bundled name or HF directory")
    ap.add_argument("--task", default="gsm8k", choices=("gsm8k", "math500", "aime24", "amc23"))
    ap.add_argument("--problems", type=int, default=32, help="first problems of the task")
    ap.add_argument("--n", type=int, default=1, help="samples per problem")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64, help="engine rows decoded together (rlvr eval's default)")
    ap.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="sampler precision")
    args = ap.parse_args()

    from rlvr.engines import HFEngine
    from rlvr.engines.hf import sampler_dtype
    from rlvr.evaluate.samples import generate_samples, make_header, model_fingerprint
    from rlvr.models import load_policy
    from rlvr.tasks.benchmarks import load_benchmark

    model, tok = load_policy(args.model)
    problems = load_benchmark(args.task, limit=args.problems)
    engine = HFEngine(model, tok, batch_size=args.batch_size, dtype=sampler_dtype(args.dtype))
    header = make_header(args.task, problems, args.model, model_fingerprint(model), n=args.n,
                         temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=1234)
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"workload: {args.task}, {len(problems)} problems x n={args.n}, T={args.temperature}, "
          f"{args.max_new_tokens} new tokens max, sampler {args.dtype}, engine batch_size {args.batch_size}")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, chunk in (("one problem per call", 1), ("chunks", None)):
            t0 = time.perf_counter()
            records = generate_samples(engine, problems, header, Path(tmp) / f"{chunk}.jsonl", progress=False,
                                       chunk=chunk)
            runs[name] = (time.perf_counter() - t0, records)
    (t1, r1), (tc, rc) = runs["one problem per call"], runs["chunks"]
    pairs = [(a, b) for x, y in zip(r1, rc) for a, b in zip(x.samples, y.samples)]
    same = sum(a["text"] == b["text"] for a, b in pairs)
    tokens = sum(s["num_tokens"] for r in rc for s in r.samples)
    chunk = max(1, args.batch_size // args.n)
    print(f"one problem per call (anchor): {t1:7.1f} s  {len(problems) / t1:6.2f} problems/s")
    print(f"chunks of {chunk:3d} problems:       {tc:7.1f} s  {len(problems) / tc:6.2f} problems/s  "
          f"({tokens / tc:.0f} tokens/s)")
    print(f"speed-up: {t1 / tc:.2f}x; samples with the same text: {same} of {len(pairs)}")


if __name__ == "__main__":
    main()
