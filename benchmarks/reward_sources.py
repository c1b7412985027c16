"""Reward sources at an equal rollout budget: labels, no labels, controls, process rewards, hints.

The bundled SmolLM2-135M-Instruct, GRPO, every arm the same number of generated
completions (``--steps`` x 8 prompts x 8 samples, 6 x 64 = 384 by default) and the same seeds:

on "What is a + b?" (a, b <= 50, the README demo's task):

* ``labelled``             the verifier's reward (plain GRPO);
* ``ttrl``                 test-time RL, no labels: agreement with the group's majority answer
                           (``reward.source=majority_vote``); logs the pseudo-label's accuracy;
* ``reference_likelihood`` the policy's length-normalised probability of the reference answer after
                           its own reasoning (VeriFree / RLPR, debiased);
* ``random``, ``format_only``  controls: Bernoulli(0.5), and 1 whenever an answer can be extracted;
* ``prm``, ``prm_min``     labelled GRPO plus a process reward model's step scores in the advantages
                           (``reward.process_prm``; ``prm_min``: PURE's min-form credit), the PRM
                           trained by ``benchmarks/reward_models.py`` and passed with ``--prm``;

on "What is a * b?" with a 2-digit a and a 1-digit b (about 70% of the untrained model's groups of 8
fail at T = 1):

* ``hard_labelled``        plain GRPO;
* ``hard_hints``           GRPO with hints (``guidance.hints``): a failed group is re-sampled with a
                           growing prefix of the reference solution; the extra completions count
                           against the same budget (``train.max_rollouts``).

Test: greedy accuracy on the task's 256 held-out problems (Wilson 95% per run); each arm's mean over
seeds with a bootstrap interval over (seed, problem) pairs; each arm minus its task's labelled arm,
paired by seed and problem.  Prints the pseudo-label accuracy of ``ttrl`` per step (mean over seeds).
Finished runs are skipped (resumable); several processes may share ``--out`` with disjoint ``--arms``.

    OMP_NUM_THREADS=1 python benchmarks/reward_sources.py --threads 1 --prm runs/reward_models/prm
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASE = ["rollout.group_size=8", "rollout.max_new_tokens=48", "rollout.temperature=1.0", "rollout.dtype=bfloat16",
        "train.prompts_per_step=8", "train.micro_batch_size=16", "train.lr=3e-5", "train.warmup_steps=2",
        "train.save_every=0", "train.progress=false", "eval.num_problems=256", "eval.temperature=0.0",
        "eval.max_new_tokens=64"]
TASKS = {"arith": ["task.name=arithmetic", "task.params.num_train=2000", "task.num_heldout=256"],
         "hard": ["task.name=multiply", "task.params={a_digits: 2, b_digits: 1, num_train: 148}",
                  "task.num_heldout=256"]}
ARMS = {
    "labelled": ("arith", []),
    "ttrl": ("arith", ["reward.source=majority_vote"]),
    "reference_likelihood": ("arith", ["reward.source=reference_likelihood"]),
    "random": ("arith", ["reward.source=random"]),
    "format_only": ("arith", ["reward.source=format_only"]),
    "prm": ("arith", ["reward.process_prm={prm}"]),
    "prm_min": ("arith", ["reward.process_prm={prm}", "reward.process_credit=min"]),
    "hard_labelled": ("hard", []),
    "hard_hints": ("hard", ["guidance.hints=true"]),
}
BASELINE = {"arith": "labelled", "hard": "hard_labelled"}
CONTRASTS = [("prm_min", "prm")]  # min-form credit (PURE) vs sum credit, the same PRM


def run(arm: str, seed: int, steps: int, threads: int, out: Path, prm: str | None) -> dict:
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig
    from rlvr.recipes.rl import train

    task, extra = ARMS[arm]
    d = out / "runs" / f"{arm}-s{seed}"
    done = d / "eval_after.json"
    if not done.exists():
        if any("{prm}" in x for x in extra) and not prm:
            raise SystemExit(f"arm {arm} needs --prm (a PRM directory from benchmarks/reward_models.py)")
        budget = steps * 64
        over = [x.format(prm=prm) for x in extra] + [
            f"train.steps={2 * steps}", f"train.max_rollouts={budget}",  # the budget ends every run
            f"train.seed={seed}", f"train.threads={threads}", f"train.output_dir={d}",
            # one untrained evaluation per task (seed 0 of its labelled arm); the held-out split is seed-free
            f"eval.before_training={'true' if arm == BASELINE[task] and seed == 0 else 'false'}"]
        cfg = load_config(RunConfig, None, BASE + TASKS[task] + over)
        train(cfg)
        shutil.rmtree(d / "checkpoints", ignore_errors=True)  # ~1 GB each; the results are what we keep
    res = json.loads(done.read_text())["greedy"]
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    before = d / "eval_before.json"
    return {"arm": arm, "task": task, "seed": seed, "accuracy": res["accuracy"],
            "ci": [res["ci_low"], res["ci_high"]], "per_problem": res["per_problem"],
            "rollouts": rows[-1]["rollouts"], "steps": len(rows),
            "before": json.loads(before.read_text())["greedy"]["accuracy"] if before.exists() else None,
            "train_accuracy": [r.get("accuracy") for r in rows],
            "pseudo_label_accuracy": [r.get("reward/pseudo_label_accuracy") for r in rows],
            "guided_groups": [r.get("guidance/guided_groups") for r in rows]}


def boot(a: np.ndarray, reps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean over seeds and problems (resample seeds, then problems)."""
    rng = np.random.default_rng(seed)
    s, p = a.shape
    means = [a[rng.integers(0, s, s)][:, rng.integers(0, p, p)].mean() for _ in range(reps)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _mean_curve(curves: list[list]) -> list[float | None]:
    out = []
    for vals in zip(*curves):
        v = [x for x in vals if isinstance(x, (int, float)) and x == x]
        out.append(sum(v) / len(v) if v else None)
    return out


def paired(by_seed: dict, a: str, b: str, seeds: list[int]) -> tuple[dict, str]:
    """Arm ``a`` minus arm ``b``, paired by seed and problem: (summary entry, printed text)."""
    d = np.array([by_seed[(a, s)] - by_seed[(b, s)] for s in seeds])
    lo, hi = boot(d)
    text = (f"{a} - {b}: {d.mean():+.1%} [{lo:+.1%}, {hi:+.1%}] over seeds {seeds}"
            f" ({'resolved' if lo > 0 or hi < 0 else 'not resolved'})")
    return {"mean": float(d.mean()), "ci": [lo, hi], "seeds": seeds}, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=6, help="rollout budget: steps x 64 completions per run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prm", default=None, help="PRM directory (rlvr rm train kind=prm) for the prm arms")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "reward_sources_bench")
    ap.add_argument("--report-only", action="store_true", help="train nothing: summarise the finished runs")
    args = ap.parse_args()
    if args.report_only:
        results = [run(arm, s, args.steps, args.threads, args.out, args.prm) for s in args.seeds for arm in args.arms
                   if (args.out / "runs" / f"{arm}-s{s}" / "eval_after.json").exists()]
        args.arms = [a for a in args.arms if any(r["arm"] == a for r in results)]
    else:
        results = [run(arm, s, args.steps, args.threads, args.out, args.prm) for s in args.seeds for arm in args.arms]
    print(f"\n{'arm':<21} {'seed':>4} {'greedy accuracy, 256 held-out':>32}  rollouts  steps")
    for r in results:
        print(f"{r['arm']:<21} {r['seed']:>4} {r['accuracy']:>15.1%} [{r['ci'][0]:.1%}, {r['ci'][1]:.1%}]"
              f"  {r['rollouts']:>8}  {r['steps']:>5}")
    for r in results:
        if r["before"] is not None:
            print(f"untrained ({r['task']}): {r['before']:.1%}")
    by_seed = {(r["arm"], r["seed"]): np.array(r["per_problem"], dtype=float) for r in results}
    mats = {arm: np.array([v for (a, _), v in by_seed.items() if a == arm]) for arm in args.arms}
    summary = {"results": results, "arms": {}}
    for arm, m in mats.items():
        lo, hi = boot(m)
        seeds = sorted(s for a, s in by_seed if a == arm)
        entry = {"mean": float(m.mean()), "ci": [lo, hi], "seeds": seeds}
        base = BASELINE[ARMS[arm][0]]
        line = f"{arm:<21} mean {m.mean():.1%} [{lo:.1%}, {hi:.1%}] (seeds {seeds})"
        common = [s for s in seeds if (base, s) in by_seed]
        if arm != base and common:
            entry["minus_" + base], text = paired(by_seed, arm, base, common)
            line += "   " + text
        summary["arms"][arm] = entry
        print(line)
    for a, b in CONTRASTS:  # the same reward with and without a safeguard, paired by seed and problem
        common = sorted(s for x, s in by_seed if x == a and (b, s) in by_seed)
        if common:
            summary["arms"][a]["minus_" + b], text = paired(by_seed, a, b, common)
            print(text)
    for arm in args.arms:
        runs = [r for r in results if r["arm"] == arm]
        pla = _mean_curve([r["pseudo_label_accuracy"] for r in runs])
        if any(x is not None for x in pla):
            print(f"{arm}: pseudo-label accuracy per step (mean over seeds): "
                  + " ".join("-" if x is None else f"{x:.2f}" for x in pla))
            summary["arms"][arm]["pseudo_label_accuracy"] = pla
        gg = _mean_curve([r["guided_groups"] for r in runs])
        if any(x is not None for x in gg):
            print(f"{arm}: share of guided groups per step: " + " ".join("-" if x is None else f"{x:.2f}" for x in gg))
            summary["arms"][arm]["guided_groups"] = gg
        summary["arms"][arm]["train_accuracy"] = _mean_curve([r["train_accuracy"] for r in runs])
    args.out.mkdir(parents=True, exist_ok=True)
    name = "summary.json" if set(args.arms) == set(ARMS) else f"summary-{'-'.join(args.arms)}.json"
    (args.out / name).write_text(json.dumps(summary, indent=2, default=float))


if __name__ == "__main__":
    main()
