"""Accuracy of a policy on a list of problems, with a 95% confidence interval."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from rlvr.evaluate.stats import accuracy_summary, bootstrap_ci
from rlvr.engines.base import RolloutEngine, SamplingParams
from rlvr.types import Problem, Verdict
from rlvr.verifiers import safe_verify

__all__ = ["evaluate_accuracy"]


def evaluate_accuracy(engine: RolloutEngine, problems: Sequence[Problem],
                      verifier: Callable[[str, str], Verdict], *, n: int = 1, temperature: float = 0.0,
                      max_new_tokens: int = 64, seed: int = 1234, keep_samples: int = 0) -> dict:
    """Generate ``n`` completions per problem and score them.

    Returns a dict with ``accuracy`` (mean over all samples), its 95% interval
    (Wilson for n=1; percentile bootstrap over problems for n>1), token counts and
    up to ``keep_samples`` example completions.
    """
    if not problems:
        raise ValueError("evaluate_accuracy needs at least one problem")
    params = SamplingParams(n=n, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    groups = engine.generate(problems, params)
    per_problem, examples, lengths = [], [], []
    for prob, group in zip(problems, groups):
        scores = []
        for s in group:
            v = safe_verify(verifier, s.text, prob.answer)
            scores.append(1.0 if v.correct else 0.0)
            lengths.append(s.num_tokens)
            if len(examples) < keep_samples:
                examples.append({"id": prob.id, "prompt": prob.prompt, "answer": prob.answer,
                                 "completion": s.text, "extracted": v.extracted, "correct": v.correct})
        per_problem.append(float(np.mean(scores)))
    if n == 1:
        summary = accuracy_summary([bool(x) for x in per_problem])
    else:
        lo, hi = bootstrap_ci(per_problem)
        summary = {"n": len(per_problem), "accuracy": float(np.mean(per_problem)), "ci_low": lo, "ci_high": hi,
                   "method": "bootstrap over problems"}
    summary.update({"samples_per_problem": n, "temperature": temperature, "max_new_tokens": max_new_tokens,
                    "mean_completion_tokens": float(np.mean(lengths)), "per_problem": per_problem,
                    "examples": examples})
    return summary
