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


def _parse_ks(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ks = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise SystemExit(f"rlvr: error: --k takes integers like 1,2,4,8, got {text!r}") from None
    return ks


def _cmd_eval(ns) -> int:
    from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, default_verifier, load_problems, run_eval

    cfg = _load(list(ns.args))
    model_name = ns.model or cfg.model.name
    try:
        if ns.task:
            task = ns.task
            problems = load_problems(task, ns.path or cfg.task.path, prompt_field=ns.prompt_field or cfg.task.prompt_field,
                                     answer_field=ns.answer_field or cfg.task.answer_field)
        else:  # the held-out split of the configured task (what `rlvr train` evaluates)
            from rlvr.train.data import build_task

            task = cfg.task.name
            problems = build_task(cfg.task)[1][: cfg.eval.num_problems]
    except ValueError as e:  # also DatasetError (file:line) and ModelNotFoundError
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2
    explicit = {"n": ns.n, "temperature": ns.temperature, "top_p": ns.top_p, "max_new_tokens": ns.max_new_tokens,
                "seed": ns.seed}
    sampling = {"n": cfg.eval.n, "temperature": cfg.eval.temperature, "top_p": 1.0,
                "max_new_tokens": cfg.eval.max_new_tokens, "seed": cfg.eval.seed}
    sampling.update({k: v for k, v in explicit.items() if v is not None})
    if ns.samples:
        samples = Path(ns.samples)
    else:
        root = Path(ns.output).parent if ns.output else Path("runs/eval")
        samples = default_samples_path(task, model_name, sampling["n"], sampling["temperature"], root)
    output = Path(ns.output) if ns.output else None
    if output is None and ns.report is None:
        output = samples.with_name(samples.name.replace(".samples.jsonl", "") + ".results.json")
    if sampling["n"] > 1 and sampling["temperature"] == 0 and not ns.rescore_only:
        print("rlvr: note: n > 1 at temperature 0 draws n identical greedy samples; use --temperature > 0 "
              "for pass@k / maj@k", file=sys.stderr)
    system_prompt = ns.system_prompt if ns.system_prompt is not None else cfg.task.system_prompt
    device = cfg.model.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    req = EvalRequest(
        task=task, problems=problems, model=(ns.model if ns.rescore_only else model_name), limit=ns.limit,
        samples_path=samples, rescore_only=ns.rescore_only, verifier=ns.verifier or (
            cfg.reward.verifier if not ns.task else default_verifier(task)),
        workers=ns.workers, ks=_parse_ks(ns.k), output=output, report_dir=Path(ns.report) if ns.report else None,
        examples=ns.keep_samples, progress=not ns.no_progress, dtype=cfg.model.dtype,
        sampler_dtype=cfg.rollout.dtype, device=device, batch_size=cfg.rollout.batch_size,
        cache_dir=cfg.model.cache_dir, system_prompt=system_prompt,
        check_sampling={k: v for k, v in explicit.items() if v is not None}, **sampling)
    try:
        res = run_eval(req)
    except ValueError as e:  # SampleFileError (file:line, or both sides of a mismatch), bad options
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2
    m, n = res["metrics"], res["samples_per_problem"]
    top = str(m["ks"][-1])

    def fmt(row: dict) -> str:
        return f"{row['value']:.1%} [{row['ci_low']:.1%}, {row['ci_high']:.1%}]"

    s = res["sampling"]
    print(f"{res['model']} on {res['task']} ({res['num_problems']} problems, n={n}, T={s['temperature']}, "
          f"verifier {res['verifier']}): accuracy {fmt(m['avg@k'][top])}  pass@1 {fmt(m['pass@k'][str(m['ks'][0])])}  "
          f"pass@{top} {fmt(m['pass@k'][top])}  maj@{top} {fmt(m['maj@k'][top])}  (95% bootstrap CIs)")
    t = res["timing"]
    print(f"samples in {res['samples_file']}; generation {t['generate_s']:.1f} s, scoring {t['score_s']:.2f} s, "
          f"metrics {t['metrics_s']:.2f} s")
    for key, label in (("results", "results"), ("html", "report")):
        if key in res["paths"]:
            print(f"{label} written to {res['paths'][key]}")
    return 0


_EVAL_DESCRIPTION = """\
Evaluate a model (bundled name, HF dir, hub id or rlvr checkpoint dir) on a task.

Problems: --task math500|gsm8k|aime24|amc23 reads the benchmark file from
../shared/data ($RLVR_DATA_DIR; --path overrides the file); --task jsonl --path
FILE reads any JSONL (--prompt-field/--answer-field). Without --task: the
held-out split of the config's task (task.* keys), as `rlvr train` evaluates it.

Samples are generated once with the training rollout engine (HFEngine) and
stored in a JSONL samples file (--samples; default
runs/eval/<task>-<model>-n<N>-T<T>.samples.jsonl, or next to --output when that
is given). Each problem is seeded with seed + its index, and written only when
all its n samples exist: an interrupted run resumes where it stopped and ends
with the same samples as an uninterrupted one; --limit N does the first N
problems and a later run without it adds the rest. A samples file made for
another task, model (weights fingerprint) or sampling setting is refused with
a message naming both. --rescore-only never generates: it scores the stored
samples again (e.g. with another --verifier or --k) and fails if problems are
missing.

Sampling: --n/--temperature/--top-p/--max-new-tokens/--seed, else the
config's eval.n (1), eval.temperature (0.0), eval.max_new_tokens (64),
eval.seed (1234). Verifier: math for math500/aime24/amc23/jsonl, numeric for
gsm8k; without --task, reward.verifier.

Metrics, each with a 95% percentile-bootstrap interval over problems, for
every k in 1..n (or --k): pass@k (unbiased estimator of Chen et al. 2021),
maj@k (majority vote over k samples; answers are bucketed by their normalised
form, numbers by exact value; expected over k-subsets, ties count the fraction
of tied answers that are right), avg@k (mean accuracy). MATH-500 also gets
a per-level and per-subject breakdown.

Output: a results JSON (--output; default next to the samples file) and,
with --report DIR, DIR/results.json, passk.png, by_level.png,
by_subject.png and a self-contained DIR/report.html (open it in a browser).

Example:
  rlvr eval --task math500 --limit 40 --n 4 --temperature 0.7 --max-new-tokens 256 --report runs/eval/report
"""


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

    p = sub.add_parser("eval", help="pass@k / maj@k / accuracy of a model on a benchmark, with a report",
                       formatter_class=fmt, description=_EVAL_DESCRIPTION, epilog=_config_help())
    _add_config_args(p)
    g = p.add_argument_group("problems")
    g.add_argument("--task", choices=("math500", "gsm8k", "aime24", "amc23", "jsonl"),
                   help="benchmark to evaluate on (default: the held-out split of the config's task)")
    g.add_argument("--path", help="data file: the JSONL for --task jsonl, or a replacement benchmark file")
    g.add_argument("--prompt-field", help="--task jsonl: field holding the prompt (default task.prompt_field)")
    g.add_argument("--answer-field", help="--task jsonl: field holding the answer (default task.answer_field)")
    g.add_argument("--limit", type=int, help="only the first N problems (a later run without it continues)")
    g = p.add_argument_group("model and sampling (flags win over the config's eval.* keys)")
    g.add_argument("--model", help="model to evaluate (default: model.name from the config)")
    g.add_argument("--n", type=int, help="samples per problem (default eval.n = 1)")
    g.add_argument("--temperature", type=float, help="sampling temperature (default eval.temperature = 0.0)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (default 1.0)")
    g.add_argument("--max-new-tokens", type=int, help="cap on tokens per sample (default eval.max_new_tokens = 64)")
    g.add_argument("--seed", type=int, help="base seed; problem i uses seed + i (default eval.seed = 1234)")
    g.add_argument("--system-prompt", help="system message for every problem (default task.system_prompt)")
    g = p.add_argument_group("stored samples and scoring")
    g.add_argument("--samples", help="samples JSONL to create, resume or re-score "
                                     "(default runs/eval/<task>-<model>-n<N>-T<T>.samples.jsonl)")
    g.add_argument("--rescore-only", action="store_true",
                   help="never generate: score the stored samples (error if the file lacks asked problems)")
    g.add_argument("--verifier", help="registered verifier (default: math; numeric for gsm8k; "
                                      "reward.verifier without --task)")
    g.add_argument("--workers", type=int, default=1, help="verifier processes (default 1)")
    g.add_argument("--k", help="k values for the metrics, e.g. 1,2,4,8 (default every k in 1..n)")
    g = p.add_argument_group("output")
    g.add_argument("--output", help="results JSON (default: next to the samples file, .results.json)")
    g.add_argument("--report", metavar="DIR", help="write results.json, PNG plots and report.html into DIR")
    g.add_argument("--keep-samples", type=int, default=6, help="example completions in the results/report (default 6)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bars")
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
