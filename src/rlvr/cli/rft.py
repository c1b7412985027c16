"""``rlvr rft``: rejection-sampling fine-tuning (RFT / STaR / RAFT rounds)."""

from __future__ import annotations

from rlvr.cli._common import add_common, add_config_args, run_fine_tuning


def run(ns) -> int:
    from rlvr.recipes.rft import run_rft
    from rlvr.recipes.rft_config import load_rft_config

    return run_fine_tuning(ns, load_rft_config, run_rft)


DESCRIPTION = (
    "Rejection-sampling fine-tuning: for rft.rounds rounds, sample rft.k completions per problem from the current "
    "model (or from rft.sampler, a teacher: SFT on teacher samples), keep the ones the reward accepts "
    "(rft.keep), and fine-tune on them with the SFT recipe; the next round samples from the new model. Resumable "
    "per round (docs/post-training.md).\n\n"
    "Example: rlvr rft configs/rft_arithmetic.yaml rft.rounds=2")


def _settings(full: bool) -> str:
    from rlvr.cli.help import command_help

    return command_help("rlvr rft", full)


def add_parser(sub) -> None:
    p = sub.add_parser("rft", help="rejection-sampling fine-tuning rounds (RFT / STaR / RAFT)",
                       description=DESCRIPTION, epilog_fn=lambda: _settings(False),
                       full_epilog_fn=lambda: _settings(True))
    add_config_args(p)
    p.add_argument("--resume", action="store_true", help="skip finished rounds, resume the interrupted one "
                                                         "(train.resume=true)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds an earlier run (train.overwrite=true)")
    add_common(p)
    p.set_defaults(func=run)
