"""A screen of the literature's techniques on the demo: each named option over the same seeds as the default.

Each arm is ``rlvr train configs/arithmetic_grpo.yaml --seeds S`` with the same shortened schedule, plus the
arm's overrides (the default arm has none); its seed sweep goes to ``<root>/<arm>/seed-<s>/``.  Arms already
trained are resumed or skipped (``rlvr train --seeds`` resumes finished and interrupted seeds), so the screen
can be stopped and continued, and a later arm added to an earlier screen.  When every arm has run, the table of
``benchmarks/remedy_screen.py`` is printed for them: per seed and per arm, the final held-out accuracy
(greedy and the other evaluation keys), the largest fall of the held-out curve, the mean token entropy of the
last steps and the time per step; per arm, the difference from the default with ``rlvr compare``'s two-level
bootstrap interval and its exact permutation test over seeds.

    python benchmarks/technique_screen.py --root runs/screen --seeds 0-1 --steps 20 --arms default,unlikeliness,maxk
    python benchmarks/technique_screen.py --list          # the named arms and their overrides
    python benchmarks/technique_screen.py --dry-run ...   # print the commands only

With ``--parallel N`` every (arm, seed) is its own process (``train.seed=S train.output_dir=<root>/<arm>/seed-S``,
the directory ``--seeds`` would make), N at a time: many runs sharing one GPU (``--override model.device=cuda``).
Arms that score with a learned outcome reward model (``outcome_rm``) use ``<root>/rm``, trained first with
``rlvr rm train kind=orm`` on the base policy's samples of the arithmetic task's train split when it is not there
(``--rm-problems`` problems x 8 samples; ``--rm-device``); their runs start once it exists, the others at once.

    python benchmarks/technique_screen.py --root runs/rewards_gpu --seeds 0-5 --steps 40 --eval-every 5 \
        --threads 1 --parallel 18 --override model.device=cuda --override eval.batch_size=256 \
        --rm-device cuda --arms default,format,outcome_rm

No technique has to win: with 2 seeds per arm the permutation test's smallest p is 1/3, so a screen ranks arms
and says which effects its intervals resolve; it is not a confirmation.  Time per step is comparable only
between arms run under the same load (run the screen alone).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from remedy_screen import format_screen, parse_seeds, plot_screen, screen  # noqa: E402

CONFIG = "configs/arithmetic_grpo.yaml"

ARMS: dict[str, list[str]] = {
    "default": [],
    # rewards
    "unlikeliness": ["reward.functions=[verifier, {kind: unlikeliness, weight: 0.25}]"],
    "kimi_length": ["reward.functions=[verifier, {kind: kimi_length, weight: 0.2}]"],
    "diversity": ["reward.functions=[verifier, {kind: diversity, weight: 0.2}]"],
    "arithmetic_steps": ["reward.functions=[verifier, {kind: arithmetic_steps, weight: 0.2}]"],
    # accuracy + format (one box holding one number: the shape the strict checker reads)
    "format": ["reward.functions=[verifier, {kind: format, weight: 0.2, params: {number: true, single_box: true}}]"],
    # the policy's own log-likelihood of the reference answer as the reward (RLPR / VeriFree style)
    "ref_loglik": ["reward.source=reference_likelihood", "reward.source_params={aggregate: mean_logprob, clip: false}"],
    "length_schedule": ["rollout.length_schedule=[[1, 32], [6, 48]]"],  # a staged completion budget
    # credit
    "maxk": ["algorithm.advantage=maxk", "algorithm.advantage_params={k: 4}"],
    "passk": ["algorithm.advantage=passk", "algorithm.advantage_params={k: 4}"],
    "dgpo": ["algorithm.advantage=dgpo"],
    "ucas": ["algorithm.advantage=ucas"],
    "disco": ["algorithm.advantage=disco", "algorithm.advantage_params={tau: 1.0}"],
    "online_dpo": ["algorithm.advantage=online_dpo", "algorithm.loss_agg=seq_mean_token_sum"],
    "rloo": ["algorithm.advantage=rloo"],
    "entropy_gate": ["algorithm.entropy_token_fraction=0.2"],
    "entropy_bonus": ["algorithm.entropy_coef=0.005"],
    "siren": ["algorithm.entropy_coef=0.005", "algorithm.entropy_bonus_fraction=0.2"],  # baseline: entropy_bonus
    # data
    "mopps": ["algorithm.mopps=true"],
    "replay": ["guidance.replay=true"],
    "expo": ["guidance.regenerate=answer"],
    "critique": ["guidance.regenerate=critique"],
    "synthesize": ["guidance.synthesize=2"],
    "branches": ["rollout.branches=2"],
    "tree": ["rollout.branches=2", "algorithm.advantage=tree"],  # baseline: branches
    # policy losses: both act only from a second optimizer step on a batch, so each arm takes 2 mini-batches,
    # and "minibatch2" is their baseline (the default loss with the same 2 mini-batches)
    "minibatch2": ["algorithm.mini_batches=2"],
    "cispo": ["algorithm.policy_loss=cispo", "algorithm.mini_batches=2"],
    "sapo": ["algorithm.policy_loss=sapo", "algorithm.mini_batches=2"],
    "sparse_1pct": ["train.update_fraction=0.01"],
    "clip_schedule": ["algorithm.mini_batches=2", "algorithm.clip_schedule=[[6, 0.2, 0.28]]"],
    # a learned outcome RM as the only reward (Gao et al. 2023's setting); the verifier at weight 0 is logged as
    # reward/verifier and never enters the gradient; the held-out evaluations log heldout_reward/outcome_rm beside
    # heldout_accuracy: the over-optimisation curve. {rm} is <root>/rm (see --parallel)
    "outcome_rm": ["reward.functions=[{kind: outcome_rm, params: {path: '{rm}', batch_size: 64}}, "
                   "{kind: verifier, weight: 0}]"],
}
"""Arm name -> its overrides of the demo config (add a technique here to screen it)."""


def commands(root: Path, arms: list[str], seeds: str, steps: int, eval_every: int, threads: int,
             shorter: tuple[str, ...] = ()) -> list[list[str]]:
    """The ``rlvr train --seeds`` command of each arm; ``shorter``: overrides every arm shares (a cheaper screen)."""
    out = []
    for arm in arms:
        out.append([sys.executable, "-m", "rlvr.cli", "train", CONFIG, "--seeds", seeds,
                    f"train.output_dir={root / arm}", f"train.steps={steps}", f"eval.every={eval_every}",
                    f"train.threads={threads}", "train.save_every=0", "train.keep_checkpoints=1",
                    "eval.before_training=false", *shorter, "eval.extra_temperatures=[]",
                    *(o.replace(RM_PLACEHOLDER, str(root / "rm")) for o in ARMS[arm])])
    return out


RM_PLACEHOLDER = "{rm}"


def needs_rm(arm: str) -> bool:
    """Whether ``arm`` scores with the outcome reward model at ``<root>/rm``."""
    return any(RM_PLACEHOLDER in o for o in ARMS[arm])


def seed_commands(root: Path, arms: list[str], seeds: list[int], steps: int, eval_every: int, threads: int,
                  shorter: tuple[str, ...] = ()) -> list[tuple[str, int, list[str]]]:
    """``(arm, seed, command)`` of every run, one process each: ``--seeds``' own directory layout and seed."""
    out = []
    for arm, cmd in zip(arms, commands(root, arms, "0", steps, eval_every, threads, shorter)):
        i = cmd.index("--seeds")
        rest = [o for o in cmd[i + 2:] if not o.startswith("train.output_dir=")]
        for s in seeds:
            out.append((arm, s, [*cmd[:i], f"train.seed={s}", f"train.output_dir={root / arm / f'seed-{s}'}",
                                 *rest]))
    return out


def rm_command(root: Path, problems: int, device: str, threads: int) -> list[str]:
    """``rlvr rm train`` of the outcome RM the ``outcome_rm`` arm is scored by: pointwise BCE on the base policy's
    verified samples of the arithmetic train split (8 per problem)."""
    return [sys.executable, "-m", "rlvr.cli", "rm", "train", "kind=orm", "task.name=arithmetic",
            f"num_problems={problems}", f"device={device}", f"threads={threads}", f"output_dir={root / 'rm'}"]


def run_rlvr(cmd: list[str], log: Path | None = None) -> int:
    """Run ``cmd`` in the project root with its ``src`` first on the caller's ``PYTHONPATH`` (output to ``log``,
    appended, when given); its exit code."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                     if p))
    if log is None:
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode


def run_parallel(root: Path, jobs: list[tuple[str, int, list[str]]], parallel: int, rm: list[str] | None) -> int:
    """Run ``jobs`` ``parallel`` at a time (a thread pool, each thread waiting on its process); the jobs of arms
    that need the RM wait for ``rm`` (run first, beside the others, when given). Each run's output goes to
    ``<run dir>.log``; a finished run (``summary.json``) is skipped. Returns the number of failed jobs."""
    def finished(cmd):
        out = next(o for o in cmd if o.startswith("train.output_dir=")).split("=", 1)[1]
        return Path(out), (Path(out) / "summary.json").is_file()

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel + (1 if rm else 0)) as pool:
        rm_done = pool.submit(run_rlvr, rm, root / "rm.log") if rm else None

        def one(arm, seed, cmd):
            out, done = finished(cmd)
            if done:
                return 0
            if needs_rm(arm) and rm_done is not None and rm_done.result() != 0:
                return 1
            code = run_rlvr(cmd, out.with_suffix(".log"))
            print(f"{arm} seed {seed}: exit {code}", flush=True)
            return code

        failed = sum(f.result() != 0 for f in [pool.submit(one, *j) for j in jobs])
    if rm_done is not None and rm_done.result() != 0:
        print(f"technique_screen: rlvr rm train failed (see {root / 'rm.log'})", file=sys.stderr)
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("runs/screen"), help="where each arm's seed sweep goes")
    ap.add_argument("--arms", default="default", help=f"comma-separated arm names (the first is the baseline); "
                                                       f"known: {', '.join(ARMS)}")
    ap.add_argument("--seeds", default="0-1", help="seeds of every arm (default 0-1)")
    ap.add_argument("--steps", type=int, default=20, help="training steps of every arm (default 20)")
    ap.add_argument("--eval-every", type=int, default=10, help="held-out evaluation every N steps (default 10)")
    ap.add_argument("--prompts-per-step", type=int, help="train.prompts_per_step of every arm (default: the "
                                                         "demo's 8; fewer makes a cheaper screen)")
    ap.add_argument("--eval-problems", type=int, help="eval.num_problems of every arm (default: the demo's 256)")
    ap.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)), help="train.threads")
    ap.add_argument("--parallel", type=int, default=0, help="run every (arm, seed) as its own process, N at a "
                                                             "time (0: each arm's --seeds sweep in turn)")
    ap.add_argument("--override", action="append", default=[], help="an override every run gets (repeatable)")
    ap.add_argument("--rm-problems", type=int, default=256, help="outcome_rm arms: problems the RM trains on")
    ap.add_argument("--rm-device", default="cpu", help="outcome_rm arms: torch device of rlvr rm train")
    ap.add_argument("--json", type=Path, help="also write the numbers as JSON")
    ap.add_argument("--plot", type=Path, help="also draw every arm's held-out curves over the baseline's (PNG)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--list", action="store_true", help="print the known arms and their overrides")
    args = ap.parse_args(argv)
    if args.list:
        for name, ov in ARMS.items():
            print(f"{name}: {' '.join(shlex.quote(o) for o in ov) or '(the demo config as it is)'}")
        return 0
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"technique_screen: unknown arm(s) {unknown}; known: {', '.join(ARMS)}", file=sys.stderr)
        return 2
    shorter = tuple(([f"train.prompts_per_step={args.prompts_per_step}"] if args.prompts_per_step else [])
                    + ([f"eval.num_problems={args.eval_problems}"] if args.eval_problems else [])
                    + list(args.override))
    rm_dir = args.root / "rm"
    rm = (rm_command(args.root, args.rm_problems, args.rm_device, args.threads)
          if any(needs_rm(a) for a in arms) and not (rm_dir / "config.json").is_file() else None)
    if args.parallel:
        jobs = seed_commands(args.root, arms, parse_seeds(args.seeds), args.steps, args.eval_every, args.threads,
                             shorter)
        for cmd in ([rm] if rm else []) + [j[2] for j in jobs]:
            print("$ " + " ".join(shlex.quote(c) for c in cmd[2:]), flush=True)
        if args.dry_run:
            return 0
        failed = run_parallel(args.root, jobs, args.parallel, rm)
        if failed:
            print(f"technique_screen: {failed} run(s) failed (their logs: <run dir>.log)", file=sys.stderr)
    elif rm:
        print("$ " + " ".join(shlex.quote(c) for c in rm[2:]), flush=True)
        if not args.dry_run and run_rlvr(rm) != 0:
            print("technique_screen: rlvr rm train failed", file=sys.stderr)
            return 1
    for cmd in [] if args.parallel else commands(args.root, arms, args.seeds, args.steps, args.eval_every,
                                                 args.threads, shorter):
        print("$ " + " ".join(shlex.quote(c) for c in cmd[2:]), flush=True)
        if not args.dry_run:
            code = run_rlvr(cmd)
            if code != 0:
                print(f"technique_screen: {cmd[5]} failed (exit {code})", file=sys.stderr)
                return code
    if args.dry_run:
        return 0
    result = screen([args.root / a for a in arms], parse_seeds(args.seeds))
    print("\n".join(format_screen(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.plot:
        plot_screen(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
