"""One reward pipeline: how a group's outcomes become the rewards (the reward stage; advantages are the credit stage's).

The steps, in the order :class:`RewardPipeline` composes them (the only place that does)::

    base score      each episode's verdict and return (Sample.verdict, Sample.env_return)
    noise           reward.flip_false_positive / flip_false_negative: verdicts flipped at random (experiments;
                    the flipped verdict becomes the return)
    scaling         wrong_reward + (correct_reward - wrong_reward) * return           (the verifier's reward)
                    or, when reward.functions lists a rubric, the weighted sum of its functions
                    (:mod:`rlvr.rewards.rubric`; every function's values are kept as the group's parts)
    source          a reward source other than the verifier replaces that reward (REWARD_SOURCES: one tagged
                    ``collect`` when the group is collected; one tagged ``policy`` from the policy's forward
                    pass after collection, :meth:`RewardPipeline.policy_source`)
    shaping         the REWARD_SHAPING terms reward.shaping names, in its order (LASER, DAPO's overlong
                    punishment, a plugin's), on whatever the source gave

The noise acts on the verdict, so it comes before the scaling; a source replaces the
verifier's reward, so shaping comes after it and applies to every source alike.
Collection (:func:`rlvr.rollout.collect.collect_rollouts`) runs the steps up to shaping
per group; the recipe runs a policy-computed source on the collected batch.  What follows,
rewards into advantages (process credit from reward.process_prm's step scores included), is
the credit stage's (:mod:`rlvr.credit`).  Adding a reward function, a shaping term or a
reward source is one file: register it in :data:`~rlvr.rewards.rubric.REWARD_FUNCTIONS`,
:data:`~rlvr.rewards.shaping.REWARD_SHAPING` or :data:`~rlvr.rewards.sources.REWARD_SOURCES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from rlvr.rewards.noisy import flip_rewards
from rlvr.rewards.rubric import Rubric
from rlvr.rewards.settings import RewardConfig
from rlvr.rewards.shaping import REWARD_SHAPING
from rlvr.rewards.sources import REWARD_SOURCES, GroupInput, compute_group_rewards
from rlvr.types import Problem, Sample, Verdict

__all__ = ["GroupScores", "RewardPipeline", "source_stage", "apply_keep", "mean_metrics", "part_metrics",
           "finite_means", "build_rubric"]

STAGES = ("base score", "noise", "scaling", "source", "shaping")
"""The pipeline's steps, in order."""


def source_stage(name: str) -> str:
    """When reward source ``name`` is computed: ``collect`` (from texts, verdicts and answers, as each group is
    collected) or ``policy`` (from the policy's forward pass over the collected batch); its registry tag."""
    tags = REWARD_SOURCES.entry(name, key="reward.source").tags
    stages = [t for t in ("collect", "policy") if t in tags]
    if len(stages) != 1:
        raise ValueError(f"reward.source={name} must be tagged either 'collect' or 'policy' in REWARD_SOURCES "
                         f"(when the training loop computes it), has tags {sorted(tags)}")
    return stages[0]


@dataclass
class GroupScores:
    """One group of G samples on its way through the pipeline (what a shaping term reads)."""

    problem: Problem | None
    samples: list[Sample]
    verdicts: list[Verdict]
    correct: Tensor
    """[G] the verdicts as 1 / 0 (after the noise step)."""
    returns: Tensor
    """[G] the episodes' returns (the verdict for a single turn; after the noise step: the flipped verdict)."""
    lengths: Tensor
    """[G] tokens the policy generated."""
    max_new_tokens: int
    """``rollout.max_new_tokens``: the length budget."""
    reward: Tensor | None = None
    """[G] the reward so far (None before the scaling)."""
    keep: Tensor | None = None
    """[G] bool: samples a reward source keeps (None: all)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The reward source's diagnostics for this group."""
    pass_signal: Tensor | None = None
    """[G] what the difficulty filter's running pass rate counts: the policy's own verdicts (0 for a guided group),
    or a collected source's rewards."""
    sourced: bool = False
    """Whether a reward source other than the verifier set the reward."""
    parts: dict[str, Tensor] = field(default_factory=dict)
    """With a rubric (``reward.functions``): each function's [G] values, unweighted, by name."""
    part_errors: dict[str, int] = field(default_factory=dict)
    """With a rubric: each function's calls that raised (scored 0)."""

    @property
    def filter_signal(self) -> Tensor:
        """[G] what DAPO's dynamic sampling counts: the verdicts (Eq. 11: 0 < #correct < G, not the shaped reward),
        or the rewards of a source other than the verifier (there may be no verdict to count)."""
        return self.reward if self.sourced else self.correct

    @classmethod
    def of(cls, problem: Problem | None, samples: Sequence[Sample], max_new_tokens: int) -> GroupScores:
        """The base score of a group: each sample's verdict and return."""
        verdicts = [s.verdict for s in samples]
        if any(v is None for v in verdicts):
            raise ValueError("every sample needs its verdict (Sample.verdict) before its reward is computed")
        return cls(problem, list(samples), verdicts, correct=torch.tensor([float(v.correct) for v in verdicts]),
                   returns=torch.tensor([float(s.env_return) for s in samples]),
                   lengths=torch.tensor([float(s.num_tokens) for s in samples]), max_new_tokens=max_new_tokens)


class RewardPipeline:
    """The steps of the module docstring for one run's ``reward`` section (see the module docstring)."""

    def __init__(self, settings: RewardConfig, *, max_new_tokens: int, seed: int = 0,
                 task_functions: dict[str, Sequence[Any]] | None = None):
        """``task_functions``: a task mixture's own rubrics by task label (a problem tagged with one of them in
        ``metadata["task"]`` is scored by it; the others by ``reward.functions``)."""
        self.settings, self.max_new_tokens, self.seed = settings, max_new_tokens, seed
        self.stage = source_stage(settings.source)
        self.shaping = [(REWARD_SHAPING.get(name), dict(opts or {})) for name, opts in settings.shaping.items()]
        self.rubric = build_rubric(settings.functions)
        self.task_rubrics = {label: build_rubric(specs, key=f"mixture.tasks[{label}].functions")
                             for label, specs in (task_functions or {}).items() if specs}

    def rubric_for(self, problem: Problem | None) -> Rubric:
        """The rubric that scores ``problem``: its mixture task's own, else ``reward.functions`` (maybe empty)."""
        label = (problem.metadata or {}).get(TASK_KEY) if problem is not None else None
        return self.task_rubrics.get(label, self.rubric)

    # ------------------------------------------------------------------ at collection, per group
    def score_group(self, problem: Problem, samples: Sequence[Sample], *, noise: torch.Generator,
                    key: Any = 0, answer_key: Callable[[str | None], Any] | None = None,
                    guided: bool = False) -> GroupScores:
        """One group's rewards: base score, noise, scaling, a collected source, shaping.

        ``noise`` draws the flips (one generator per step: resume-exact); ``key`` seeds a seeded source
        (``random``); ``answer_key`` canonicalises answers for the answer-reading sources; ``guided``: the
        group was guided (its pass signal for the difficulty filter is 0).
        """
        g = GroupScores.of(problem, samples, self.max_new_tokens)
        g.pass_signal = torch.zeros_like(g.correct) if guided else g.correct
        self.noise(g, noise)
        self.scale(g)
        if self.stage == "collect" and self.settings.source != "verifier":
            self.collected_source(g, key, answer_key)
        g.reward = self.shape(g, g.reward)
        return g

    def rubric_parts(self, problem: Problem, samples: Sequence[Sample]) -> dict[str, Tensor]:
        """Each rubric function's [G] values on one group of evaluation samples (their verdicts set; no noise):
        what the held-out evaluations log beside accuracy (e.g. a learned RM's score against the verified
        accuracy, the over-optimisation curve)."""
        return self.rubric_for(problem).score(GroupScores.of(problem, samples, self.max_new_tokens)).parts

    def noise(self, g: GroupScores, generator: torch.Generator) -> None:
        """Flip the verdicts with ``reward.flip_false_positive`` / ``flip_false_negative`` (the flipped verdict is
        the return)."""
        s = self.settings
        if s.flip_false_positive or s.flip_false_negative:
            g.correct = flip_rewards(g.correct, s.flip_false_positive, s.flip_false_negative, generator)
            g.returns = g.correct

    def scale(self, g: GroupScores) -> None:
        """The verifier's reward: ``wrong_reward + (correct_reward - wrong_reward) * return``; with a rubric, the
        weighted sum of its functions (their values kept in ``g.parts``)."""
        rubric = self.rubric_for(g.problem)
        if rubric:
            scored = rubric.score(g)
            g.reward, g.parts, g.part_errors = scored.reward, scored.parts, scored.errors
            return
        s = self.settings
        g.reward = s.wrong_reward + (s.correct_reward - s.wrong_reward) * g.returns

    def collected_source(self, g: GroupScores, key: Any, answer_key: Callable | None) -> None:
        """A ``collect`` source's rewards replace the verifier's; its keep mask and diagnostics are recorded.

        Answers are the verdicts' ``extracted`` (through ``answer_key``); the verdicts and the reference are
        passed only when the problem has a reference answer, so label diagnostics (TTRL's pseudo-label
        accuracy) are measured against the true label and are absent on unlabelled problems.
        """
        name, problem = self.settings.source, g.problem
        answers = [v.extracted if answer_key is None else answer_key(v.extracted) for v in g.verdicts]
        labelled = problem.answer is not None and str(problem.answer).strip() != ""
        gi = GroupInput([s.text for s in g.samples], reference=problem.answer if labelled else None,
                        verdicts=g.verdicts if labelled or name == "verifier" else None, answers=answers, key=key)
        g.reward, g.keep, g.metrics = compute_group_rewards(name, [gi], **self.settings.source_params)
        g.pass_signal, g.sourced = g.reward, True

    def shape(self, g: GroupScores, reward: Tensor) -> Tensor:
        """``reward`` with every term of ``reward.shaping`` applied, in the order listed."""
        for term, opts in self.shaping:
            reward = term(reward, g, **opts)
        return reward

    # ------------------------------------------------------------------ after collection, on the batch
    def policy_source(self, samples: Sequence[Sample], group_size: int,
                      inputs: Callable[[frozenset[str]], list[GroupInput]]) -> tuple[Tensor, Tensor, dict[str, float]]:
        """A ``policy`` source's rewards for the collected batch, shaped as at collection: ``(rewards [B], keep [B]
        bool, metrics)``.  ``inputs(needs)`` gives one :class:`GroupInput` per consecutive group of
        ``group_size`` samples with the fields the source's entry ``needs`` filled from the policy."""
        name = self.settings.source
        rewards, keep, metrics = compute_group_rewards(name, inputs(REWARD_SOURCES.entry(name).needs),
                                                       **self.settings.source_params)
        if self.shaping:
            parts = []
            for i in range(0, len(samples), group_size):
                g = GroupScores.of(None, samples[i:i + group_size], self.max_new_tokens)
                parts.append(self.shape(g, rewards[i:i + group_size]))
            rewards = torch.cat(parts)
        return rewards, keep, metrics


def apply_keep(advantages: Tensor, keep: Tensor | None) -> Tensor:
    """Advantage 0 for samples a reward source or filter dropped (``keep`` [B] bool; None keeps all)."""
    if keep is None or bool(keep.all()):
        return advantages
    k = keep.to(advantages.dtype)
    return advantages * (k[:, None] if advantages.dim() == 2 else k)


_RUBRICS: dict[str, Rubric] = {}


TASK_KEY = "task"
"""``Problem.metadata`` key of a mixture problem's task label (rlvr.tasks.mixture.TASK_KEY)."""


def build_rubric(specs: Sequence[Any], key: str = "reward.functions") -> Rubric:
    """The rubric of a list of reward-function entries (empty when none are listed), built once per distinct list
    in a process (collection builds a pipeline every step)."""
    if not specs:
        return Rubric([])
    cache_key = repr([f.model_dump() for f in specs])
    if cache_key not in _RUBRICS:
        _RUBRICS[cache_key] = Rubric.from_specs(specs, key=key)
    return _RUBRICS[cache_key]


def finite_means(parts: dict[str, Tensor]) -> dict[str, float]:
    """Each named part's mean over its finite values (a weight-0 function may return NaN; a mixture task's rubric
    may lack a part another's has), NaN when it has none."""
    out = {}
    for name, v in parts.items():
        finite = v[torch.isfinite(v)]
        out[name] = float(finite.mean()) if finite.numel() else math.nan
    return out


def part_metrics(parts: dict[str, Tensor], errors: dict[str, int]) -> dict[str, float]:
    """``reward/<name>``: each rubric function's mean value over the batch (:func:`finite_means`);
    ``reward/<name>/errors``: its calls that raised, when any did."""
    row: dict[str, float] = {}
    for name, mean in finite_means(parts).items():
        row[f"reward/{name}"] = mean
        if errors.get(name):
            row[f"reward/{name}/errors"] = float(errors[name])
    return row


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the rows that have it (groups where a diagnostic is undefined leave it out)."""
    sums, counts = {}, {}
    for row in rows:
        for k, v in row.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}
