"""Bias of per-turn baselines when episodes have different numbers of turns: the leave-one-out per-turn baseline
(``algorithm.turn_credit=loo``) vs the per-turn group mean that includes the episode itself.

    python benchmarks/turn_baseline_bias.py [--groups 200000] [--group-size 4] [--seed 0]

A toy MDP (the one ``tests/credit/test_turns.py`` uses): at turn k of at most 4 the action is 1 with probability
sigmoid(theta_k); action 1 earns 1 and continues with probability 0.8, action 0 earns 0.3 and continues with
probability 0.4, so an episode's number of turns depends on its actions.  The exact gradient of the expected
return (dynamic programming, autograd) is the anchor; for each baseline the mean of the per-episode
policy-gradient estimates over ``--groups`` groups is compared with it, per turn, in standard errors (z) and as a
ratio (estimate / exact).  An unbiased estimator has |z| of order 1 and ratios near 1 whatever the number of groups;
a biased one's |z| grows with the square root of the number of groups.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _toy():
    """The simulation helpers of tests/credit/test_turns.py (one definition of the MDP)."""
    sys.path.insert(0, str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("turn_tests", ROOT / "tests" / "credit" / "test_turns.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=200_000)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    t = _toy()
    theta = torch.tensor([0.3, -0.5, 0.8, 0.0])
    exact = t._true_gradient(theta)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}; {args.groups} groups "
          f"of {args.group_size}, seed {args.seed}")
    print("exact gradient (anchor): " + ", ".join(f"{x:.5f}" for x in exact.tolist()))
    for name, label in (("loo", "leave-one-out per-turn baseline (turn_credit=loo)"),
                        ("self", "per-turn group mean incl. the episode")):
        mean, se = t._estimated_gradients(theta, name, args.groups, args.group_size, args.seed)
        z = (mean - exact) / se
        ratio = mean / exact
        print(f"{label}:")
        print("  turn:      " + "  ".join(f"{k:>8d}" for k in range(len(exact))))
        print("  estimate:  " + "  ".join(f"{x:8.5f}" for x in mean.tolist()))
        print("  ratio:     " + "  ".join(f"{x:8.3f}" for x in ratio.tolist()))
        print("  z:         " + "  ".join(f"{x:8.1f}" for x in z.tolist()))


if __name__ == "__main__":
    main()
