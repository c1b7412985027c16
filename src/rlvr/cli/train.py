"""``rlvr train``: RL training (``--seeds``: one run per seed, then their summary)."""

from __future__ import annotations

import sys

from rlvr.cli._common import add_common, add_config_args, load, run_help


def run(ns) -> int:
    from rlvr.recipes.rl import TrainingInterrupted
    from rlvr.recipes.run import train

    overrides = list(ns.args)
    seeds = None
    if ns.seeds is not None:  # checked before the config loads, before any model
        from rlvr.recipes.seeds import SeedsError, parse_seeds

        try:
            seeds = parse_seeds(ns.seeds)
            if any(a.startswith("train.seed=") for a in overrides[1 if overrides and "=" not in overrides[0] else 0:]):
                raise SeedsError("sets train.seed for each run: drop the train.seed override")
        except SeedsError as e:
            print(f"rlvr: error: --seeds: {e}", file=sys.stderr)
            return 2
    if ns.resume:
        overrides.append("train.resume=true")
    if ns.overwrite:
        overrides.append("train.overwrite=true")
    cfg = load(overrides)
    if seeds is not None:
        from rlvr.recipes.seeds import SeedsError, train_seeds

        try:
            train_seeds(cfg, seeds)
        except SeedsError as e:
            print(f"rlvr: error: --seeds: {e}", file=sys.stderr)
            return 2
        except TrainingInterrupted as e:
            return getattr(e, "exit_code", 130)
        print(f"seeds directory: {cfg.train.output_dir}")
        return 0
    try:
        summary = train(cfg)
    except TrainingInterrupted as e:
        return e.exit_code
    print(f"run directory: {summary['output_dir']}")
    return 0


DESCRIPTION = (
    "Train a policy with the RL recipe: sample rollout.group_size completions per prompt, score them with "
    "reward.verifier (or the environment env.name), turn rewards into advantages with algorithm.advantage (grpo "
    "by default; gae is PPO with a critic) and update with algorithm.policy_loss. Writes metrics.jsonl, "
    "checkpoints and eval_*.json to train.output_dir.\n\n"
    "Example: rlvr train configs/arithmetic_grpo.yaml train.steps=20 rollout.group_size=16")


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a policy with RL on verifiable rewards (GRPO by default)",
                       description=DESCRIPTION, epilog_fn=run_help, full_epilog_fn=lambda: run_help(True))
    add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint (train.resume=true)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds an earlier run, deleting its checkpoints and "
                        "metrics (train.overwrite=true)")
    p.add_argument("--seeds", metavar="LIST",
                   help="one run per seed, e.g. 0,1,2 or 0-4: train.seed=S in train.output_dir/seed-S/, then "
                        "seeds.json, seeds.md and seeds.png (spread over seeds) in train.output_dir; resumable "
                        "per seed (finished seeds are skipped, interrupted ones resume); Ray tasks with "
                        "distributed.backend=ray")
    add_common(p)
    p.set_defaults(func=run)
