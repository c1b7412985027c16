"""The policy's no-grad passes that feed reward sources computed from the policy (``reward.source`` tagged
``policy`` in :data:`rlvr.rewards.sources.REWARD_SOURCES`).

A source's registry entry ``needs`` fields of :class:`~rlvr.rewards.sources.GroupInput`; each is filled by
an entry of :data:`POLICY_INPUTS` (its tags name the fields it fills).  The built-in passes, on the
collated batch, with no gradient, in micro-batches of ``train.micro_batch_size`` rows:

* ``token_self_certainty`` (INTUITOR): per completion token ``KL(U || p) = logsumexp(z) - mean(z) - log V``
  of the policy's logits ``z`` (divided by ``rollout.temperature``, the learner's policy), with the
  completion mask.  Only two reductions of each micro-batch's logits are kept, never a [B, T, V] tensor
  for the whole batch.
* ``reference_logprobs`` (VeriFree / RLPR): sample i's reasoning is its text up to the *last* ``\\boxed``
  (the whole text when it wrote none); the policy then scores ``prompt + reasoning + "\\boxed{" +
  reference`` and the log-probs of the reference's tokens (encoded on their own, without special tokens)
  are the source's ``reference_logprobs``.  The debiasing term scores ``prompt + "\\boxed{" + reference``
  (no reasoning) once per group.  The reasoning is re-encoded from text (not cut from the sampled ids),
  so a token merged across the cut is split there.

A new policy-computed source that needs another quantity registers its pass here, in its own file::

    @POLICY_INPUTS.register("answer_entropy", tags={"answer_entropy"})
    def answer_entropy(probe: PolicyProbe, samples, batch) -> list[dict]:
        ...   # one {field: value} per group
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from rlvr.learner.batching import collate, policy_logprobs
from rlvr.learner.settings import LearnerSettings
from rlvr.learner.update import per_token_pass
from rlvr.registry import NoParams, Registry
from rlvr.rewards.sources import GroupInput, token_self_certainty
from rlvr.types import Batch, Problem, Sample

__all__ = ["POLICY_INPUTS", "PolicyProbe", "reasoning_before_answer", "self_certainty_pass",
           "certainty_and_logit_pass", "reference_logprob_pass"]

ANSWER_MARK = "\\boxed"

POLICY_INPUTS: Registry[Callable[..., list[dict[str, Any]]]] = Registry("policy input")
"""Passes of the policy that fill :class:`GroupInput` fields: ``fn(probe, samples, batch) -> [{field: value}]``
(one mapping per group); an entry's tags are the fields it fills."""


@dataclass
class PolicyProbe:
    """The policy and what its passes need: the learner's settings, the device, the tokenizer, the problems."""

    model: Any
    tokenizer: Any
    settings: LearnerSettings
    device: Any
    pad_id: int
    group_size: int
    problems: dict[str, Problem]

    def group_inputs(self, needs: frozenset[str], samples: Sequence[Sample], batch: Batch) -> list[GroupInput]:
        """One :class:`GroupInput` per consecutive group of ``group_size`` samples, with the ``needs`` fields
        filled by the :data:`POLICY_INPUTS` passes that provide them."""
        G = self.group_size
        groups = [GroupInput([s.text for s in samples[g:g + G]]) for g in range(0, len(samples), G)]
        filled: set[str] = set()
        for need in sorted(needs):
            if need in filled:
                continue
            providers = [n for n in POLICY_INPUTS.names() if need in POLICY_INPUTS.entry(n).tags]
            if not providers:
                raise ValueError(f"no pass of the policy provides {need!r} (rlvr.learner.passes.POLICY_INPUTS)")
            entry = POLICY_INPUTS.entry(providers[0])
            for group, fields in zip(groups, entry.obj(self, samples, batch)):
                for k, v in fields.items():
                    setattr(group, k, v)
            filled |= entry.tags
        return groups


def reasoning_before_answer(text: str, mark: str = ANSWER_MARK) -> str:
    """``text`` up to (not including) the last ``mark``; the whole text when ``mark`` is absent."""
    i = text.rfind(mark)
    return text if i < 0 else text[:i]


def _eval_pass(model, batch: Batch, micro_batch_size: int, device, fn) -> torch.Tensor:
    was = model.training
    model.eval()
    try:
        return per_token_pass(batch, micro_batch_size, device, fn)
    finally:
        model.train(was)


def _completion_logits(model, mb: Batch, start: int) -> torch.Tensor:
    """The logits predicting each completion token of the micro-batch, [b, T' - start, V]."""
    T = mb.input_ids.shape[1]
    position_ids = (mb.attention_mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=position_ids,
                 use_cache=False, logits_to_keep=T - start + 1).logits[:, :-1, :]


def self_certainty_pass(model, batch: Batch, settings: LearnerSettings, device) -> torch.Tensor:
    """Per-token self-certainty ``KL(U || p)`` of the policy at every completion position, [B, T] (no grad)."""
    temp = settings.temperature or 1.0

    def fn(mb, start):
        return token_self_certainty(_completion_logits(model, mb, start), temperature=temp)

    return _eval_pass(model, batch, settings.micro_batch_size, device, fn)


def certainty_and_logit_pass(model, batch: Batch, settings: LearnerSettings,
                             device) -> tuple[torch.Tensor, torch.Tensor]:
    """From one forward pass (no grad): the per-token self-certainty ``KL(U || p)`` and the raw logit of each
    generated token at every completion position, [B, T] each (UCAS's response- and token-level certainty)."""
    temp = settings.temperature or 1.0

    def fn(mb, start):
        logits = _completion_logits(model, mb, start)
        raw = logits.float().gather(-1, mb.input_ids[:, start:, None]).squeeze(-1)
        return torch.stack([token_self_certainty(logits, temperature=temp), raw], dim=-1)

    both = _eval_pass(model, batch, settings.micro_batch_size, device, fn)
    return both[..., 0], both[..., 1]


def _reference_batch(samples: Sequence[Sample], problems: dict[str, Problem], tokenizer, G: int, pad_id: int):
    """The rows the reference likelihood scores: per group, G rows ``prompt + reasoning_i + \\boxed{ + ref`` and
    one row ``prompt + \\boxed{ + ref``; the completion mask marks the reference's tokens only."""
    rows, lengths = [], []
    enc = lambda t: list(tokenizer.encode(t, add_special_tokens=False))  # noqa: E731
    for g in range(0, len(samples), G):
        group = samples[g:g + G]
        pid = group[0].problem_id
        problem = problems.get(pid)
        ref = None if problem is None or problem.answer is None else str(problem.answer).strip()
        if not ref:
            raise ValueError(f"reward.source=reference_likelihood: problem {pid!r} has no reference answer")
        ref_ids = enc(ref)
        lengths.append(len(ref_ids))
        for s in list(group) + [None]:
            prefix = enc((reasoning_before_answer(s.text) if s is not None else "") + ANSWER_MARK + "{")
            ids = prefix + ref_ids
            rows.append(Sample(pid, list(group[0].prompt_ids), ids, [0.0] * len(ids), "", "stop",
                               mask=[0] * len(prefix) + [1] * len(ref_ids)))
    return collate(rows, torch.zeros(len(rows)), pad_id), lengths


def reference_logprob_pass(model, samples, problems, tokenizer, settings: LearnerSettings, group_size: int, device,
                           pad_id: int):
    """Per group: ``(reference_logprobs [G, L], no-reasoning log-probs [L])`` under the policy (no grad)."""
    G = group_size
    batch, lengths = _reference_batch(samples, problems, tokenizer, G, pad_id)
    temp = settings.temperature or 1.0
    lp = _eval_pass(model, batch, settings.micro_batch_size, device, lambda mb, start: policy_logprobs(
        model, mb.input_ids, mb.attention_mask, start, temp)[0])
    m = batch.completion_mask.bool()
    out = []
    for k, L in enumerate(lengths):
        block = [lp[i][m[i]] for i in range(k * (G + 1), (k + 1) * (G + 1))]
        if any(len(b) != L for b in block):  # pragma: no cover - collate keeps every reference token
            raise RuntimeError("reference tokens lost while batching")
        out.append((torch.stack(block[:G]), block[G]))
    return out


@POLICY_INPUTS.register("token_self_certainty", params=NoParams, tags={"token_self_certainty", "mask"})
def _self_certainty_inputs(probe: PolicyProbe, samples: Sequence[Sample], batch: Batch) -> list[dict[str, Any]]:
    """INTUITOR's per-token self-certainty of every completion token, with the completion mask."""
    sc = self_certainty_pass(probe.model, batch, probe.settings, probe.device)
    mask, G = batch.completion_mask, probe.group_size
    return [{"token_self_certainty": sc[g:g + G], "mask": mask[g:g + G]} for g in range(0, len(samples), G)]


@POLICY_INPUTS.register("reference_logprobs", params=NoParams,
                        tags={"reference_logprobs", "reference_logprobs_no_reasoning"})
def _reference_inputs(probe: PolicyProbe, samples: Sequence[Sample], batch: Batch) -> list[dict[str, Any]]:
    """The reference answer's log-probs after each sample's reasoning, and without reasoning (VeriFree / RLPR)."""
    per_group = reference_logprob_pass(probe.model, samples, probe.problems, probe.tokenizer, probe.settings,
                                       probe.group_size, probe.device, probe.pad_id)
    return [{"reference_logprobs": lp, "reference_logprobs_no_reasoning": lp0} for lp, lp0 in per_group]
