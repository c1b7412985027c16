"""``rlvr pipeline``: stages in one config (SFT then RL, RL then distillation, SFT and RL interleaved)."""

from __future__ import annotations

from rlvr.cli._common import add_common, config_path


def run(ns) -> int:
    from rlvr.recipes.pipeline import load_pipeline, run_pipeline
    from rlvr.recipes.rl import TrainingInterrupted

    path, overrides = config_path(list(ns.args))
    if ns.resume:
        overrides.append("resume=true")
    if ns.overwrite:
        overrides.append("overwrite=true")
    cfg = load_pipeline(path, overrides)
    try:
        result = run_pipeline(cfg, path)
    except TrainingInterrupted as e:
        print("the pipeline stopped; continue it with --resume")
        return e.exit_code
    print(f"pipeline directory: {result['output_dir']}")
    return 0


DESCRIPTION = (
    "Run a list of stages in one command, each stage starting from the one before's final model: stages of kind "
    "sft (rlvr sft), rft (rlvr rft), rl (rlvr train) and distill (rlvr train with distill.teacher), each "
    "configured by its own command's YAML (config) plus overrides. Every stage's config is checked before the "
    "first one starts; --resume skips finished stages and resumes the first unfinished one at its step; "
    "summary.json / summary.md hold every stage's held-out accuracy (docs/post-training.md).\n\n"
    "Example: rlvr pipeline configs/pipeline_sft_rl.yaml")


def _settings(full: bool) -> str:
    from rlvr.cli.help import command_help

    return command_help("rlvr pipeline", full)


def add_parser(sub) -> None:
    p = sub.add_parser("pipeline", help="stages in one config: SFT -> RL, RL -> distillation, interleaved",
                       description=DESCRIPTION, epilog_fn=lambda: _settings(False),
                       full_epilog_fn=lambda: _settings(True))
    p.add_argument("args", nargs="*", metavar="PIPELINE.yaml | key=value",
                   help="a pipeline YAML followed by dotted overrides, e.g. output_dir=runs/p repeat=2")
    p.add_argument("--resume", action="store_true",
                   help="skip finished stages, resume the first unfinished one (resume=true)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory holding an earlier pipeline (overwrite=true)")
    add_common(p)
    p.set_defaults(func=run)
