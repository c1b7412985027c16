"""``rlvr rm train``: an outcome / process reward model trained on the policy's own samples."""

from __future__ import annotations

from rlvr.cli._common import add_common, add_config_args, config_path, error


def _rm_help(full: bool = False) -> str:
    from rlvr.cli.help import settings_overview, settings_reference
    from rlvr.recipes.reward_model import RMConfig

    return settings_reference(RMConfig) if full else settings_overview(RMConfig)


def run(ns) -> int:
    from rlvr.config import load_config
    from rlvr.recipes.reward_model import RMConfig, format_report, train_reward_model

    path, args = config_path(list(ns.args))
    cfg = load_config(RMConfig, path, args)
    try:
        report = train_reward_model(cfg)
    except ValueError as e:
        error(e)
        return 2
    print(format_report(report))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("rm", help="reward models: `rlvr rm train` (ORM or Math-Shepherd PRM)")
    add_common(p)
    rm = p.add_subparsers(dest="rm_command", required=True, metavar="ACTION")
    t = rm.add_parser("train", help="train an ORM or a PRM on the policy's own verified samples",
                      description="Train a reward model from the policy's own verified samples (a samples file "
                                  "from `rlvr eval` via samples=PATH, or sampled fresh from task.*): kind=orm is a "
                                  "sequence classifier (objective=pointwise BCE or bradley_terry pairs), kind=prm "
                                  "a causal LM in the Math-Shepherd step-tag format with automatic labels (the "
                                  "success rate of rollouts_per_step continuations from each step prefix). "
                                  "lora.enabled=true trains LoRA adapters (merged before saving). Prints and "
                                  "writes held-out accuracy, AUC and calibration (OUTPUT/rm_metrics.json); the "
                                  "model loads with `rlvr search --scorer orm:OUTPUT` / `prm:OUTPUT`.\n\n"
                                  "Example: rlvr rm train kind=prm task.name=arithmetic num_problems=32 "
                                  "output_dir=runs/rm/prm",
                      epilog_fn=_rm_help, full_epilog_fn=lambda: _rm_help(full=True))
    add_config_args(t)
    add_common(t)
    t.set_defaults(func=run)
