"""Live curriculum vs fixed difficulty at an equal rollout budget (issue: environments).

Task: "What is a + b?" at three levels (a, b <= 20, <= 50, <= 99); the hardest level's
held-out problems are the test. Arms, same seeds, same number of generated completions:

* ``fixed``       trains on the hardest level only;
* ``curriculum``  starts at the easiest level and moves with the rolling pass rate
                  (band [curriculum.low, curriculum.high], rlvr.tasks.curriculum).

Prints per-run greedy accuracy on the hardest level's 256 held-out problems with 95%
Wilson intervals, each arm's mean over seeds with a percentile bootstrap interval over
(seed, problem) pairs, and the difference curriculum - fixed with its paired bootstrap
interval; writes ``<out>/summary.json``. Finished runs are skipped (resumable).

    python benchmarks/curriculum.py --seeds 0 1 2 --steps 8 --threads 1
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LEVELS = "[{max_value: 20, num_train: 300, num_heldout: 64}, {max_value: 50}, {max_value: 99}]"
BASE = ["task.name=arithmetic", "task.params.num_train=2000", "task.num_heldout=256", f"curriculum.levels={LEVELS}",
        "rollout.group_size=8", "rollout.max_new_tokens=40", "rollout.temperature=1.0", "rollout.dtype=bfloat16",
        "train.prompts_per_step=8", "train.micro_batch_size=16", "train.lr=3e-5", "train.warmup_steps=2",
        "train.save_every=0", "train.progress=false", "eval.num_problems=256", "eval.temperature=0.0",
        "eval.max_new_tokens=48", "eval.before_training=false", "curriculum.window=16", "curriculum.min_groups=8"]
ARMS = {"fixed": ["curriculum.start_level=2", "curriculum.fixed=true"],
        "curriculum": ["curriculum.start_level=0", "curriculum.low=0.2", "curriculum.high=0.6"]}


def run(arm: str, seed: int, steps: int, threads: int, out: Path) -> dict:
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train

    d = out / "runs" / f"{arm}-s{seed}"
    done = d / "eval_after.json"
    if not done.exists():
        cfg = load_config(RunConfig, None, BASE + ARMS[arm] + [
            f"train.steps={steps}", f"train.seed={seed}", f"train.threads={threads}", f"train.output_dir={d}"])
        train(cfg)
        shutil.rmtree(d / "checkpoints", ignore_errors=True)  # ~1 GB each; the results are what we keep
    res = json.loads(done.read_text())["greedy"]
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {"arm": arm, "seed": seed, "accuracy": res["accuracy"], "ci": [res["ci_low"], res["ci_high"]],
            "per_problem": res["per_problem"], "levels": [r.get("curriculum/level") for r in rows],
            "rollouts": rows[-1]["rollouts"]}


def boot(a: np.ndarray, reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean over seeds and problems (resample seeds, then problems)."""
    rng = np.random.default_rng(seed)
    s, p = a.shape
    means = [a[rng.integers(0, s, s)][:, rng.integers(0, p, p)].mean() for _ in range(reps)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=8, help="training steps per run (x 64 completions)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "curriculum_bench")
    args = ap.parse_args()
    results = [run(arm, s, args.steps, args.threads, args.out) for s in args.seeds for arm in ARMS]
    print(f"\n{'arm':<11} {'seed':>4} {'accuracy (hardest level, greedy, n=256)':>42}  rollouts  levels")
    for r in results:
        lv = "".join(str(int(x)) for x in r["levels"] if x is not None)
        print(f"{r['arm']:<11} {r['seed']:>4} {r['accuracy']:>20.1%} [{r['ci'][0]:.1%}, {r['ci'][1]:.1%}]"
              f"  {r['rollouts']:>8}  {lv}")
    mats = {arm: np.array([r["per_problem"] for r in results if r["arm"] == arm]) for arm in ARMS}
    summary = {"results": results, "arms": {}}
    for arm, m in mats.items():
        lo, hi = boot(m)
        summary["arms"][arm] = {"mean": float(m.mean()), "ci": [lo, hi]}
        print(f"{arm:<11} mean over seeds {m.mean():.1%} [{lo:.1%}, {hi:.1%}]")
    diff = mats["curriculum"] - mats["fixed"]  # paired by seed and problem
    lo, hi = boot(diff)
    summary["difference"] = {"mean": float(diff.mean()), "ci": [lo, hi]}
    print(f"curriculum - fixed: {diff.mean():+.1%} [{lo:+.1%}, {hi:+.1%}]"
          f" ({'resolved' if lo > 0 or hi < 0 else 'not resolved'} at 95%)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
