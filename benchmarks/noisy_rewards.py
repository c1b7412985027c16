"""Training with a noisy verifier: 20% and 40% of rewards flipped, uncorrected vs corrected.

The verifier's verdicts pass through a symmetric noisy channel
(``reward.flip_false_positive = reward.flip_false_negative = rho``: a wrong answer
is rewarded with probability rho, a right one is not with probability rho), and
the policy is trained with

* ``grpo``       GRPO, uncorrected (what most pipelines do);
* ``reinforce``  REINFORCE on the raw noisy reward, uncorrected;
* ``backward``   REINFORCE on the backward-corrected reward r^ = (r~ - rho0) / (1 - rho0 - rho1)
                 (Cai et al. 2025), with the true rates;
* ``forward``    forward correction, advantages w = r~ - (1 - rho1) (Cai et al. 2025).

GRPO is not paired with a correction on purpose: both corrections are affine in
the reward, and GRPO's group mean/std normalisation cancels an affine map exactly
(``tests/rewards/test_rewards.py`` asserts it), so "corrected GRPO" *is* GRPO.  The
held-out accuracy is measured with the true verifier, and ``accuracy`` in
metrics.jsonl keeps the true verdicts while ``reward_mean`` sees the flips.

Same model, task, budget and evaluation as ``algorithm_ablation.py``; outputs
``table.md``, ``curves.png``, ``summary.json`` in ``--out`` (anchor: clean GRPO).

    python benchmarks/noisy_rewards.py [--rates 0.2 0.4] [--seeds 0] [--budget 384]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from algorithm_ablation import ROOT, initial_accuracy, run_one, summarise, write_outputs  # noqa: E402


def conditions(rates: list[float]) -> dict[str, list[str]]:
    specs = {"clean-grpo": ["algorithm.advantage=grpo", "algorithm.loss_agg=seq_mean_token_mean"]}
    for rho in rates:
        tag = f"{int(round(rho * 100))}%"
        flips = [f"reward.flip_false_positive={rho}", f"reward.flip_false_negative={rho}",
                 "algorithm.loss_agg=seq_mean_token_mean"]
        specs[f"{tag}-grpo"] = [*flips, "algorithm.advantage=grpo"]
        specs[f"{tag}-reinforce"] = [*flips, "algorithm.advantage=reinforce"]
        specs[f"{tag}-backward"] = [*flips, "algorithm.advantage=noisy_backward",
                                    f"algorithm.advantage_params={{rho0: {rho}, rho1: {rho}}}"]
        specs[f"{tag}-forward"] = [*flips, "algorithm.advantage=noisy_forward",
                                   f"algorithm.advantage_params={{rho1: {rho}}}"]
    return specs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", nargs="+", type=float, default=[0.2, 0.4])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=None, help="run only these conditions (names as in the table)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "noisy_rewards")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th run from i (one process per core), "
                                                   "then --summarise-only")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    specs = conditions(args.rates)
    names = args.only or list(specs)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    initial = initial_accuracy(args.out)
    shard, n_shards = (int(x) for x in args.shard.split("/"))
    if not args.summarise_only:
        jobs = [(seed, name) for seed in args.seeds for name in names]
        for seed, name in jobs[shard::n_shards]:
            t = time.perf_counter()
            run_one(name, seed, args.budget, args.every, args.out, overrides=specs[name])
            print(f"[{time.perf_counter() - t0:7.0f}s] {name} seed {seed}: {time.perf_counter() - t:.0f}s", flush=True)
        if n_shards > 1:
            return
    summary = summarise(args.out, list(specs), args.seeds, args.budget, initial, specs=specs, anchor="clean-grpo")
    write_outputs(args.out, summary, title=f"Symmetric reward flips {args.rates}: uncorrected vs corrected "
                                           f"({len(args.seeds)} seed(s))")
    print(f"total {time.perf_counter() - t0:.0f}s; outputs in {args.out}")


if __name__ == "__main__":
    main()
