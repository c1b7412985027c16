"""``rlvr`` command line: a thin layer that parses config and calls the library.

    rlvr train [CONFIG.yaml] [key=value ...]     GRPO training (+ held-out eval before/after)
    rlvr eval  [CONFIG.yaml] [key=value ...]     accuracy of a model or checkpoint on a task
    rlvr config [CONFIG.yaml] [key=value ...]    print the resolved config as YAML

Every config key can be overridden with a dotted ``key=value`` (``rlvr train
--help`` lists them all with types, defaults and docs).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

__all__ = ["main"]


def _config_help() -> str:
    from rlvr.config import describe_config
    from rlvr.train.config import RunConfig

    return "config keys (override as key=value):\n" + describe_config(RunConfig)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs="*", metavar="CONFIG.yaml | key=value",
                   help="an optional YAML config file followed by dotted overrides, e.g. train.steps=20")


def _load(args: list[str]):
    from rlvr.config import load_config
    from rlvr.train.config import RunConfig

    path = None
    if args and "=" not in args[0]:
        path, args = args[0], args[1:]
        if not Path(path).is_file():
            raise SystemExit(f"rlvr: config file not found: {path}")
    return load_config(RunConfig, path, args)


def _cmd_train(ns) -> int:
    from rlvr.train.grpo import TrainingInterrupted, train

    overrides = list(ns.args)
    if ns.resume:
        overrides.append("train.resume=true")
    cfg = _load(overrides)
    try:
        summary = train(cfg)
    except TrainingInterrupted:
        return 130
    print(f"run directory: {summary['output_dir']}")
    return 0


def _cmd_eval(ns) -> int:
    from rlvr.evaluate.accuracy import evaluate_accuracy
    from rlvr.models import load_policy
    from rlvr.rollout import HFEngine
    from rlvr.rollout.hf import sampler_dtype
    from rlvr.train.data import build_task
    from rlvr.verifiers import get_verifier

    cfg = _load(list(ns.args))
    model_name = ns.model or cfg.model.name
    model, tok = load_policy(model_name, dtype=cfg.model.dtype, cache=cfg.model.cache_dir)
    _, heldout = build_task(cfg.task)
    problems = heldout[: cfg.eval.num_problems]
    engine = HFEngine(model, tok, batch_size=cfg.rollout.batch_size, system_prompt=cfg.task.system_prompt,
                      dtype=sampler_dtype(cfg.rollout.dtype))
    res = evaluate_accuracy(engine, problems, get_verifier(cfg.reward.verifier), n=cfg.eval.n,
                            temperature=cfg.eval.temperature, max_new_tokens=cfg.eval.max_new_tokens,
                            seed=cfg.eval.seed, keep_samples=ns.keep_samples)
    res.update({"model": model_name, "task": cfg.task.name})
    out = Path(ns.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"{model_name} on {cfg.task.name} ({res['n']} problems, n={cfg.eval.n}, T={cfg.eval.temperature}): "
          f"accuracy {res['accuracy']:.1%}  95% CI [{res['ci_low']:.1%}, {res['ci_high']:.1%}]")
    print(f"results written to {out}")
    return 0


def _cmd_config(ns) -> int:
    import yaml

    from rlvr.config import config_to_dict

    print(yaml.safe_dump(config_to_dict(_load(list(ns.args))), sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="rlvr", description=__doc__, formatter_class=fmt)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train a policy with GRPO", formatter_class=fmt,
                       description="Train with GRPO: sample G completions per prompt, score them with a "
                                   "verifier, apply group-normalised advantages and a PPO-clip loss. "
                                   "Writes metrics.jsonl, checkpoints and eval_*.json to train.output_dir.",
                       epilog=_config_help())
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint (train.resume=true)")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="accuracy of a model or checkpoint on a task", formatter_class=fmt,
                       description="Evaluate a model (bundled name, HF dir, hub id or rlvr checkpoint dir) on "
                                   "the held-out split of the configured task; writes a JSON report.",
                       epilog=_config_help())
    _add_config_args(p)
    p.add_argument("--model", help="model to evaluate (default: model.name from the config)")
    p.add_argument("--output", default="eval.json", help="where to write the results JSON (default eval.json)")
    p.add_argument("--keep-samples", type=int, default=16, help="example completions to keep in the JSON")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("config", help="print the resolved config", formatter_class=fmt, epilog=_config_help())
    _add_config_args(p)
    p.set_defaults(func=_cmd_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    from rlvr.config import ConfigError
    from rlvr.models import ModelNotFoundError
    from rlvr.tasks.jsonl import DatasetError

    ns = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return ns.func(ns)
    except (ConfigError, ModelNotFoundError, DatasetError) as e:
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
