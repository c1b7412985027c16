"""Reward-hack suite: how many known hacks each verifier blocks.

    python benchmarks/reward_hacks.py [--verbose]

Runs every hack of :data:`rlvr.verifiers.hack_suite.HACKS` (code hacks in the
sandbox, judge hacks against a judge that answers "yes" to everything) and prints
blocked / total per verifier, then any hack that got through.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verbose", action="store_true", help="one line per hack")
    args = ap.parse_args()
    from rlvr.verifiers.hack_suite import run_hacks

    results = run_hacks()
    table: dict[str, list[bool]] = defaultdict(list)
    for hack, verdict in results:
        label = hack.verifier + (f" {hack.options}" if hack.options else "")
        table[label].append(verdict.score == 0.0)
        if args.verbose:
            print(f"{'blocked' if verdict.score == 0.0 else 'PASSED '}  {label:<34} {hack.name:<58} {verdict.reason[:70]}")
    print(f"\n{'verifier':<36}{'blocked / total':>16}")
    for label, blocked in sorted(table.items()):
        print(f"{label:<36}{sum(blocked):>8} / {len(blocked)}")
    total = [b for bs in table.values() for b in bs]
    print(f"{'all':<36}{sum(total):>8} / {len(total)}")
    leaks = [(h.verifier, h.name, v.reason) for h, v in results if v.score != 0.0]
    for leak in leaks:
        print("NOT BLOCKED:", *leak)


if __name__ == "__main__":
    main()
