"""Reward sources: where a group's reward vector comes from (a verifier, or no label at all).

A reward source turns one *group* (the G samples of one prompt) into a reward
vector [G] plus diagnostics.  Today's behaviour is the ``verifier`` source; the
others train without (or beside) the reference answer:

==================== ==================================================================== =======================
name                 reward of sample i                                                   needs (GroupInput)
==================== ==================================================================== =======================
verifier             the verifier's score                                                 verdicts
majority_vote        1 if its answer equals the group's majority answer (TTRL)            answers
self_certainty       mean over its answer tokens of KL(U || p) (INTUITOR)                 token_self_certainty
reference_likelihood (debiased) mean prob. of the reference answer's tokens after it      reference_logprobs
                     (VeriFree / RLPR)
random               Bernoulli(p), seeded (control)                                       -
format_only          1 if an answer could be extracted (control)                          answers
==================== ==================================================================== =======================

Every source has the same signature, registered in :data:`REWARD_SOURCES`
(options validated when a config loads; ``needs`` tells the caller which
``GroupInput`` fields to fill)::

    source(group: GroupInput, **options) -> SourceResult(rewards [G], metrics {name: float}, keep [G] | None)

``keep`` (optional) marks samples to train on; a source that filters whole
prompts (RLPR's std filter) returns all-False for a dropped group.

The per-token quantities are computed by the caller from the policy's logits
(:func:`token_self_certainty` is the pure function) or log-probs; nothing here
runs a model.  This module sits below the verifiers: answers arrive already
extracted (``Verdict.extracted``, or canonical voting keys such as
``rlvr.evaluate.samples.voting_key`` makes, which the caller should pass as
``answers`` so that ``0.5`` and ``1/2`` vote together).

:meth:`Registry.check` with the run's context refuses configurations that cannot
work, e.g. ``REWARD_SOURCES.check("majority_vote", {}, extracts_answers=False)``
(a label-free reward on a task whose verifier parses no answers), or
``has_reference=False`` with a source that reads the reference.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from rlvr.registry import NoParams, Registry
from rlvr.types import Verdict

__all__ = [
    "GroupInput",
    "SourceResult",
    "REWARD_SOURCES",
    "NON_ANSWER_VERIFIERS",
    "token_self_certainty",
    "verifier_source",
    "majority_vote_source",
    "self_certainty_source",
    "reference_likelihood_source",
    "random_source",
    "format_only_source",
    "majority_answer",
    "compute_group_rewards",
]

NON_ANSWER_VERIFIERS = frozenset({"code_humaneval", "code_stdio", "instruction", "judge", "judge_fallback"})
"""Built-in verifiers that extract no comparable final answer (code runs, instruction checks, judges):
answer-based label-free sources (majority vote, format only) are refused with them."""


@dataclass
class GroupInput:
    """What a reward source may read about one group of G samples (fill what its ``needs`` name)."""

    completions: Sequence[str]
    """The G completion texts."""
    reference: str | None = None
    """The reference answer, when the task has one (label-free sources must not need it)."""
    verdicts: Sequence[Verdict] | None = None
    """The verifier's verdict per sample (score, extracted answer, reason); None when not verified."""
    answers: Sequence[str | None] | None = None
    """Comparable answer per sample (None: no answer found); default: each verdict's ``extracted``."""
    token_self_certainty: Tensor | None = None
    """[G, T] per-token KL(U || p) (:func:`token_self_certainty` of the policy's logits), 0 where masked."""
    mask: Tensor | None = None
    """[G, T] the tokens the per-token statistic is averaged over (INTUITOR: the response; or the answer span)."""
    reference_logprobs: Tensor | None = None
    """[G, L] log p(reference token j | prompt, sample i's reasoning, reference tokens < j)."""
    reference_mask: Tensor | None = None
    """[G, L] which of the L reference positions exist (default all)."""
    reference_logprobs_no_reasoning: Tensor | None = None
    """[L] the same log-probs directly after the prompt with no reasoning (RLPR's debiasing term)."""
    key: Any = 0
    """Identifies this group for seeded sources (e.g. ``(step, prompt_index)``)."""

    @property
    def size(self) -> int:
        return len(self.completions)

    def answer_list(self) -> list[str | None]:
        if self.answers is not None:
            return list(self.answers)
        if self.verdicts is not None:
            return [v.extracted for v in self.verdicts]
        raise ValueError("this reward source needs answers (or verdicts with extracted answers)")


@dataclass
class SourceResult:
    """A source's output for one group."""

    rewards: Tensor
    """[G] float rewards."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Diagnostics to average over the step's groups (``ttrl/label_accuracy``, ...); NaN when undefined."""
    keep: Tensor | None = None
    """[G] bool: samples to train on (None: all)."""


RewardSource = Callable[..., SourceResult]


def _as_vec(values: Sequence[float]) -> Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.get_default_dtype())


# --------------------------------------------------------------------------- verifier
def verifier_source(group: GroupInput) -> SourceResult:
    """The verifier's score of each sample against the reference (rlvr's default, RLVR proper)."""
    if group.verdicts is None:
        raise ValueError("the verifier source needs the verdicts")
    r = _as_vec([v.score for v in group.verdicts])
    return SourceResult(r, {"reward/verifier_accuracy": float((r > 0).float().mean()) if len(r) else math.nan})


def _check_needs_reference(params: dict, *, has_reference: bool | None = None, **_) -> None:
    if has_reference is False:
        raise ValueError("needs reference answers and the task has none; use a label-free source "
                         "(majority_vote, self_certainty) or a task with answers")


# --------------------------------------------------------------------------- majority vote (TTRL)
def majority_answer(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The most common non-None answer and its count; ties go to the answer seen first (None, 0 if none)."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    for a in answers:  # first seen among the tied
        if a is not None and counts[a] == best:
            return a, best
    return None, 0  # pragma: no cover


class MajorityVoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_share: float = Field(0.0, ge=0.0, le=1.0, description="below this majority share the group gets reward 0 "
                                                               "(no confident pseudo-label)")
    wrong_reward: float = Field(0.0, description="reward of samples disagreeing with the majority (or without answer)")


def majority_vote_source(group: GroupInput, *, min_share: float = 0.0, wrong_reward: float = 0.0) -> SourceResult:
    """Test-time RL (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning", Sec. 2): the majority of the
    group's extracted answers is the pseudo-label ``y^``; each sample is rewarded against it::

        y^  = argmax_y  #{i : a_i = y}           (answers a_i; samples without an answer do not vote)
        r_i = 1 if a_i = y^ else wrong_reward

    No reference answer is used.  Diagnostics (NaN where undefined):

    * ``ttrl/majority_share``: ``#{a_i = y^} / G``;
    * ``ttrl/label_accuracy``: 1 if the pseudo-label is right, judged by the verdicts (a sample
      holding ``y^`` is correct) when they are given, else by ``y^ == reference``;
    * ``ttrl/reward_accuracy``: share of samples whose pseudo-reward equals the true one
      (TTRL's "reward accuracy"; needs verdicts);
    * ``ttrl/no_answer_share``: share of samples without an answer.
    """
    answers = group.answer_list()
    G = len(answers)
    label, count = majority_answer(answers)
    share = count / G if G else 0.0
    confident = label is not None and share >= min_share
    agree = [confident and a == label for a in answers]
    r = _as_vec([1.0 if ok else wrong_reward for ok in agree])
    metrics = {"ttrl/majority_share": share, "ttrl/no_answer_share": sum(a is None for a in answers) / G if G else 0.0,
               "ttrl/label_accuracy": math.nan, "ttrl/reward_accuracy": math.nan}
    if group.verdicts is not None:
        truth = [v.correct for v in group.verdicts]
        if label is not None:
            metrics["ttrl/label_accuracy"] = float(any(t for t, a in zip(truth, answers) if a == label))
        else:
            metrics["ttrl/label_accuracy"] = 0.0
        metrics["ttrl/reward_accuracy"] = sum((ok == t) for ok, t in zip(agree, truth)) / G if G else math.nan
    elif group.reference is not None:
        metrics["ttrl/label_accuracy"] = float(label is not None and label.strip() == str(group.reference).strip())
    return SourceResult(r, metrics)


def _check_answers(params: dict, *, verifier: str | None = None, extracts_answers: bool | None = None, **_) -> None:
    if extracts_answers is False or (extracts_answers is None and verifier in NON_ANSWER_VERIFIERS):
        what = f"the verifier {verifier!r}" if verifier else "this task"
        raise ValueError(f"needs parseable final answers, and {what} extracts none (code, instruction and judge "
                         "verifiers compare no answers); use reference_likelihood, self_certainty or the verifier")


# --------------------------------------------------------------------------- self-certainty (INTUITOR)
def token_self_certainty(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-token self-certainty ``KL(U || p)`` from logits [..., V] -> [...] (Zhao et al. 2025, Eq. 4).

    With ``p = softmax(z / tau)`` over a vocabulary of V tokens::

        KL(U || p) = sum_j 1/V log((1/V) / p_j) = logsumexp(z/tau) - mean_j(z_j/tau) - log V

    so a caller needs only two reductions of the logits it already has (log-sum-exp
    and the mean logit), no [T, V] probabilities kept.  0 for a uniform ``p``; large
    when ``p`` is peaked.
    """
    z = logits.float() / temperature
    V = z.shape[-1]
    return torch.logsumexp(z, dim=-1) - z.mean(dim=-1) - math.log(V)


def self_certainty_source(group: GroupInput) -> SourceResult:
    """INTUITOR (Zhao et al. 2025, "Learning to Reason without External Rewards", Eq. 4): the reward is the
    policy's self-certainty over its own answer tokens::

        r_i = 1/|o_i| sum_t KL(U || p_pi(. | q, o_i,<t))     (t over ``mask``)

    from ``group.token_self_certainty`` [G, T] (:func:`token_self_certainty`) averaged over
    ``group.mask`` (all response tokens in the paper; an answer span works too).
    """
    sc = group.token_self_certainty
    if sc is None:
        raise ValueError("self_certainty needs token_self_certainty [G, T]")
    sc = torch.as_tensor(sc, dtype=torch.get_default_dtype())
    m = torch.ones_like(sc) if group.mask is None else torch.as_tensor(group.mask).to(sc.dtype)
    if sc.shape != m.shape or sc.shape[0] != group.size:
        raise ValueError(f"token_self_certainty {tuple(sc.shape)} and mask {tuple(m.shape)} must be [G={group.size}, T]")
    r = (sc * m).sum(-1) / m.sum(-1).clamp(min=1)
    return SourceResult(r, {"reward/self_certainty_mean": float(r.mean()) if len(r) else math.nan})


# --------------------------------------------------------------------------- reference likelihood (VeriFree / RLPR)
class ReferenceLikelihoodParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    aggregate: str = Field("mean_prob", description="mean_prob: mean token probability (RLPR); geo_mean: "
                                                    "exp(mean log-prob); seq_prob: the whole answer's "
                                                    "probability (VeriFree); mean_logprob / seq_logprob: the "
                                                    "mean / sum of its log-probs (log-likelihood rewards; "
                                                    "with clip=false)")
    debias: bool = Field(True, description="subtract the probability of the reference without reasoning (RLPR)")
    clip: bool = Field(True, description="clip the debiased reward to [0, 1] (RLPR)")
    std_threshold: float = Field(0.0, ge=0.0, description="drop the prompt (keep all False) when the group's "
                                                          "reward std is below this (RLPR's std filter; 0: off)")


_AGGREGATES = ("mean_prob", "geo_mean", "seq_prob", "mean_logprob", "seq_logprob")
_LOG_AGGREGATES = ("mean_logprob", "seq_logprob")


def _aggregate_ref(lp: Tensor, m: Tensor, how: str) -> Tensor:
    n = m.sum(-1).clamp(min=1)
    if how == "mean_prob":
        return (lp.exp() * m).sum(-1) / n
    if how == "geo_mean":
        return ((lp * m).sum(-1) / n).exp()
    if how == "seq_prob":
        return (lp * m).sum(-1).exp()
    if how == "mean_logprob":
        return (lp * m).sum(-1) / n
    if how == "seq_logprob":
        return (lp * m).sum(-1)
    raise ValueError(f"aggregate must be one of {_AGGREGATES}, got {how!r}")


def reference_likelihood_source(group: GroupInput, *, aggregate: str = "mean_prob", debias: bool = True,
                                clip: bool = True, std_threshold: float = 0.0) -> SourceResult:
    """The policy's own probability of the reference answer after its reasoning: VeriFree (Zhou et al. 2025,
    "Reinforcing General Reasoning without Verifiers") and RLPR (Yu et al. 2025, "RLPR: Extrapolating RLVR
    to General Domains without Verifiers", Sec. 2)::

        p_i  = 1/|y*| sum_j exp(lp_ij)                     (mean_prob, RLPR's length-normalised reward)
               exp(1/|y*| sum_j lp_ij)                      (geo_mean)
               exp(sum_j lp_ij)                             (seq_prob, VeriFree)
               1/|y*| sum_j lp_ij  or  sum_j lp_ij          (mean_logprob / seq_logprob: the log-likelihood of the
                                                             reference, as the likelihood-based rewards of
                                                             Likelihood-Based Reward Designs compare; in
                                                             (-inf, 0], so only with clip=false; debiased, the
                                                             log-ratio against no reasoning)
        r_i  = clip(p_i - p_0, 0, 1)      with debias       (p_0: the same without reasoning, RLPR Eq. 6)
        keep = std_i(r) >= std_threshold                    (RLPR's std filter: drop prompts whose
                                                             rewards barely vary)

    ``lp_ij = log p(y*_j | prompt, reasoning_i, y*_<j)`` arrive in ``group.reference_logprobs`` [G, L]
    (the caller replaces sample i's answer with the reference and runs the policy), the
    no-reasoning ones in ``group.reference_logprobs_no_reasoning`` [L].  RLPR adapts the
    threshold as an EMA of the std; a fixed threshold is given here (the caller may update it).
    """
    if aggregate not in _AGGREGATES:
        raise ValueError(f"aggregate must be one of {_AGGREGATES}, got {aggregate!r}")
    if aggregate in _LOG_AGGREGATES and clip:
        raise ValueError(f"aggregate={aggregate} is a log-likelihood (at most 0): clipping it to [0, 1] leaves 0 or "
                         "the debiased gain only; set clip=false")
    lp = group.reference_logprobs
    if lp is None:
        raise ValueError("reference_likelihood needs reference_logprobs [G, L]")
    lp = torch.as_tensor(lp, dtype=torch.get_default_dtype())
    if lp.dim() != 2 or lp.shape[0] != group.size:
        raise ValueError(f"reference_logprobs must be [G={group.size}, L], got {tuple(lp.shape)}")
    m = torch.ones_like(lp) if group.reference_mask is None else torch.as_tensor(group.reference_mask).to(lp.dtype)
    p = _aggregate_ref(lp, m, aggregate)
    metrics = {"rlpr/prob_mean": float(p.mean()) if len(p) else math.nan}
    r = p
    if debias:
        base = group.reference_logprobs_no_reasoning
        if base is None:
            raise ValueError("debias=True needs reference_logprobs_no_reasoning [L] (or set debias=false)")
        base = torch.as_tensor(base, dtype=lp.dtype).reshape(1, -1)
        if base.shape[1] != lp.shape[1]:
            raise ValueError(f"reference_logprobs_no_reasoning has {base.shape[1]} positions, the reference "
                             f"has {lp.shape[1]}")
        p0 = _aggregate_ref(base, m[:1], aggregate)[0]
        r = p - p0
        metrics["rlpr/prob_no_reasoning"] = float(p0)
    if clip:
        r = r.clamp(0.0, 1.0)
    keep = None
    if std_threshold > 0:
        std = float(r.std(correction=1)) if len(r) > 1 else 0.0
        ok = std >= std_threshold
        keep = torch.full((len(r),), ok, dtype=torch.bool)
        metrics["rlpr/kept"] = float(ok)
    return SourceResult(r, metrics, keep)


def _check_reference_likelihood(params: dict, **context) -> None:
    if params["aggregate"] not in _AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(_AGGREGATES)}, got {params['aggregate']!r}")
    if params["aggregate"] in _LOG_AGGREGATES and params["clip"]:
        raise ValueError(f"aggregate={params['aggregate']} is a log-likelihood (at most 0): set clip=false (clipping "
                         "to [0, 1] would leave 0 or only the debiased gain)")
    _check_needs_reference(params, **context)


# --------------------------------------------------------------------------- controls
class RandomParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    p: float = Field(0.5, ge=0.0, le=1.0, description="probability of reward 1")
    seed: int = Field(0, description="base seed; each group's draw is seeded by (seed, group key)")


def random_source(group: GroupInput, *, p: float = 0.5, seed: int = 0) -> SourceResult:
    """Control: ``r_i ~ Bernoulli(p)`` independent of the sample (Shao et al. 2025, "Spurious Rewards: Rethinking
    Training Signals in RLVR", random rewards).  Seeded by ``(seed, group.key)``: the same group gets
    the same draw in a rerun."""
    h = hashlib.sha256(repr((int(seed), group.key)).encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
    r = (torch.rand(group.size, generator=gen) < p).to(torch.get_default_dtype())
    return SourceResult(r, {"reward/random_mean": float(r.mean()) if len(r) else math.nan})


def format_only_source(group: GroupInput) -> SourceResult:
    """Control: ``r_i = 1`` if an answer could be extracted from sample i (the format is followed), else 0
    (Shao et al. 2025, "Spurious Rewards", format reward).  With the ``format`` verifier as the task's
    verifier, pass its verdicts and their ``extracted`` answers."""
    answers = group.answer_list()
    r = _as_vec([1.0 if a is not None and str(a).strip() else 0.0 for a in answers])
    return SourceResult(r, {"reward/format_share": float(r.mean()) if len(r) else math.nan})


REWARD_SOURCES: Registry[RewardSource] = Registry("reward source", skip=1)
"""Reward sources by name: ``source(group: GroupInput, **options) -> SourceResult``; ``needs`` lists the
:class:`GroupInput` fields the caller must fill; ``check`` takes the run's context
(``verifier``, ``extracts_answers``, ``has_reference``).  The tag ``collect`` or ``policy`` says when the
training loop computes it (:func:`rlvr.rewards.pipeline.source_stage`): as each group is collected (from
texts, verdicts and answers), or from the policy's forward pass over the collected batch (its ``needs``
filled by the passes registered in :data:`rlvr.learner.passes.POLICY_INPUTS`)."""

REWARD_SOURCES.add("verifier", verifier_source, params=NoParams, needs={"verdicts"}, tags={"collect"},
                   check=_check_needs_reference)
REWARD_SOURCES.add("majority_vote", majority_vote_source, params=MajorityVoteParams, needs={"answers"},
                   tags={"collect", "label_free"}, check=_check_answers)
REWARD_SOURCES.add("self_certainty", self_certainty_source, params=NoParams,
                   needs={"token_self_certainty", "mask"}, tags={"policy", "label_free"})
REWARD_SOURCES.add("reference_likelihood", reference_likelihood_source, params=ReferenceLikelihoodParams,
                   needs={"reference_logprobs", "reference_logprobs_no_reasoning"}, tags={"policy", "verifier_free"},
                   check=_check_reference_likelihood)
REWARD_SOURCES.add("random", random_source, params=RandomParams, tags={"collect", "label_free", "control"})
REWARD_SOURCES.add("format_only", format_only_source, params=NoParams, needs={"answers"},
                   tags={"collect", "label_free", "control"}, check=_check_answers)


def compute_group_rewards(name: str, groups: Sequence[GroupInput], **params: Any) -> tuple[Tensor, Tensor,
                                                                                            dict[str, float]]:
    """Run source ``name`` over consecutive groups: ``(rewards [N], keep [N] bool, metrics)`` with each
    metric the mean over the groups where it is defined (not NaN)."""
    REWARD_SOURCES.validate_params(name, params, key="reward.source_params")
    fn = REWARD_SOURCES[name]
    rewards, keeps, sums, counts = [], [], {}, {}
    for g in groups:
        res = fn(g, **params)
        if res.rewards.shape != (g.size,):
            raise ValueError(f"reward source {name!r} returned shape {tuple(res.rewards.shape)} for a group of {g.size}")
        rewards.append(res.rewards)
        keeps.append(res.keep if res.keep is not None else torch.ones(g.size, dtype=torch.bool))
        for k, v in res.metrics.items():
            if v is not None and not math.isnan(v):
                sums[k] = sums.get(k, 0.0) + float(v)
                counts[k] = counts.get(k, 0) + 1
    metrics = {k: sums[k] / counts[k] for k in sums}
    if not rewards:
        return torch.zeros(0), torch.zeros(0, dtype=torch.bool), metrics
    return torch.cat(rewards), torch.cat(keeps), metrics
