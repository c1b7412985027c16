"""Collecting one step's rollouts: draw prompts, sample groups, verify, reward, refill (DAPO).

``collect_rollouts`` is shared by the in-process recipe, the asynchronous generator
process (:mod:`rlvr.rollout.async_rollouts`) and the FSDP recipe.  What it reads of the
run is a :class:`CollectSettings`; what it returns a :class:`Collected`.  Rewards come
from the one reward pipeline (:class:`rlvr.rewards.pipeline.RewardPipeline`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from rlvr.algorithms.sampling import DifficultyFilter, DynamicSamplingBuffer, MoPPSSelector
from rlvr.engines import SamplingParams
from rlvr.envs import Environment, SingleTurnEnvironment
from rlvr.rewards.pipeline import GroupScores, RewardPipeline, mean_metrics
from rlvr.rewards.settings import RewardConfig
from rlvr.rollout.branching import add_branches
from rlvr.rollout.episodes import DEFAULT_TIMEOUT_S, run_episodes
from rlvr.rollout.guidance import GuidanceStats, ReplayBuffer, guide_groups
from rlvr.rollout.settings import GuidanceConfig, length_cap
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.synthesis import FailureSynthesizer
from rlvr.types import Problem, Sample, Verdict

__all__ = ["collect_rollouts", "draw_prompts", "CollectSettings", "Collected"]


@dataclass(frozen=True, kw_only=True)
class CollectSettings:
    """What collection reads of a run; each field names its config key."""

    prompts_per_step: int
    """``train.prompts_per_step``: groups per step."""
    seed: int = 0
    """``train.seed``: seeds the noise step and seeded reward sources (with the step: resume-exact)."""
    dynamic_sampling: bool = False
    """``algorithm.dynamic_sampling``: DAPO's refill of groups whose verdicts are all equal."""
    max_sampling_rounds: int = 4
    """``algorithm.max_sampling_rounds``: generation rounds per step at most with dynamic sampling."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The ``reward`` section: the reward pipeline's steps."""
    task_functions: dict[str, list] = field(default_factory=dict)
    """``mixture[*].functions``: a task mixture's own rubrics by task label."""
    guidance: GuidanceConfig | None = None
    """The ``guidance`` section: hints and demonstrations for all-fail groups (None: off)."""
    env_timeout_s: float = DEFAULT_TIMEOUT_S
    """``env.timeout_s``: seconds one call of the environment (a verifier's check included) may take (0: no
    limit)."""
    length_schedule: tuple[tuple[int, int], ...] = ()
    """``rollout.length_schedule``: the step's cap on new tokens (:func:`rlvr.rollout.settings.length_cap`)."""
    branches: int = 0
    """``rollout.branches``: samples per group re-sampled from an earlier sample's critical token."""

    @property
    def guided(self) -> bool:
        return self.guidance is not None and self.guidance.active


@dataclass
class Collected:
    """One step's rollouts: the chosen groups' samples, verdicts and rewards, and how they were made."""

    samples: list[Sample]
    verdicts: list[Verdict]
    rewards: torch.Tensor
    """[N] rewards after the pipeline's collection steps (a ``policy`` source replaces them later)."""
    rounds: int
    """Generation rounds (more than 1 with dynamic sampling)."""
    generated: int
    """Completions generated (more than ``samples`` with dynamic sampling or hints)."""
    generation_seconds: float = 0.0
    """Time spent generating; the environment's steps (verification, tool calls) are left out."""
    source_metrics: dict[str, float] = field(default_factory=dict)
    """A ``collect`` reward source's diagnostics, averaged over the chosen groups (e.g. ``ttrl/label_accuracy``)."""
    keep: torch.Tensor | None = None
    """[N] bool: samples the reward source keeps (None: all)."""
    guidance_metrics: dict[str, float] = field(default_factory=dict)
    """``guidance/*`` metrics (hints, demonstrations)."""
    reward_parts: dict[str, torch.Tensor] = field(default_factory=dict)
    """With a rubric (``reward.functions``): each function's [N] values, unweighted, by name."""
    reward_part_errors: dict[str, int] = field(default_factory=dict)
    """With a rubric: each function's calls that raised (scored 0), over the chosen groups."""

    def subset(self, index: Sequence[int]) -> Collected:
        """A copy (of the same class) holding only the samples at ``index``, with their verdicts, rewards, keep
        flags and rubric values; the step's counts and averages (rounds, generated, metrics, error counts) stay."""
        rows = torch.as_tensor(list(index), dtype=torch.long)
        return dataclasses.replace(
            self, samples=[self.samples[i] for i in index], verdicts=[self.verdicts[i] for i in index],
            rewards=self.rewards[rows], keep=None if self.keep is None else self.keep[rows],
            reward_parts={k: v[rows] for k, v in self.reward_parts.items()})


def draw_prompts(sampler: PromptSampler, k: int, dfilter: DifficultyFilter | MoPPSSelector | None) -> list[Problem]:
    """``k`` prompts: the sampler's next, or those a difficulty filter (:meth:`DifficultyFilter.choose`: its
    pass-rate band) or MoPPS (:meth:`MoPPSSelector.choose`: Thompson sampling) chooses."""
    return sampler.next(k) if dfilter is None else dfilter.choose(sampler, k)


def collect_rollouts(engine, sampler: PromptSampler, env, params: SamplingParams, settings: CollectSettings,
                     step: int, dfilter: DifficultyFilter | None = None, budget_left: int | None = None,
                     answer_key: Callable[[str | None], Any] | None = None,
                     replay: ReplayBuffer | None = None, synth: FailureSynthesizer | None = None) -> Collected:
    """Run ``prompts_per_step`` groups of episodes in ``env`` and turn their outcomes into rewards.

    ``env`` is an :class:`~rlvr.envs.Environment` (a bare verifier is wrapped as a single-turn one).  Each
    group's rewards come from :meth:`RewardPipeline.score_group`: the episode's return (1 or 0 for a verified
    answer) scaled to ``wrong_reward + (correct_reward - wrong_reward) * R``, optional noise injection (for
    noisy-verifier experiments; ``accuracy`` keeps the true verdicts), a ``collect`` reward source replacing
    it (``answer_key`` canonicalises answers), and the shaping terms (DAPO's soft overlong punishment, LASER).
    A ``policy`` source is computed by the recipe after collection: here its groups keep the verifier's reward.

    With ``dynamic_sampling`` groups whose samples are all correct or all wrong are dropped and more prompts
    are drawn, up to ``max_sampling_rounds`` generation rounds; if still short the batch is topped up with
    dropped groups.  The filter reads the verdicts the trainer sees (after any injected noise), not the
    shaped reward: DAPO's Eq. 11 keeps ``0 < #correct < G`` and verl filters on ``acc``, so an all-correct
    group whose lengths the overlong punishment or LASER spread apart is still dropped.  A reward source
    other than the verifier is filtered on its own rewards (there is no verdict to count on unlabelled
    problems).

    With a difficulty filter, prompts outside its band are skipped before generation and every generated
    group updates the prompt's running pass rate (from the true verdicts, or a source's rewards).

    With ``guidance`` hints / demonstrations (:mod:`rlvr.rollout.guidance`) every group whose samples all
    fail is guided before its rewards are computed; the difficulty filter still sees the policy's own outcome
    (0 for a guided group), the extra completions count in ``generated`` (``budget_left`` bounds the
    sampling rounds only, so hints may overshoot ``train.max_rollouts`` within the step).

    With a ``length_schedule`` the step samples at most its cap of new tokens, and the overlong shaping counts
    from that cap.
    """
    if not isinstance(env, Environment):
        env = SingleTurnEnvironment(env)
    cap = length_cap(settings.length_schedule, step, params.max_new_tokens)
    if cap != params.max_new_tokens:
        params = dataclasses.replace(params, max_new_tokens=cap)
    G, P = params.n, settings.prompts_per_step
    pipeline = RewardPipeline(settings.reward, max_new_tokens=params.max_new_tokens, seed=settings.seed,
                              task_functions=settings.task_functions)
    noise = torch.Generator().manual_seed(settings.seed * 1_000_003 + step)  # resume-exact
    max_rounds = settings.max_sampling_rounds if settings.dynamic_sampling else 1
    if budget_left is not None:  # train.max_rollouts: extra rounds may not overshoot the budget
        max_rounds = max(1, min(max_rounds, budget_left // (P * G)))
    buf = DynamicSamplingBuffer(P, G, max_rounds, drop_uninformative=settings.dynamic_sampling)
    gstats, t_gen = GuidanceStats(), 0.0
    while not buf.full and not buf.exhausted:
        buf.start_round()
        made = synth.take(P) if synth is not None else []  # problems synthesised from earlier failures first
        problems = made + draw_prompts(sampler, P - len(made), dfilter)
        t0 = time.perf_counter()
        steps: dict[str, float] = {}
        if settings.branches:  # G - b ordinary samples, then b branches from their critical tokens
            groups = run_episodes(engine, env, problems, dataclasses.replace(params, n=G - settings.branches),
                                  timing=steps, timeout=settings.env_timeout_s)
            groups = add_branches(engine, env, problems, groups, params, settings.branches)
        else:
            groups = run_episodes(engine, env, problems, params, timing=steps, timeout=settings.env_timeout_s)
        if settings.guided:  # all-fail groups: hints and/or a demonstration (scoring hinted samples is generation)
            groups = guide_groups(engine, env, problems, groups, params, settings.guidance, gstats, replay)
        t_gen += time.perf_counter() - t0 - steps.get("env_s", 0.0)  # the environment's steps are verification
        for gi, (problem, group) in enumerate(zip(problems, groups)):
            scores = pipeline.score_group(problem, group, noise=noise, key=(settings.seed, step, buf.rounds, gi),
                                          answer_key=answer_key,
                                          guided=settings.guided and "guidance" in group[-1].info)
            if dfilter is not None:  # the policy's own pass rate (a guided group's is 0), or the source's rewards
                dfilter.update([problem.id], scores.pass_signal, G)
            if synth is not None:  # the policy failed unaided (hinted / inserted rows do not count): variants queued
                synth.observe(problem, [float(s.verdict.correct) for s in group if "guidance" not in s.info])
            buf.add(scores, scores.filter_signal)
    return _collected(buf, t_gen, gstats, settings, synth)


def _collected(buf: DynamicSamplingBuffer, t_gen: float, gstats: GuidanceStats,
               settings: CollectSettings, synth: FailureSynthesizer | None = None) -> Collected:
    chosen: list[GroupScores] = buf.take()
    out = Collected([s for g in chosen for s in g.samples], [v for g in chosen for v in g.verdicts],
                    torch.cat([g.reward for g in chosen]), rounds=buf.rounds,
                    generated=buf.generated + gstats.rollouts_extra, generation_seconds=t_gen)
    if any(g.sourced for g in chosen):
        out.source_metrics = mean_metrics([g.metrics for g in chosen])
        out.keep = torch.cat([g.keep for g in chosen])
    names = list(dict.fromkeys(k for g in chosen for k in g.parts))  # a mixture's tasks may name different parts
    if names:
        nan = lambda g: torch.full((len(g.samples),), float("nan"))  # noqa: E731 - a part another task's rubric lacks
        out.reward_parts = {k: torch.cat([g.parts.get(k, nan(g)) for g in chosen]) for k in names}
        out.reward_part_errors = {k: sum(g.part_errors.get(k, 0) for g in chosen) for k in names}
        for g in chosen:  # each sample carries its own rubric's named parts
            for i, s in enumerate(g.samples):
                s.reward_parts = {k: float(v[i]) for k, v in g.parts.items()}
    if settings.guided:
        out.guidance_metrics = gstats.metrics(settings.guidance.hints, settings.guidance.demonstrations,
                                              settings.guidance.replay, settings.guidance.regenerate != "none")
        if synth is not None:
            out.guidance_metrics["guidance/synthesized_total"] = float(synth.made)
            out.guidance_metrics["guidance/synthesized_queued"] = float(len(synth))
    return out
