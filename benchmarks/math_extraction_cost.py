"""Cost of reading one long response with the ``math`` verifier: linear in its length.

    python benchmarks/math_extraction_cost.py [--math-verify] [--repeat 3]

The responses are the reported ones: ``n`` boxes in one response (``\\boxed{1} `` repeated, 10
characters each: 20,000 boxes is 200,000 characters, the verifier's ``max_chars``), the
same joined by "Wait," (a list of guesses), and a long prose response with one box at the
end.  For each it prints the verifier's time (best of ``--repeat``, the sandbox worker
already started, so responses over ``INLINE_CHARS`` include the round trip to it) and the
**ratio to an anchor measured in the same run**: one regex pass over the same string that
finds every box (``re.finditer(r"\\\\boxed\\{[^{}]*\\}", s)``), the least any reader of the
response must do.  A linear reader keeps that ratio flat as ``n`` grows; the quadratic
outermost-box filter it replaced took 0.4 / 2.6 / 12.4 s at 2,000 / 5,000 / 10,000 boxes
and 58-94 s at 20,000 as reported (34.5 s on the development machine).  ``--math-verify``
also times ``math_verify.parse`` on the same string (its own extraction; 1.2 s at 20,000
boxes was reported).

Target: a 20,000-box response verifies in at most 1 s on the development machine; the
machine-independent claim is the ratio, which must not grow with ``n``.
"""

from __future__ import annotations

import argparse
import os
import re
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

_BOX_RE = re.compile(r"\\boxed\{[^{}]*\}")


def responses(n: int) -> dict[str, str]:
    return {
        "boxes": "\\boxed{1} " * n,
        "wait-joined guesses": "".join(f"\\boxed{{{i % 10}}}. Wait, " for i in range(n))[: 10 * n],
        "prose then one box": ("We add the numbers one step at a time. " * (n // 4))[: 10 * n] + " \\boxed{1}.",
    }


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000, 20000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--math-verify", action="store_true", help="also time math_verify.parse on each response")
    args = ap.parse_args()

    from rlvr.verifiers import get_verifier
    from rlvr.verifiers.math import INLINE_CHARS

    verify = get_verifier("math")
    assert verify("\\boxed{\\sqrt{8}}", "2\\sqrt{2}").correct  # starts the sandbox worker (not timed)
    verify("x" * (INLINE_CHARS + 1) + " \\boxed{1}", "1")  # and its long-response path
    print(f"math verifier on one response of n boxes (best of {args.repeat}; anchor: one regex pass finding every box)")
    print(f"{'response':<22}{'n':>7}{'chars':>9}{'verify s':>10}{'anchor s':>10}{'ratio':>8}  verdict"
          + ("   math-verify parse s" if args.math_verify else ""))
    for name in ("boxes", "wait-joined guesses", "prose then one box"):
        for n in args.sizes:
            s = responses(n)[name]
            anchor = best(lambda: sum(1 for _ in _BOX_RE.finditer(s)), args.repeat)
            t = best(lambda: verify(s, "1"), args.repeat)
            v = verify(s, "1")
            line = f"{name:<22}{n:>7}{len(s):>9}{t:>10.3f}{anchor:>10.5f}{t / anchor:>8.0f}  {v.score:.0f} {v.reason[:40]}"
            if args.math_verify:
                import logging

                from math_verify import parse

                logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs the whole input on a timeout

                line += f"   {best(lambda: parse(s), 1):.2f}"
            print(line, flush=True)
    s = responses(20000)["boxes"]
    t = best(lambda: verify(s, "1"), args.repeat)
    print(f"\n20,000 boxes: {t:.3f} s (target <= 1 s): {'yes' if t <= 1.0 else 'NO'}")


if __name__ == "__main__":
    main()
