"""Post-training methods at an equal sampling budget on the demo's task, over seeds.

Every arm starts from the bundled model and ends with the demo's held-out evaluation (256 problems, greedy):

- ``rl``: the demo's GRPO (``configs/arithmetic_grpo.yaml``) for ``--steps`` steps of ``--prompts`` prompts x 8
  samples: the budget, B = steps x prompts x 8 sampled student completions;
- ``distill``: on-policy distillation from ``--teacher`` (``configs/distill_arithmetic.yaml``), the same steps and
  prompts, so the same B student completions;
- ``sft_teacher``: SFT on teacher samples (``rlvr rft`` with ``rft.sampler=<teacher>``, one round): the teacher
  samples B completions (2 per problem), one accepted completion per problem is kept, the student is fine-tuned on
  them; the student samples nothing;
- ``rft``: rejection-sampling fine-tuning from the student's own samples (``configs/rft_arithmetic.yaml``): 2
  rounds of B / 8 problems x 4 samples, so B student completions in all;
- ``sft``: SFT on the task's gold worked solutions (``configs/sft_arithmetic.yaml``) for ``--steps`` steps of 16
  examples: the student samples nothing (the SFT cold start of ``sft_rl`` alone, at the whole step budget);
- ``sft_rl``: an SFT cold start on the task's worked solutions for steps / 2 steps, then the demo's GRPO for
  steps / 2 steps (``rlvr pipeline``): the same number of optimizer steps as ``rl`` (an equal step budget), half
  of its sampled completions.

Each arm's seed runs in ``<root>/<arm>/seed-<s>/`` and is skipped when its held-out result exists, so the script
can be stopped and continued; a seed stopped before its result starts over (``--overwrite``: these short runs
save no checkpoint before their end).  The table gives, per arm, the median held-out accuracy over seeds, the
difference from ``rl`` with ``rlvr compare``'s two-level bootstrap interval (seeds and problems) and exact permutation
test, the student's sampled completions and tokens, and each run's wall time (comparable only between runs made
under the same load).

    python benchmarks/post_training_compare.py --root runs/post_training --seeds 0-2 \\
        --teacher runs/sft_arithmetic/final --arms rl,distill,sft_teacher,rft,sft,sft_rl
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from remedy_screen import _rows, parse_seeds  # noqa: E402

from rlvr.evaluate.compare import compare_seed_summaries  # noqa: E402
from rlvr.utils.files import atomic_write_json, read_json_or_none  # noqa: E402

ARMS = ("rl", "distill", "sft_teacher", "rft", "sft", "sft_rl")
GROUP = 8  # the demo's samples per prompt
EVAL = ["eval.before_training=false", "eval.extra_temperatures=[]"]


def _rl_overrides(steps: int, prompts: int, threads: int) -> list[str]:
    return [f"train.steps={steps}", f"train.prompts_per_step={prompts}", f"eval.every={steps}",
            f"train.threads={threads}", "train.save_every=0", "train.keep_checkpoints=1", *EVAL]


def _pipeline_yaml(steps: int, prompts: int, threads: int) -> dict:
    sft_steps = steps // 2
    return {"stages": [
        {"name": "sft", "kind": "sft", "config": "configs/sft_arithmetic.yaml",
         "overrides": [f"train.steps={sft_steps}", "train.warmup_steps=1", "train.save_every=0",
                       f"train.threads={threads}", *EVAL]},
        {"name": "rl", "kind": "rl", "config": "configs/arithmetic_grpo.yaml",
         "overrides": _rl_overrides(steps - sft_steps, prompts, threads)}]}


def seed_dir(arm: str, seed: int, root: Path) -> Path:
    return root / arm / f"seed-{seed}"


def command(arm: str, seed: int, root: Path, args) -> list[str]:
    """The command line of one arm's seed (run from the project root)."""
    out = seed_dir(arm, seed, root)
    budget = args.steps * args.prompts * GROUP
    rlvr = [sys.executable, "-m", "rlvr.cli"]
    if arm == "rl":
        return [*rlvr, "train", "configs/arithmetic_grpo.yaml", f"train.seed={seed}", f"train.output_dir={out}",
                *_rl_overrides(args.steps, args.prompts, args.threads)]
    if arm == "distill":
        return [*rlvr, "train", "configs/distill_arithmetic.yaml", f"distill.teacher={args.teacher}",
                f"train.seed={seed}", f"train.output_dir={out}", *_rl_overrides(args.steps, args.prompts, args.threads)]
    rft_common = [f"train.seed={seed}", f"train.output_dir={out}", f"train.threads={args.threads}", *EVAL]
    if arm == "sft_teacher":
        return [*rlvr, "rft", "configs/rft_arithmetic.yaml", f"rft.sampler={args.teacher}", "rft.rounds=1", "rft.k=2",
                f"rft.problems_per_round={budget // 2}", *rft_common]
    if arm == "rft":
        return [*rlvr, "rft", "configs/rft_arithmetic.yaml", "rft.rounds=2", "rft.k=4",
                f"rft.problems_per_round={budget // 8}", *rft_common]
    if arm == "sft":
        return [*rlvr, "sft", "configs/sft_arithmetic.yaml", f"train.steps={args.steps}", "train.warmup_steps=1",
                "train.save_every=0", *rft_common]
    if arm == "sft_rl":
        return [*rlvr, "pipeline", str(root / "sft_rl.yaml"), f"seed={seed}", f"output_dir={out}"]
    raise ValueError(f"unknown arm {arm!r}; the arms: {', '.join(ARMS)}")


def result_file(arm: str, seed: int, root: Path) -> Path:
    out = seed_dir(arm, seed, root)
    return (out / "02-rl" if arm == "sft_rl" else out) / "eval_after.json"


def run(arm: str, seed: int, root: Path, args) -> None:
    """Run one arm's seed unless its held-out result is there; its wall time goes to ``wall.json``."""
    if result_file(arm, seed, root).is_file():
        print(f"{arm} seed {seed}: done; skipped", flush=True)
        return
    if arm == "sft_rl":
        import yaml

        (root / "sft_rl.yaml").write_text(yaml.safe_dump(_pipeline_yaml(args.steps, args.prompts, args.threads)))
    cmd = command(arm, seed, root, args)
    if seed_dir(arm, seed, root).exists():  # a killed seed: its runs keep no checkpoint before the end
        cmd.insert(cmd.index("rlvr.cli") + 2, "--overwrite")
    print("$ " + shlex.join(cmd), flush=True)
    started = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True)
    atomic_write_json(seed_dir(arm, seed, root) / "wall.json", {"wall_s": round(time.time() - started, 1)})


def _rl_compute(run_dir: Path) -> tuple[int, float]:
    done, n, tokens = 0, 0, 0.0
    for r in _rows(run_dir / "metrics.jsonl"):
        k = int(r["rollouts"]) - done
        done = int(r["rollouts"])
        n += k
        tokens += k * float(r["response_length"])
    return n, tokens


def compute(arm: str, seed: int, root: Path) -> dict:
    """The student's sampled completions and tokens, and the run's wall time (None when not recorded)."""
    out = seed_dir(arm, seed, root)
    wall = (read_json_or_none(out / "wall.json") or {}).get("wall_s")
    if arm in ("rl", "distill"):
        n, tokens = _rl_compute(out)
    elif arm == "sft_rl":
        n, tokens = _rl_compute(out / "02-rl")
    elif arm == "rft":
        stats = [read_json_or_none(p) or {} for p in sorted(out.glob("round-*/stats.json"))]
        n, tokens = sum(s.get("sampled", 0) for s in stats), sum(s.get("sampled_tokens", 0) for s in stats)
    else:  # sft_teacher, sft: the teacher or the data, not the student, gave the completions
        n, tokens = 0, 0.0
    return {"completions": n, "tokens": round(tokens), "wall_s": wall}


def seeds_summary(arm: str, seeds: list[int], root: Path) -> dict:
    """A seeds summary (the shape ``rlvr compare`` reads) of one arm's finished seeds: greedy accuracy and its
    per-problem scores on the held-out set every arm shares."""
    runs = []
    for s in seeds:
        f = result_file(arm, s, root)
        if not f.is_file():
            runs.append({"seed": s, "status": "missing"})
            continue
        g = json.loads(f.read_text())["greedy"]
        runs.append({"seed": s, "status": "finished", "after": {"greedy": g["accuracy"]},
                     "per_problem_after": {"greedy": g["per_problem"]}, **compute(arm, s, root)})
    return {"kind": "rlvr.seeds", "metric_keys": ["greedy"], "config": None, "runs": runs}


def table(arms: list[str], seeds: list[int], root: Path) -> list[str]:
    base = seeds_summary(arms[0], seeds, root)
    lines = ["| arm | greedy per seed | median | vs " + arms[0] + ": mean diff [95% CI], p | student completions"
             " (tokens) per run | wall s per run |", "|---|---|---:|---|---|---|"]
    for arm in arms:
        s = seeds_summary(arm, seeds, root)
        done = [r for r in s["runs"] if r["status"] == "finished"]
        if not done:
            lines.append(f"| {arm} | (no finished seed) | | | | |")
            continue
        acc = " / ".join(f"{100 * r['after']['greedy']:.1f}" for r in done)
        med = 100 * statistics.median(r["after"]["greedy"] for r in done)
        vs = "(baseline)"
        if arm != arms[0]:
            c = compare_seed_summaries(base, s, name_a=arms[0], name_b=arm, metrics=["greedy"])[0]
            lo, hi = c.diff_mean_ci
            vs = f"{100 * c.diff_mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}], p = {c.p_value:.2f}"
        comp = " / ".join(f"{r['completions']} ({r['tokens']})" for r in done)
        wall = " / ".join("-" if r["wall_s"] is None else f"{r['wall_s']:.0f}" for r in done)
        lines.append(f"| {arm} | {acc} | {med:.1f} | {vs} | {comp} | {wall} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="runs/post_training", help="where each arm's seeds go")
    ap.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2 or 0,3")
    ap.add_argument("--arms", default=",".join(ARMS), help="arms to run, the first is the baseline")
    ap.add_argument("--teacher", default="runs/sft_arithmetic/final", help="teacher model (distill, sft_teacher)")
    ap.add_argument("--steps", type=int, default=10, help="RL steps of the rl arm (the budget's unit)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts a step (8 samples each)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--table-only", action="store_true", help="print the table of what has run; run nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_args(argv)
    arms, seeds, root = args.arms.split(","), parse_seeds(args.seeds), Path(args.root)
    for arm in arms:
        if arm not in ARMS:
            ap.error(f"unknown arm {arm!r}; the arms: {', '.join(ARMS)}")
    if args.steps < 2 or args.prompts < 1:
        ap.error("--steps must be >= 2 (sft_rl splits them) and --prompts >= 1")
    if not args.table_only:
        for arm in arms:
            for s in seeds:
                if args.dry_run:
                    print("$ " + shlex.join(command(arm, s, root, args)))
                else:
                    run(arm, s, root, args)
    if not args.dry_run:
        print("\n".join(table(arms, seeds, root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
