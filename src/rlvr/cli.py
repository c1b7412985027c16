"""``rlvr`` command line: a thin layer that parses config and calls the library.

    rlvr train [CONFIG.yaml] [key=value ...]     GRPO training (+ held-out eval before/after)
    rlvr eval  [CONFIG.yaml] [key=value ...]     accuracy of a model or checkpoint on a task
    rlvr config [CONFIG.yaml] [key=value ...]    print the resolved config as YAML
    rlvr verify INPUT.jsonl [--verifier math]     score completions against references

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


def _read_verify_input(ns) -> tuple[list, list, list, int]:
    """(completions, references, rows, bad_lines) from the JSONL; bad lines are reported by file:line."""
    completions, references, rows, bad = [], [], [], 0
    with open(ns.input, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                completion, reference = row[ns.completion_field], row[ns.reference_field]
            except (ValueError, KeyError) as e:
                msg = f"{ns.input}:{lineno}: bad line ({type(e).__name__}: {e})"
                if ns.on_error == "stop":
                    raise SystemExit(f"rlvr: error: {msg}")
                print(f"rlvr: warning: {msg}; skipped", file=sys.stderr)
                bad += 1
                continue
            completions.append(completion)
            references.append(reference)
            rows.append(row.get(ns.id_field, lineno))
    return completions, references, rows, bad


def _cmd_verify(ns) -> int:
    from collections import Counter

    from tqdm import tqdm

    from rlvr.verifiers.batch import iter_verify

    if not Path(ns.input).is_file():
        raise SystemExit(f"rlvr: input file not found: {ns.input}")
    completions, references, ids, bad = _read_verify_input(ns)
    opts = {"timeout": ns.timeout} if ns.timeout is not None else {}
    out = Path(ns.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    reasons: Counter = Counter()
    correct = 0
    with out.open("w", encoding="utf-8") as f:
        verdicts = iter_verify(ns.verifier, completions, references, workers=ns.workers, **opts)
        for row_id, v in zip(ids, tqdm(verdicts, total=len(completions), desc="verify", unit="ex",
                                       disable=ns.no_progress)):
            f.write(json.dumps({"id": row_id, "score": v.score, "correct": v.correct, "extracted": v.extracted,
                                "reason": v.reason}, ensure_ascii=False) + "\n")
            correct += v.correct
            reasons[v.reason.split(":")[0].strip()] += 1
    n = len(completions)
    summary = {"input": str(ns.input), "verifier": ns.verifier, "n": n, "correct": correct,
               "accuracy": correct / n if n else 0.0, "bad_lines": bad, "reasons": dict(reasons.most_common())}
    summary_path = Path(ns.summary) if ns.summary else out.with_name(out.stem + ".summary.json")
    summary_path.write_text(json.dumps(summary, indent=2))
    print(f"{correct}/{n} correct ({summary['accuracy']:.1%}), {bad} bad lines; verdicts in {out}, summary in {summary_path}")
    for reason, count in reasons.most_common(10):
        print(f"  {count:6d}  {reason}")
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

    p = sub.add_parser("verify", help="score completions in a JSONL file against references", formatter_class=fmt,
                       description="Read one JSON object per line with a completion and a reference answer, "
                                   "score each with a verifier (in parallel with --workers), and write one "
                                   "verdict per line (id, score, correct, extracted, reason) plus a summary JSON "
                                   "(counts, accuracy, histogram of reasons).")
    p.add_argument("input", help="input JSONL file")
    p.add_argument("--completion-field", default="completion", help="field holding the completion (default completion)")
    p.add_argument("--reference-field", default="reference", help="field holding the reference answer (default reference)")
    p.add_argument("--id-field", default="id", help="field copied to the output as id (default id; else the line number)")
    p.add_argument("--verifier", default="math", help="registered verifier name (default math)")
    p.add_argument("--workers", type=int, default=1, help="verifier processes (default 1)")
    p.add_argument("--timeout", type=float, default=None, help="per-check time limit in seconds (verifier default)")
    p.add_argument("--output", default="verdicts.jsonl", help="verdicts JSONL to write (default verdicts.jsonl)")
    p.add_argument("--summary", default=None, help="summary JSON to write (default OUTPUT with .summary.json)")
    p.add_argument("--on-error", choices=("skip", "stop"), default="skip",
                   help="a malformed input line: warn with file:line and skip it (default), or stop with an error")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_verify)
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
