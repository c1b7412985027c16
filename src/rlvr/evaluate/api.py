"""``rlvr.evaluate(...)``: the one-call Python form of ``rlvr eval`` (for notebooks and scripts)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, default_verifier, load_problems, run_eval
from rlvr.evaluate.settings import DEFAULT_MAX_NEW_TOKENS

__all__ = ["evaluate"]

log = logging.getLogger(__name__)


def evaluate(model: str, task: str = "math500", *, n: int = 1, temperature: float = 0.0,
             limit: int | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, verifier: str | None = None,
             path: str | None = None, samples_path: str | Path | None = None, progress: bool = False,
             **options: Any) -> dict[str, Any]:
    """Evaluate ``model`` (bundled name, HF directory, rlvr checkpoint or hub id) on ``task``; returns the results.

    ``task`` is a shipped benchmark (``gsm8k``, ``math500``, ``aime24``, ``amc23``) or
    ``jsonl`` with ``path``.  Samples are stored (default
    ``runs/eval/<task>-<model>-n<n>-T<temperature>.samples.jsonl``; a model given as a local
    directory adds a short hash of it) so a later call resumes or
    re-scores them; the returned dict holds ``metrics`` (accuracy with its interval,
    pass@k, maj@k for n > 1), ``per_problem`` results, ``paths`` and ``warnings`` (also logged:
    e.g. most answers cut off at ``max_new_tokens``, the same default as ``rlvr eval``).  Other keyword
    arguments are fields of :class:`rlvr.evaluate.pipeline.EvalRequest` (``top_p``,
    ``seed``, ``system_prompt``, ``batch_size``, ``device``, ...).
    """
    problems = load_problems(task, path)
    samples = Path(samples_path) if samples_path is not None else \
        default_samples_path(task, model, n, temperature)
    req = EvalRequest(task=task, problems=problems, model=model, n=n, temperature=temperature, limit=limit,
                      max_new_tokens=max_new_tokens, verifier=verifier or default_verifier(task),
                      samples_path=samples, progress=progress, **options)
    results = run_eval(req)
    for line in results.get("warnings", []):
        log.warning(line)
    return results
