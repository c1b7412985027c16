"""Resident memory of the CPU bf16 matmul kernel caches, with and without ``train.onednn_cache``.

On a CPU with bf16 matmul support (AMX or AVX512-BF16) ``torch.nn.functional.linear`` in bf16 runs through oneDNN,
which compiles a kernel per input shape and keeps it in two caches (oneDNN's primitive cache and PyTorch's ideep
cache, 1,024 entries each by default). A sampler whose prefill shapes keep changing (multi-turn episodes: rows x
width differ from chunk to chunk) fills them step after step.

Each case runs in a fresh process (the caches are built at the first bf16 matmul and read their capacity then):

* ``prefill``: one bf16 linear per new row count M (``--shapes`` of them), over the bundled model's weight shapes
  (SmolLM2-135M: 576 -> 576, 576 -> 192, 576 -> 1536, 1536 -> 576; the LM head 576 -> 49152 every 8th), as a
  sampler's ever-new prefills would; printed: the resident set's rise;
* ``decode``: a decode-like loop, the same M for 16 token steps over the same weights, then the next M (rows
  finish): seconds per matmul (what a small cache could cost in recompilations).

The anchor is the libraries' default (no variable set); the capped cases set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
and ``LRU_CACHE_CAPACITY`` through ``rlvr.utils.accounting.set_onednn_cache_capacity`` (what the recipe does).
Printed: rise and time per case and their ratios to the anchor, and whether the outputs of the first 32 shapes,
computed again afterwards (recompiled where a small cache evicted them), are bitwise equal across cases. Run alone: ``python
benchmarks/onednn_cache_memory.py [--shapes 600] [--caps 64 128 256]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

WEIGHTS = [(576, 576), (192, 576), (1536, 576), (576, 1536)]
LM_HEAD = (49152, 576)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(cap: int, shapes: int) -> dict:
    if cap:
        from rlvr.utils.accounting import set_onednn_cache_capacity

        set_onednn_cache_capacity(cap)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    ws = [torch.randn(n, k, dtype=torch.bfloat16) for n, k in WEIGHTS]
    head = torch.randn(*LM_HEAD, dtype=torch.bfloat16)
    with torch.no_grad():
        for w in ws + [head]:  # libraries' one-time set-up, outside the measurement
            F.linear(torch.randn(1, w.shape[1], dtype=torch.bfloat16), w)
        r0 = rss_mib()
        t = time.perf_counter()
        for m in range(2, shapes + 2):
            for w in ws:
                F.linear(torch.randn(m, w.shape[1], dtype=torch.bfloat16), w)
            if m % 8 == 0:
                F.linear(torch.randn(m, LM_HEAD[1], dtype=torch.bfloat16), head)
        prefill_s = time.perf_counter() - t
        rise = rss_mib() - r0
        calls, t = 0, time.perf_counter()
        for m in range(64, 0, -4):  # rows finish: 64, 60, ... 4 live rows, 16 token steps each
            x = {k: torch.randn(m, k, dtype=torch.bfloat16) for k in (576, 1536)}
            for _ in range(16):
                for w in ws:
                    F.linear(x[w.shape[1]], w)
                    calls += 1
        decode_s = time.perf_counter() - t
        # the first shapes again (evicted from a small cache, recompiled): the digest of their outputs must not
        # depend on the capacity (a recompiled kernel is the same kernel)
        g = torch.Generator().manual_seed(1)
        digest = hashlib.sha256()
        for m in range(2, 34):
            for w in ws:
                digest.update(F.linear(torch.randn(m, w.shape[1], generator=g).bfloat16(), w).view(torch.int16)
                              .numpy().tobytes())
    bf16 = torch.backends.mkldnn.is_available() and getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported",
                                                             lambda: None)()
    return {"cap": cap, "digest": digest.hexdigest(), "rise_mib": rise, "prefill_s": prefill_s, "decode_ms_per_matmul": 1000 * decode_s / calls,
            "onednn_bf16": bool(bf16)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=int, default=600, help="new row counts M in the prefill case")
    ap.add_argument("--caps", type=int, nargs="*", default=[64, 128, 256], help="capped cases (entries per cache)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.shapes)))
        return
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    env["OMP_NUM_THREADS"] = "1"
    rows = []
    for cap in [0, *args.caps]:
        out = subprocess.run([sys.executable, __file__, "--child", str(cap), "--shapes", str(args.shapes)],
                             env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    a = rows[0]
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, 1 torch thread; "
          f"oneDNN bf16 matmul: {a['onednn_bf16']}; {args.shapes} new prefill shapes")
    print(f"{'cache entries':>14} {'RSS rise MiB':>13} {'rise ratio':>10} {'prefill s':>10} "
          f"{'decode ms/matmul':>17} {'decode ratio':>12}")
    same = all(r["digest"] == a["digest"] for r in rows)
    for r in rows:
        name = "1024 (anchor)" if r["cap"] == 0 else str(r["cap"])
        print(f"{name:>14} {r['rise_mib']:>13.0f} {r['rise_mib'] / max(a['rise_mib'], 1e-9):>10.2f} "
              f"{r['prefill_s']:>10.1f} {r['decode_ms_per_matmul']:>17.3f} "
              f"{r['decode_ms_per_matmul'] / a['decode_ms_per_matmul']:>12.2f}")
    print(f"outputs of 32 shapes computed again after the prefill loop, bitwise equal in every case: {same}")
    if not same:
        raise SystemExit("a capped cache changed a matmul's result")


if __name__ == "__main__":
    main()
