"""Guidance for groups in which every sample fails: hints and off-policy demonstrations.

A group whose ``G`` samples all fail has rewards that are all equal, so a group-relative
estimator gives it no gradient: the prompts the policy cannot solve teach it nothing.
Two remedies from the literature, both optional (``guidance.*``), both driven by a
problem's reference solution (:func:`reference_solution`):

* **Hints** (``guidance.hints``; Hint-GRPO, StepHint, "guided GRPO"): the group is
  sampled again with the first ``f`` share of the solution's tokens as the beginning of
  the assistant's answer, for each ``f`` of ``guidance.hint_fractions`` in turn, until
  some sample succeeds; that hinted group replaces the failed one.  The hint is an
  engine *prefix*: it ends the sample's ``prompt_ids`` and its ``completion_ids`` hold
  only the new tokens, so the hint is never trained on, and the sampler's log-probs are
  the policy's own given the hint (on-policy).  A sample is scored on hint + completion
  (the whole answer).  If no level succeeds the original group is kept.  Hints are cut
  at token boundaries of the solution's own encoding (``tokenizer.encode(solution)``):
  level ``f`` reveals ``ceil(f * n)`` of its ``n`` tokens (at least 1, at most ``n - 1``;
  a level that would reveal no more than the one before is skipped).
* **Demonstrations** (``guidance.demonstrations``; LUFFY, Yan et al. 2025): the last
  sample of a group that still fails is replaced by the reference solution as an
  off-policy completion (its token ids are the solution's encoding followed by EOS, its
  log-probs 0, i.e. behaviour probability 1, ``info["off_policy"] = True``).  The
  environment scores it like any sample; one that does not pass, or is longer than
  ``max_new_tokens``, is not inserted (counted).  The learner gives its tokens LUFFY's
  shaped, unclipped objective (:func:`rlvr.algorithms.losses.off_policy_shaped_loss`).

* **Replay** (``guidance.replay``; experience replay of the policy's own successes, as RePO and ExGRPO
  replay past correct trajectories into groups that no longer find one): the run keeps, per problem, the
  policy's latest correct completion (:class:`ReplayBuffer`, saved in checkpoints); the last sample of a
  group that still fails is replaced by that earlier completion as an off-policy row trained like a
  demonstration (LUFFY's shaped objective, behaviour probability taken as 1; ExGRPO's own objective weighs
  it by the ratio to the policy that sampled it instead).  It is re-scored by the environment and not
  inserted when it no longer passes or exceeds this step's ``max_new_tokens``.  Replay comes before a
  demonstration: the policy's own solution is preferred to the reference's.

* **Regeneration** (``guidance.regenerate``): the policy answers again with more context, and a passing answer
  joins the failing group as an off-policy row *of the original prompt* (LUFFY's shaped loss), so the policy
  learns to produce unaided what it could produce with help.  ``answer``: ExPO's self-explanations (Zhou et al.
  2025, "ExPO: Unlocking Hard Reasoning with Self-Explanation-Guided Reinforcement Learning", arXiv
  2507.02834): the prompt is followed by the reference answer and a request to explain how to reach it;
  ``critique``: Critique-GRPO's refinement (Zhang et al. 2025, arXiv 2506.03106) with its ground-truth-free
  "indicative" critique: the prompt is followed by the group's last failed response and the statement that it
  is incorrect.  ``regenerate_samples`` answers are drawn per failing group (one engine call for all); the
  first that passes the environment on the original problem is used.

Only single-turn environments are guided (the recipe refuses the rest at load).
Problems without a reference solution are never guided (counted).  Every extra
completion is counted (``guidance/rollouts_extra``) and charged to the rollout budget.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rlvr.engines import SamplingParams
from rlvr.envs import Environment
from rlvr.rollout.episodes import safe_step
from rlvr.rollout.settings import GuidanceConfig
from rlvr.tasks.benchmarks import gsm8k_worked_solution
from rlvr.types import Problem, Sample, Verdict

__all__ = ["reference_solution", "hint_lengths", "GuidanceStats", "guide_groups", "demonstration_sample",
           "ReplayBuffer", "replay_sample", "off_policy_row"]


def reference_solution(problem: Problem) -> str | None:
    """The problem's worked reference solution, or None: ``metadata["solution"]`` (GSM8K's format is rewritten
    by :func:`rlvr.tasks.benchmarks.gsm8k_worked_solution`: no calculator annotations, a boxed answer)."""
    sol = problem.metadata.get("solution") if isinstance(problem.metadata, dict) else None
    if not isinstance(sol, str) or not sol.strip():
        return None
    if "####" in sol:
        try:
            return gsm8k_worked_solution(sol)
        except ValueError:
            return None
    return sol.strip()


def hint_lengths(n: int, fractions: list[float]) -> list[int]:
    """Hint lengths in tokens for a solution of ``n`` tokens: ``ceil(f * n)`` clipped to ``[1, n - 1]``, levels
    that reveal no more than the previous one dropped (empty when ``n < 2``)."""
    out: list[int] = []
    for f in fractions:
        k = min(n - 1, max(1, math.ceil(f * n)))
        if k >= 1 and (not out or k > out[-1]):
            out.append(k)
    return out


@dataclass
class GuidanceStats:
    """What guidance did in one step (every sampling round), turned into ``guidance/*`` metrics."""

    groups: int = 0
    failed: int = 0
    no_solution: int = 0
    hinted: int = 0
    hint_success: int = 0
    hint_tokens: list[int] = field(default_factory=list)
    rollouts_extra: int = 0
    demos: int = 0
    demos_rejected: int = 0
    replays: int = 0
    replays_rejected: int = 0
    regenerated: int = 0

    def metrics(self, hints: bool, demonstrations: bool, replay: bool = False,
                regenerate: bool = False) -> dict[str, float]:
        """Shares are of the step's generated groups; ``hint_tokens`` / ``hint_success`` average over hinted
        groups (0 when there were none)."""
        n = max(self.groups, 1)
        out = {"guidance/failed_groups": self.failed / n, "guidance/no_solution": self.no_solution / n,
               "guidance/rollouts_extra": float(self.rollouts_extra)}
        if hints:
            out.update({"guidance/guided_groups": self.hinted / n,
                        "guidance/hint_tokens": sum(self.hint_tokens) / max(len(self.hint_tokens), 1),
                        "guidance/hint_success": self.hint_success / max(self.hinted, 1)})
        if demonstrations:
            out.update({"guidance/demo_groups": self.demos / n, "guidance/demo_rejected": float(self.demos_rejected)})
        if replay:
            out.update({"guidance/replay_groups": self.replays / n,
                        "guidance/replay_rejected": float(self.replays_rejected)})
        if regenerate:
            out["guidance/regenerated_groups"] = self.regenerated / n
        return out


EXPLAIN = ("{prompt}\n\nThe correct answer is {answer}. Explain step by step how to reach it, then give the "
           "answer in \\boxed{{}}.")
"""``guidance.regenerate=answer``: ExPO's answer-conditioned request for a self-explanation."""

CRITIQUE = ("{prompt}\n\nHere is an attempt:\n{attempt}\n\nThis attempt is incorrect. Write a corrected solution "
            "and give the answer in \\boxed{{}}.")
"""``guidance.regenerate=critique``: Critique-GRPO's indicative critique (no reference answer revealed)."""


def regeneration_prompt(mode: str, problem: Problem, failed: Sample) -> str:
    """The regeneration request of ``mode`` (``answer`` or ``critique``) for ``problem``."""
    if mode == "answer":
        return EXPLAIN.format(prompt=problem.prompt, answer=problem.answer)
    return CRITIQUE.format(prompt=problem.prompt, attempt=failed.text)


class ReplayBuffer:
    """Per problem id, the policy's latest correct on-policy completion (token ids and text), at most ``capacity``
    problems (the least recently updated go first)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.items: OrderedDict[str, tuple[list[int], str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.items)

    def observe(self, problems: list[Problem], groups: list[list[Sample]]) -> None:
        """Keep each group's last correct sample that the policy produced unaided (no hint, not off-policy)."""
        for problem, group in zip(problems, groups):
            own = [s for s in group if s.verdict is not None and s.verdict.correct
                   and not s.info.get("off_policy") and "guidance" not in s.info]
            if own:
                self.items.pop(problem.id, None)
                self.items[problem.id] = (list(own[-1].completion_ids), own[-1].text)
                while len(self.items) > self.capacity:
                    self.items.popitem(last=False)

    def get(self, problem_id: str) -> tuple[list[int], str] | None:
        return self.items.get(problem_id)

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "items": [[k, list(ids), text] for k, (ids, text) in self.items.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.items = OrderedDict((k, (list(ids), text)) for k, ids, text in state["items"])


def _failed(group: list[Sample]) -> bool:
    return not any(s.verdict.correct for s in group)


def _score(env: Environment, problem: Problem, sample: Sample, text: str) -> None:
    """One single-turn episode's outcome for ``text`` (what :func:`rlvr.rollout.episodes.run_episodes` records);
    an environment that raises fails the sample, never the run (:func:`rlvr.rollout.episodes.safe_step`)."""
    reply = safe_step(env, env.reset(problem), text)
    verdict = reply.verdict if reply.verdict is not None else Verdict(0.0, None, reason="episode ended")
    reward, counts = float(reply.reward), {k: v for k, v in reply.info.items() if isinstance(v, (int, float))}
    sample.verdict, sample.env_return = verdict, reward
    sample.info.update({"turn_ends": [len(sample.completion_ids)], "turn_rewards": [reward], "turns": 1, "end": "done",
                        **counts})


score_single_turn = _score
"""Score one single-turn sample's ``text`` in ``env`` (sets its verdict, return and episode info)."""


def off_policy_row(problem: Problem, ids: list[int], text: str, like: Sample, group_index: int, kind: str,
                   finish_reason: str = "stop") -> Sample:
    """``ids`` as an off-policy completion of ``like``'s prompt: log-probs 0 (behaviour probability 1),
    ``info["off_policy"] = True``, ``info["guidance"] = kind``."""
    return Sample(problem.id, list(like.prompt_ids), list(ids), [0.0] * len(ids), text, finish_reason, group_index,
                  info={"off_policy": True, "guidance": kind})


def demonstration_sample(problem: Problem, solution: str, like: Sample, tokenizer, group_index: int) -> Sample:
    """The reference solution as an off-policy completion of ``like``'s prompt: the solution's token ids then EOS,
    log-probs 0 (behaviour probability 1), ``info["off_policy"] = True``."""
    ids = list(tokenizer.encode(solution, add_special_tokens=False)) + [tokenizer.eos_token_id]
    return off_policy_row(problem, ids, solution, like, group_index, "demo")


def replay_sample(problem: Problem, ids: list[int], text: str, like: Sample, group_index: int) -> Sample:
    """An earlier completion as an off-policy row of ``like``'s prompt: its token ids, log-probs 0,
    ``info["off_policy"] = True``, ``info["guidance"] = "replay"``."""
    return off_policy_row(problem, ids, text, like, group_index, "replay")


def _insert_if_it_passes(env: Environment, problem: Problem, groups: list[list[Sample]], i: int, row: Sample,
                         max_new_tokens: int) -> bool:
    """Score ``row`` and, when it fits ``max_new_tokens`` and passes, put it in the place of group ``i``'s last
    sample; whether it was inserted."""
    if len(row.completion_ids) > max_new_tokens:
        return False
    _score(env, problem, row, row.text)
    if not row.verdict.correct:
        return False
    groups[i] = groups[i][:-1] + [row]
    return True


def guide_groups(engine, env: Environment, problems: list[Problem], groups: list[list[Sample]],
                 params: SamplingParams, gcfg: GuidanceConfig, stats: GuidanceStats,
                 replay: ReplayBuffer | None = None) -> list[list[Sample]]:
    """``groups`` (one per problem) with every all-fail group guided as ``gcfg`` (``guidance.*``) says.

    Hints for all failing groups of one level are sampled with one ``engine.generate`` call.  With ``replay``
    (``guidance.replay``) the buffer first takes this round's unaided successes, then a failing group gets the
    problem's earlier success before any demonstration.  Returns a new list; unguided groups are the same objects.
    """
    groups = list(groups)
    stats.groups += len(groups)
    tokenizer = engine.tokenizer
    if replay is not None:
        replay.observe(problems, groups)
    todo: dict[int, str] = {}
    failing: list[int] = []
    for i, group in enumerate(groups):
        if not _failed(group):
            continue
        stats.failed += 1
        failing.append(i)
        sol = reference_solution(problems[i])
        if sol is None:
            stats.no_solution += 1
        else:
            todo[i] = sol
    if gcfg.hints and todo:
        _hint(engine, env, problems, groups, params, gcfg.hint_fractions, todo, tokenizer, stats)
    if replay is not None:
        for i in failing:
            if not _failed(groups[i]) or (kept := replay.get(problems[i].id)) is None:
                continue
            row = replay_sample(problems[i], *kept, groups[i][-1], len(groups[i]) - 1)
            if _insert_if_it_passes(env, problems[i], groups, i, row, params.max_new_tokens):
                stats.replays += 1
            else:
                stats.replays_rejected += 1
    if gcfg.regenerate != "none":
        _regenerate(engine, env, problems, groups, params, gcfg, [i for i in failing if _failed(groups[i])], stats)
    if gcfg.demonstrations:
        for i, sol in todo.items():
            if not _failed(groups[i]):
                continue
            demo = demonstration_sample(problems[i], sol, groups[i][-1], tokenizer, len(groups[i]) - 1)
            if _insert_if_it_passes(env, problems[i], groups, i, demo, params.max_new_tokens):
                stats.demos += 1
            else:
                stats.demos_rejected += 1
    return groups


def _regenerate(engine, env, problems, groups, params, gcfg: GuidanceConfig, todo: list[int],
                stats: GuidanceStats) -> None:
    """``guidance.regenerate`` for the failing groups ``todo``: one engine call, the first passing answer of each
    group becomes its last row (off-policy, of the original prompt)."""
    if not todo:
        return
    asked = [dataclasses.replace(problems[i], prompt=regeneration_prompt(gcfg.regenerate, problems[i], groups[i][-1]))
             for i in todo]
    outs = engine.generate(asked, dataclasses.replace(params, n=gcfg.regenerate_samples))
    for i, out in zip(todo, outs):
        stats.rollouts_extra += len(out)
        for s in out:
            row = off_policy_row(problems[i], s.completion_ids, s.text, groups[i][-1], len(groups[i]) - 1,
                                 f"regenerate_{gcfg.regenerate}", s.finish_reason)
            if _insert_if_it_passes(env, problems[i], groups, i, row, params.max_new_tokens):
                stats.regenerated += 1
                break


def _hint(engine, env, problems, groups, params, fractions, todo, tokenizer, stats) -> None:
    """Hint levels in turn for the failing groups ``todo``; a group stops at its first level with a success."""
    params = dataclasses.replace(params, stop=tuple(params.stop) + tuple(getattr(env, "stop", ())))
    ids = {i: list(tokenizer.encode(sol, add_special_tokens=False)) for i, sol in todo.items()}
    levels = {i: hint_lengths(len(ids[i]), fractions) for i in todo}
    pending = [i for i in todo if levels[i]]
    last: dict[int, int] = {}
    for level in range(len(fractions)):
        pending = [i for i in pending if level < len(levels[i])]
        if not pending:
            break
        prefixes = [ids[i][:levels[i][level]] for i in pending]
        outs = engine.generate([problems[i] for i in pending], params, prefixes=prefixes)
        still = []
        for i, hint, group in zip(pending, prefixes, outs):
            stats.rollouts_extra += len(group)
            last[i] = len(hint)
            hint_text = tokenizer.decode(hint, skip_special_tokens=True)
            for s in group:
                _score(env, problems[i], s, hint_text + s.text)
                s.info.update({"guidance": "hint", "hint_tokens": len(hint), "hint_text": hint_text})
            if _failed(group):
                still.append(i)
            else:
                groups[i] = group
                stats.hint_success += 1
        pending = still
    stats.hinted += len(last)
    stats.hint_tokens += list(last.values())
