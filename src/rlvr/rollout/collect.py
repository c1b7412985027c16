"""Collecting one step's rollouts: draw prompts, sample groups, verify, shape rewards, refill (DAPO).

``collect_rollouts`` is shared by the in-process recipe, the asynchronous generator
process (:mod:`rlvr.rollout.async_rollouts`) and the FSDP recipe.
"""

from __future__ import annotations

import time

import torch

from rlvr.algorithms.sampling import DifficultyFilter, DynamicSamplingBuffer
from rlvr.engines import SamplingParams
from rlvr.envs import Environment, SingleTurnEnvironment
from rlvr.rewards import flip_rewards, laser_reward, soft_overlong_punishment
from rlvr.rewards.sources import GroupInput, compute_group_rewards
from rlvr.rollout.episodes import run_episodes
from rlvr.rollout.guidance import GuidanceStats, guide_groups
from rlvr.tasks.sampler import PromptSampler
from rlvr.types import Problem

__all__ = ["collect_rollouts", "draw_prompts", "source_group_rewards", "COLLECT_SOURCES"]

COLLECT_SOURCES = frozenset({"verifier", "majority_vote", "random", "format_only"})
"""Reward sources computed at collection (they read texts, verdicts and answers, not the policy)."""


def draw_prompts(sampler: PromptSampler, k: int, dfilter: DifficultyFilter | None) -> list[Problem]:
    """``k`` prompts; with a difficulty filter, prompts outside its pass-rate band are skipped.

    At most ``8 k`` prompts are examined per call; if the band holds fewer than
    ``k`` of them the rest are taken unfiltered, so a step never stalls.
    """
    if dfilter is None:
        return sampler.next(k)
    out: list[Problem] = []
    for _ in range(8 * k):
        if len(out) == k:
            break
        p = sampler.next(1)[0]
        if dfilter.keep(p.id):
            out.append(p)
    return out + (sampler.next(k - len(out)) if len(out) < k else [])


def source_group_rewards(name: str, params: dict, problem: Problem, group: list, key, answer_key=None):
    """Rewards [G], keep [G] and metrics of one group from a reward source that reads only texts, verdicts and
    answers (``verifier``, ``majority_vote``, ``random``, ``format_only``).

    Answers are the verdicts' ``extracted`` (through ``answer_key``, e.g. a voting key that lets ``0.5`` and
    ``1/2`` vote together); the verdicts and the reference are passed only when the problem has a reference
    answer, so label diagnostics (TTRL's pseudo-label accuracy) are measured against the true label and are
    absent on unlabelled problems.
    """
    verdicts = [s.info["verdict"] for s in group]
    answers = [v.extracted if answer_key is None else answer_key(v.extracted) for v in verdicts]
    labelled = problem.answer is not None and str(problem.answer).strip() != ""
    gi = GroupInput([s.text for s in group], reference=problem.answer if labelled else None,
                    verdicts=verdicts if labelled or name == "verifier" else None, answers=answers, key=key)
    return compute_group_rewards(name, [gi], **params)


def collect_rollouts(engine, sampler: PromptSampler, env, params: SamplingParams, cfg, step: int,
                      dfilter: DifficultyFilter | None = None, budget_left: int | None = None,
                      out: dict | None = None, answer_key=None):
    """Run ``prompts_per_step`` groups of episodes in ``env`` and turn their outcomes into rewards.

    ``env`` is an :class:`~rlvr.envs.Environment` (a bare verifier is wrapped as a
    single-turn one).  An episode's base reward is ``wrong_reward + (correct_reward -
    wrong_reward) * R`` where ``R`` is the environment's return (1 or 0 for a
    verified answer, so single-turn runs are unchanged).

    Reward shaping on top of the verifier: optional noise injection (for
    noisy-verifier experiments; ``accuracy`` keeps the true verdicts) and DAPO's
    soft overlong punishment.  With ``algorithm.dynamic_sampling`` groups whose samples
    are all correct or all wrong are dropped and more prompts are drawn, up to
    ``max_sampling_rounds`` generation rounds; if still short the batch is topped up with
    dropped groups.  The filter reads the verdicts the trainer sees (after any injected
    noise), not the shaped reward: DAPO's Eq. 11 keeps ``0 < #correct < G`` and verl filters
    on ``acc``, so an all-correct group whose lengths the overlong punishment or LASER
    spread apart is still dropped.  A reward source other than the verifier is filtered on
    its own rewards (there is no verdict to count on unlabelled problems).

    With a difficulty filter, prompts outside its band are skipped before
    generation and every generated group updates the prompt's running pass rate
    (from the true verdicts).  LASER adds a bonus to correct answers within
    ``reward.laser_target_length`` tokens.

    ``reward.source`` other than ``verifier`` (the default, whose arithmetic is the one
    above) replaces the verifier's reward by the source's (:mod:`rlvr.rewards.sources`)
    for the sources that need only texts, verdicts and answers (``majority_vote``,
    ``random``, ``format_only``; ``answer_key`` canonicalises answers); the soft
    overlong punishment still applies, and the dynamic-sampling buffer and the
    difficulty filter see the source's rewards.  Sources that need the policy's
    forward pass (``self_certainty``, ``reference_likelihood``) are computed by the
    recipe after collection: here their groups keep the verifier's reward.  ``out``,
    if given, receives ``source_metrics`` (the source's diagnostics averaged over the
    chosen groups, e.g. ``ttrl/label_accuracy``) and ``keep`` ([N] bool or None).

    With ``guidance.hints`` / ``guidance.demonstrations`` (:mod:`rlvr.rollout.guidance`) every
    group whose samples all fail is guided before its rewards are computed; the difficulty
    filter still sees the policy's own outcome (0 for a guided group), the extra
    completions count in ``completions_generated`` (``budget_left`` bounds the sampling rounds
    only, so hints may overshoot ``train.max_rollouts`` within the step), and
    ``out["guidance_metrics"]`` receives the ``guidance/*`` metrics.

    Returns ``(samples, verdicts, rewards, rounds, generation_seconds, completions_generated)``.
    """
    if not isinstance(env, Environment):
        env = SingleTurnEnvironment(env)
    G, P, rcfg = params.n, cfg.train.prompts_per_step, cfg.reward
    noise = torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + step)  # resume-exact
    t_gen = 0.0
    max_rounds = cfg.algorithm.max_sampling_rounds if cfg.algorithm.dynamic_sampling else 1
    if budget_left is not None:  # train.max_rollouts: extra rounds may not overshoot the budget
        max_rounds = max(1, min(max_rounds, budget_left // (P * G)))
    buf = DynamicSamplingBuffer(P, G, max_rounds, drop_uninformative=cfg.algorithm.dynamic_sampling)
    source = getattr(rcfg, "source", "verifier")
    in_collect = source != "verifier" and source in COLLECT_SOURCES
    gcfg = getattr(cfg, "guidance", None)
    guided = gcfg is not None and (gcfg.hints or gcfg.demonstrations)
    gstats = GuidanceStats()
    while not buf.full and not buf.exhausted:
        buf.start_round()
        problems = draw_prompts(sampler, P, dfilter)
        t0 = time.perf_counter()
        groups = run_episodes(engine, env, problems, params)
        if guided:  # all-fail groups: hints and/or a demonstration (scoring hinted samples counts as generation time)
            groups = guide_groups(engine, env, problems, groups, params, gcfg, gstats)
        t_gen += time.perf_counter() - t0
        for gi, (problem, group) in enumerate(zip(problems, groups)):
            if in_collect:  # a label-free or control source: its rewards replace the verifier's
                src_r, src_keep, src_m = source_group_rewards(
                    source, rcfg.source_params, problem, group, (cfg.train.seed, step, buf.rounds, gi), answer_key)
                if dfilter is not None:
                    dfilter.update([problem.id], src_r, G)
                reward = src_r
                if rcfg.overlong_cache_len:
                    lengths = torch.tensor([float(s.num_tokens) for s in group])
                    reward = reward + soft_overlong_punishment(lengths, params.max_new_tokens, rcfg.overlong_cache_len)
                verdicts = [s.info["verdict"] for s in group]
                buf.add((group, verdicts, reward, (src_m, src_keep)), reward)
                continue
            verdicts = [s.info["verdict"] for s in group]
            correct = torch.tensor([float(v.correct) for v in verdicts])
            returns = torch.tensor([float(s.info["reward"]) for s in group])
            if dfilter is not None:  # the policy's own pass rate: a guided group's is 0
                own_fail = guided and "guidance" in group[-1].info
                dfilter.update([problem.id], torch.zeros_like(correct) if own_fail else correct, G)
            if rcfg.flip_false_positive or rcfg.flip_false_negative:
                correct = flip_rewards(correct, rcfg.flip_false_positive, rcfg.flip_false_negative, noise)
                returns = correct
            reward = rcfg.wrong_reward + (rcfg.correct_reward - rcfg.wrong_reward) * returns
            lengths = torch.tensor([float(s.num_tokens) for s in group])
            if rcfg.laser_target_length:  # LASER's reward is 1[correct] + bonus: add the bonus alone
                reward = reward + laser_reward(correct, lengths, rcfg.laser_target_length,
                                               alpha=rcfg.laser_alpha) - correct
            if rcfg.overlong_cache_len:
                reward = reward + soft_overlong_punishment(lengths, params.max_new_tokens, rcfg.overlong_cache_len)
            buf.add((group, verdicts, reward), correct)  # DAPO Eq. 11: 0 < #correct < G, not the shaped reward
    chosen = buf.take()
    samples = [s for g, *_ in chosen for s in g]
    verdicts = [v for _, vs, *_ in chosen for v in vs]
    rewards = torch.cat([c[2] for c in chosen])
    if out is not None:
        out["source_metrics"], out["keep"] = {}, None
        if in_collect:
            out["source_metrics"] = mean_metrics([c[3][0] for c in chosen])
            out["keep"] = torch.cat([c[3][1] for c in chosen])
    if out is not None and guided:
        out["guidance_metrics"] = gstats.metrics(gcfg.hints, gcfg.demonstrations)
    return samples, verdicts, rewards, buf.rounds, t_gen, buf.generated + gstats.rollouts_extra


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the rows that have it (groups where a diagnostic is undefined leave it out)."""
    sums, counts = {}, {}
    for row in rows:
        for k, v in row.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}
