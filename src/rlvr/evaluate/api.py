"""``rlvr.evaluate(...)``: the one-call Python form of ``rlvr eval`` (for notebooks and scripts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.evaluate.pipeline import EvalRequest, default_samples_path, default_verifier, load_problems, run_eval

__all__ = ["evaluate"]


def evaluate(model: str, task: str = "math500", *, n: int = 1, temperature: float = 0.0,
             limit: int | None = None, max_new_tokens: int = 512, verifier: str | None = None,
             path: str | None = None, samples_path: str | Path | None = None, progress: bool = False,
             **options: Any) -> dict[str, Any]:
    """Evaluate ``model`` (bundled name, HF directory, rlvr checkpoint or hub id) on ``task``; returns the results.

    ``task`` is a shipped benchmark (``gsm8k``, ``math500``, ``aime24``, ``amc23``) or
    ``jsonl`` with ``path``.  Samples are stored (default
    ``runs/eval/<task>-<model>-n<n>-t<temperature>.jsonl``) so a later call resumes or
    re-scores them; the returned dict holds ``metrics`` (accuracy with its interval,
    pass@k, maj@k for n > 1), ``per_problem`` results and ``paths``.  Other keyword
    arguments are fields of :class:`rlvr.evaluate.pipeline.EvalRequest` (``top_p``,
    ``seed``, ``system_prompt``, ``batch_size``, ``device``, ...).
    """
    problems = load_problems(task, path)
    samples = Path(samples_path) if samples_path is not None else \
        default_samples_path(task, model, n, temperature)
    req = EvalRequest(task=task, problems=problems, model=model, n=n, temperature=temperature, limit=limit,
                      max_new_tokens=max_new_tokens, verifier=verifier or default_verifier(task),
                      samples_path=samples, progress=progress, **options)
    return run_eval(req)
