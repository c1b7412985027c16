"""float32 CPU matmuls: PyTorch's BLAS (MKL, ``model.matmul=aten``) against oneDNN (``model.matmul=onednn``).

Measured in one run, each against the other:

* the 2048³ GEMM rate (the number the other benchmarks' rooflines and floors divide by);
* the decode-shaped products of SmolLM2-135M (every layer's weights and the LM head, 30
  distinct layers so the weights stream from memory as in a real step) at M = 8 and 64 rows,
  and the learner-shaped ones at M = 512 with both gradient products;
* ``HFEngine`` fp32 sampling of the bundled model, 64 distinct prompts x 1 and 8 x 8, 64 new
  tokens, T = 1, under each backend, against both backends' rooflines.

Usage::

    python benchmarks/matmul_backends.py [--model NAME] [--skip-engine]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rates import gemm_flops  # noqa: E402

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # SmolLM2-135M


def best_ms(fn, reps: int = 3, tries: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--skip-engine", action="store_true", help="only the matmul measurements")
    args = ap.parse_args()
    from rlvr.models.matmul import matmul_backend, onednn_available

    why = onednn_available()
    if why:
        raise SystemExit(f"oneDNN: {why}")
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    rates = {}
    for name in ("aten", "onednn"):
        with matmul_backend(name):
            rates[name] = gemm_flops(torch.float32)
    print(f"2048^3 fp32 GEMM: aten {rates['aten'] / 1e9:.0f} GFLOP/s, onednn {rates['onednn'] / 1e9:.0f} GFLOP/s "
          f"({rates['onednn'] / rates['aten']:.2f}x)")

    torch.manual_seed(0)
    layers = [[torch.randn(*s) * 0.05 for s in SHAPES] for _ in range(30)]
    head = torch.randn(49152, 576) * 0.05
    print(f"{'products':34} {'aten ms':>8} {'onednn ms':>9} {'speed-up':>8}")
    for m in (8, 64, 512):
        x, h = torch.randn(m, 576), torch.randn(m, 1536)

        def forward():
            for layer in layers:
                for w in layer:
                    torch.nn.functional.linear(h if w.shape[1] == 1536 else x, w)
            torch.nn.functional.linear(x, head)

        times = {}
        for name in ("aten", "onednn"):
            with matmul_backend(name):
                times[name] = best_ms(forward)
        print(f"{'forward, all weights, M = %d' % m:34} {times['aten']:8.1f} {times['onednn']:9.1f} "
              f"{times['aten'] / times['onednn']:7.2f}x")
    g, x = torch.randn(512, 1536), torch.randn(512, 576)
    w = torch.randn(1536, 576)
    for label, fn in (("grad input g @ W, 512x1536x576", lambda: g @ w),
                      ("grad weight g.T @ x, 1536x512x576", lambda: g.t() @ x)):
        times = {}
        for name in ("aten", "onednn"):
            with matmul_backend(name):
                times[name] = best_ms(fn, reps=10)
        print(f"{label:34} {times['aten']:8.2f} {times['onednn']:9.2f} {times['aten'] / times['onednn']:7.2f}x")

    if args.skip_engine:
        return
    from rlvr.engines import HFEngine, SamplingParams
    from rlvr.models import load_policy
    from rlvr.tasks import ArithmeticSpec, arithmetic_split

    model, tok = load_policy(args.model)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    roof = {k: v / (2 * n_params) for k, v in rates.items()}
    _, problems = arithmetic_split(ArithmeticSpec(), 0, 64, seed=0)
    print(f"HFEngine fp32, 64 rows x 64 tokens, T = 1; rooflines: aten {roof['aten']:.0f} tok/s, "
          f"onednn {roof['onednn']:.0f} tok/s")
    print(f"{'shape':6} {'backend':8} {'tok/s':>7} {'/ aten roof':>11} {'/ onednn roof':>13}")
    for n in (1, 8):
        probs = problems[: 64 // n]
        params = SamplingParams(n=n, max_new_tokens=64, temperature=1.0, seed=0, ignore_eos=True)
        for name in ("aten", "onednn"):
            engine = HFEngine(model, tok, batch_size=64)
            with matmul_backend(name):  # best of two calls after an untimed one
                s = best_ms(lambda: engine.generate(probs, params), reps=1, tries=2) / 1e3
            tps = 64 * 64 / s
            print(f"{f'{64 // n}x{n}':6} {name:8} {tps:7.1f} {tps / roof['aten']:11.1%} {tps / roof['onednn']:13.1%}",
                  flush=True)


if __name__ == "__main__":
    main()
