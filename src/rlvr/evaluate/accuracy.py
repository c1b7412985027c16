"""Accuracy of a policy on a list of problems, with a 95% confidence interval."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from rlvr.evaluate.progress import generation_bar
from rlvr.evaluate.stats import accuracy_summary, bootstrap_ci
from rlvr.engines.base import RolloutEngine, SamplingParams
from rlvr.envs.settings import DEFAULT_TIMEOUT_S
from rlvr.types import Problem, Verdict
from rlvr.utils.deadline import TIMED_OUT, call_all
from rlvr.verifiers import safe_verify

__all__ = ["evaluate_accuracy"]


def evaluate_accuracy(engine: RolloutEngine, problems: Sequence[Problem],
                      verifier: Callable[[str, str], Verdict], *, n: int = 1, temperature: float = 0.0,
                      max_new_tokens: int = 64, seed: int = 1234, keep_samples: int = 0, env=None,
                      reward_parts: Callable[[Problem, list], dict] | None = None,
                      progress: str | None = None) -> dict:
    """Generate ``n`` completions per problem and score them.

    Returns a dict with ``accuracy`` (mean over all samples), its 95% interval
    (Wilson for n=1; percentile bootstrap over problems for n>1), token counts and
    up to ``keep_samples`` example completions.  With a multi-turn ``env``
    (:mod:`rlvr.envs`) whole episodes are run and scored by the environment; the
    result adds ``episodes``: tool-call rate, turns, and accuracy at each attempt
    with its interval (:func:`episode_summary`).  ``reasons`` is the share of the
    samples' verdicts per reason bucket (:func:`~rlvr.rewards.monitors.reason_bucket`:
    ``passed``, ``wrong_answer``, ``syntax_error``... for code).  A single-turn ``env``
    whose ``step_workers`` is above 1 has its checks run on that many threads; a check (or an environment's
    call) gets ``rlvr.envs.settings.DEFAULT_TIMEOUT_S`` seconds, past which it scores 0.  ``reward_parts(problem,
    samples)`` (the samples' verdicts set) gives named [G] values per group, e.g. a rubric's reward functions;
    the result then adds ``reward_parts``: each name's mean over the finite values.  ``progress`` (a
    description) shows a bar with an ETA over the decoding (:func:`~rlvr.evaluate.progress.generation_bar`).
    """
    if not problems:
        raise ValueError("evaluate_accuracy needs at least one problem")
    params = SamplingParams(n=n, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    multi = env is not None and not getattr(env, "single_turn", False)
    with generation_bar(engine, len(problems), progress):
        if multi:
            from rlvr.rollout.episodes import run_episodes

            groups = run_episodes(engine, env, list(problems), params)
        else:
            groups = engine.generate(problems, params)
    pairs = [(s, prob) for prob, group in zip(problems, groups) for s in group]
    if multi:
        verdicts = [s.verdict for s, _ in pairs]
    else:
        workers = min(int(getattr(env, "step_workers", 1) or 1) if env is not None else 1, max(1, len(pairs)))
        if env is not None:  # the environment scores (a task mixture's routes each problem to its task's verifier)
            check = lambda sp: env.step(env.reset(sp[1]), sp[0].text).verdict  # noqa: E731
        else:
            check = lambda sp: safe_verify(verifier, sp[0].text, sp[1].answer)  # noqa: E731
        # daemon threads with a time limit per check: a hung verifier neither stalls the evaluation nor blocks Ctrl-C
        done = call_all([lambda sp=sp: check(sp) for sp in pairs], DEFAULT_TIMEOUT_S, workers=workers,
                        name="rlvr-eval-check")
        late = f"verifier error: TimeoutError: no result after {DEFAULT_TIMEOUT_S:g} s"
        verdicts = [Verdict(0.0, None, late) if v is TIMED_OUT else v for v in done]
    by_sample = iter(verdicts)
    per_problem, examples, lengths = [], [], []
    for prob, group in zip(problems, groups):
        scores = []
        for s in group:
            v = next(by_sample)
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
                    "examples": examples, "reasons": _reason_shares(verdicts)})
    tasks = [(p.metadata or {}).get("task") for p in problems]
    if len(set(tasks)) > 1 and None not in tasks:  # a task mixture's held-out set: each task's accuracy
        summary["by_task"] = {t: accuracy_summary([bool(x) for x, u in zip(per_problem, tasks) if u == t])
                              if n == 1 else {"accuracy": float(np.mean([x for x, u in zip(per_problem, tasks)
                                                                         if u == t]))}
                              for t in dict.fromkeys(tasks)}
    if reward_parts is not None:
        summary["reward_parts"] = _reward_parts(reward_parts, problems, groups, verdicts)
    if multi:
        summary["episodes"] = episode_summary([s for g in groups for s in g], max_turns=env.limits.max_turns)
    return summary


def _reward_parts(fn: Callable[[Problem, list], dict], problems: Sequence[Problem], groups: list,
                  verdicts: Sequence[Verdict]) -> dict[str, float]:
    """Each name's mean over the finite values ``fn`` gives the groups (their samples' verdicts and environment returns set)."""
    import torch

    by_sample, values = iter(verdicts), {}
    for prob, group in zip(problems, groups):
        for s in group:
            v = next(by_sample)
            s.verdict = s.verdict if s.verdict is not None else v
            s.env_return = s.env_return if s.env_return is not None else float(v.score)
        for name, t in fn(prob, list(group)).items():
            values.setdefault(name, []).append(torch.as_tensor(t, dtype=torch.float32).reshape(-1))
    from rlvr.rewards.pipeline import finite_means

    return finite_means({name: torch.cat(ts) for name, ts in values.items()})


def _reason_shares(verdicts: Sequence[Verdict]) -> dict[str, float]:
    from collections import Counter

    from rlvr.rewards.monitors import reason_bucket

    counts = Counter(reason_bucket(v.reason) for v in verdicts)
    return {k: c / len(verdicts) for k, c in counts.most_common()} if verdicts else {}


def episode_summary(samples: Sequence, max_turns: int = 0) -> dict:
    """Tool-call rate, mean turns, ending reasons and accuracy at each attempt (95% Wilson intervals).

    ``accuracy_by_turn[k]`` is the share of episodes correct at or before attempt
    ``k + 1`` (for a retry environment: first-attempt accuracy, then accuracy with
    one retry, ...); ``tool_call_rate`` the share of episodes with at least one
    tool call, with its interval.
    """
    n = len(samples)
    out: dict = {"n": n, "mean_turns": float(np.mean([s.info.get("turns", 1) for s in samples]))}
    calls = [s.info.get("tool_calls", 0) > 0 for s in samples]
    if any("tool_calls" in s.info for s in samples):
        out["tool_call_rate"] = accuracy_summary(calls)
        out["tool_errors_per_episode"] = float(np.mean([s.info.get("tool_errors", 0) for s in samples]))
    attempts = max((int(k.rsplit("_", 1)[1]) for s in samples for k in s.info if k.startswith("correct_at_turn_")),
                   default=0)
    if attempts:  # every attempt the environment allows, even if all episodes ended sooner
        attempts = max(attempts, max_turns)
        by_turn, solved = [], [False] * n
        for k in range(1, attempts + 1):
            solved = [a or bool(s.info.get(f"correct_at_turn_{k}", 0)) for a, s in zip(solved, samples)]
            by_turn.append(accuracy_summary(solved))
        out["accuracy_by_turn"] = by_turn
    ends: dict[str, int] = {}
    for s in samples:
        ends[s.info.get("end", "done")] = ends.get(s.info.get("end", "done"), 0) + 1
    out["ends"] = ends
    return out
