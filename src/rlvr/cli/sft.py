"""``rlvr sft``: supervised fine-tuning (loss on completion tokens only)."""

from __future__ import annotations

from rlvr.cli._common import add_common, add_config_args, run_fine_tuning


def run(ns) -> int:
    from rlvr.recipes.sft_config import load_sft_config
    from rlvr.recipes.sft import run_sft

    return run_fine_tuning(ns, load_sft_config, run_sft)


DESCRIPTION = (
    "Supervised fine-tuning: chat messages (loss on assistant turns) or prompt-completion pairs (loss on the "
    "completion) from a jsonl file, an HF dataset or a task's gold-derived completions (data.source=task); the "
    "prompt is rendered with the model's chat template as rollouts render it. Held-out loss and task accuracy "
    "before and after; checkpoints and exact resume; <train.output_dir>/final is a model rlvr train takes "
    "(docs/post-training.md).\n\n"
    "Example: rlvr sft configs/sft_arithmetic.yaml train.steps=50")


def _settings(full: bool) -> str:
    from rlvr.cli.help import command_help

    return command_help("rlvr sft", full)


def add_parser(sub) -> None:
    p = sub.add_parser("sft", help="supervised fine-tuning on chats or prompt-completion pairs",
                       description=DESCRIPTION, epilog_fn=lambda: _settings(False),
                       full_epilog_fn=lambda: _settings(True))
    add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint (train.resume=true)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds an earlier run (train.overwrite=true)")
    add_common(p)
    p.set_defaults(func=run)
