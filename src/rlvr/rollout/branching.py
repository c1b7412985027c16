"""Branching rollouts: part of each group re-sampled from the critical token of an earlier sample (CURE, ARPO).

A group's samples are independent draws, so the few tokens where a response could have gone another way (the
"forks") are explored no more than any other.  CURE (Li et al. 2025, "CURE: Critical-token-guided
re-concatenation for entropy-collapse prevention", arXiv 2508.11016) and ARPO (Dong et al. 2025, "Agentic
Reinforced Policy Optimization", arXiv 2507.19849) branch at high-uncertainty tokens instead: they cut a sampled
response at a critical token and sample new continuations from there, so the group holds several answers that
share a prefix and differ after the fork.

Here a group of ``G`` is ``G - b`` ordinary samples and ``b`` branches: branch ``k`` takes ordinary sample
``k mod (G - b)``, finds its critical token (the one the sampler found least likely, ``min_t log p(y_t)``: where
the sampled path was least determined; CURE ranks by the policy's entropy instead), keeps the tokens before it
and samples a fresh continuation from there (one engine call for every branch).  A branch is a whole on-policy
sample: its prefix tokens were sampled by the same policy (their sampler log-probs are kept), its suffix is new;
it is scored by the environment like any sample and trained as one; a branch longer than ``max_new_tokens`` is
cut there (``finish_reason="length"``), as an ordinary sample would be.  ``info["branch_of"]`` / ``["branch_at"]``
record its source and fork.  Single-turn environments only.
"""

from __future__ import annotations

import dataclasses

from rlvr.engines import SamplingParams
from rlvr.envs import Environment
from rlvr.rollout.guidance import score_single_turn
from rlvr.types import Problem, Sample

__all__ = ["critical_position", "add_branches"]


def critical_position(logprobs: list[float]) -> int:
    """The index of the least likely sampled token (the first of ties); a response of one token gives 0."""
    return min(range(len(logprobs)), key=lambda t: (logprobs[t], t)) if logprobs else 0


def add_branches(engine, env: Environment, problems: list[Problem], groups: list[list[Sample]],
                 params: SamplingParams, branches: int) -> list[list[Sample]]:
    """Each group (of ``G - branches`` samples) with ``branches`` branch samples appended (see the module doc)."""
    if branches <= 0:
        return groups
    todo: list[tuple[int, Sample, int]] = []
    for i, group in enumerate(groups):
        for k in range(branches):
            src = group[k % len(group)]
            todo.append((i, src, critical_position(list(src.logprobs))))
    prefixes = [list(src.completion_ids[:t]) for _, src, t in todo]
    outs = engine.generate([problems[i] for i, _, _ in todo], dataclasses.replace(params, n=1), prefixes=prefixes)
    tok = engine.tokenizer
    groups = [list(g) for g in groups]
    for (i, src, t), prefix, out in zip(todo, prefixes, outs):
        new = out[0]
        ids = prefix + list(new.completion_ids)
        lps = list(src.logprobs[:t]) + list(new.logprobs)
        finish = new.finish_reason
        if len(ids) > params.max_new_tokens:  # the whole branch keeps the budget every sample has
            ids, lps, finish = ids[:params.max_new_tokens], lps[:params.max_new_tokens], "length"
        text = tok.decode(ids, skip_special_tokens=True)
        s = Sample(src.problem_id, list(src.prompt_ids), ids, lps, text, finish, len(groups[i]),
                   info={"branch_of": src.group_index, "branch_at": t})
        score_single_turn(env, problems[i], s, text)
        groups[i].append(s)
    return groups
