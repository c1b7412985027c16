"""Reward sources and process rewards in the RL recipe (what :meth:`RLRecipe.advantages` calls).

The sources that read only texts, verdicts and answers (``verifier``,
``majority_vote``, ``random``, ``format_only``) are computed when the rollouts are
collected (:func:`rlvr.rollout.collect.collect_rollouts`).  The two that need the
policy's own forward pass are computed here, on the collated batch, with no
gradient, in micro-batches of ``train.micro_batch_size`` rows:

* ``self_certainty`` (INTUITOR): per completion token ``KL(U || p) = logsumexp(z) -
  mean(z) - log V`` of the policy's logits ``z`` (divided by ``rollout.temperature``,
  the learner's policy), averaged over the policy's tokens of the completion.  Only
  two reductions of each micro-batch's logits are kept, never a [B, T, V] tensor
  for the whole batch.
* ``reference_likelihood`` (VeriFree / RLPR): sample i's reasoning is its text up to
  the *last* ``\\boxed`` (the whole text when it wrote none); the policy then scores
  ``prompt + reasoning + "\\boxed{" + reference`` and the log-probs of the
  reference's tokens (encoded on their own, without special tokens) are the source's
  ``reference_logprobs``.  The debiasing term scores ``prompt + "\\boxed{" +
  reference`` (no reasoning) once per group.  The reasoning is re-encoded from text
  (not cut from the sampled ids), so a token merged across the cut is split there.

Process rewards (``reward.process_prm``): each completion is split into steps at
the PRM's delimiter, the PRM scores the steps (:class:`rlvr.search.scorers.ProcessRewardModel`),
each step's last token is found in the completion's tokens
(:func:`rlvr.algorithms.process.step_end_tokens`), and the step scores become
token-level advantages (:func:`shape_advantages`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import torch

from rlvr.algorithms.gae import gae_advantages, masked_whiten
from rlvr.algorithms.process import (
    PROCESS_FILTERS,
    process_advantages,
    process_token_rewards,
    step_end_tokens,
    token_pieces,
)
from rlvr.learner.batching import collate, policy_logprobs
from rlvr.learner.update import per_token_pass
from rlvr.rewards.sources import GroupInput, compute_group_rewards, token_self_certainty
from rlvr.types import Batch, Problem, Sample

__all__ = ["policy_source_rewards", "reasoning_before_answer", "load_process_scorer", "prm_step_inputs",
           "shape_advantages", "apply_keep"]

ANSWER_MARK = "\\boxed"


def reasoning_before_answer(text: str, mark: str = ANSWER_MARK) -> str:
    """``text`` up to (not including) the last ``mark``; the whole text when ``mark`` is absent."""
    i = text.rfind(mark)
    return text if i < 0 else text[:i]


def _eval_pass(model, batch: Batch, cfg, device, fn) -> torch.Tensor:
    was = model.training
    model.eval()
    try:
        return per_token_pass(batch, cfg, device, fn)
    finally:
        model.train(was)


def self_certainty_pass(model, batch: Batch, cfg, device) -> torch.Tensor:
    """Per-token self-certainty ``KL(U || p)`` of the policy at every completion position, [B, T] (no grad)."""
    temp = cfg.rollout.temperature or 1.0

    def fn(mb, start):
        T = mb.input_ids.shape[1]
        position_ids = (mb.attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=position_ids,
                       use_cache=False, logits_to_keep=T - start + 1).logits[:, :-1, :]
        return token_self_certainty(logits, temperature=temp)

    return _eval_pass(model, batch, cfg, device, fn)


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


def reference_logprob_pass(model, samples, problems, tokenizer, cfg, device, pad_id: int):
    """Per group: ``(reference_logprobs [G, L], no-reasoning log-probs [L])`` under the policy (no grad)."""
    G = cfg.rollout.group_size
    batch, lengths = _reference_batch(samples, problems, tokenizer, G, pad_id)
    temp = cfg.rollout.temperature or 1.0
    lp = _eval_pass(model, batch, cfg, device, lambda mb, start: policy_logprobs(
        model, mb.input_ids, mb.attention_mask, start, temp)[0])
    m = batch.completion_mask.bool()
    out = []
    for k, L in enumerate(lengths):
        block = [lp[i][m[i]] for i in range(k * (G + 1), (k + 1) * (G + 1))]
        if any(len(b) != L for b in block):  # pragma: no cover - collate keeps every reference token
            raise RuntimeError("reference tokens lost while batching")
        out.append((torch.stack(block[:G]), block[G]))
    return out


def policy_source_rewards(name: str, params: dict, model, batch: Batch, samples: Sequence[Sample],
                          problems: dict[str, Problem], tokenizer, cfg, device,
                          pad_id: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """``(rewards [B], keep [B] bool, metrics)`` of a source computed from the policy (``self_certainty``,
    ``reference_likelihood``), grouped in consecutive blocks of ``rollout.group_size``."""
    G = cfg.rollout.group_size
    texts = [s.text for s in samples]
    groups: list[GroupInput] = []
    if name == "self_certainty":
        sc = self_certainty_pass(model, batch, cfg, device)
        mask = batch.completion_mask
        for g in range(0, len(samples), G):
            groups.append(GroupInput(texts[g:g + G], token_self_certainty=sc[g:g + G], mask=mask[g:g + G]))
    elif name == "reference_likelihood":
        per_group = reference_logprob_pass(model, samples, problems, tokenizer, cfg, device, pad_id)
        for k, (lp, lp0) in enumerate(per_group):
            groups.append(GroupInput(texts[k * G:(k + 1) * G], reference_logprobs=lp,
                                     reference_logprobs_no_reasoning=lp0))
    else:
        raise ValueError(f"reward source {name!r} is not computed from the policy")
    return compute_group_rewards(name, groups, **params)


def apply_keep(advantages: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Advantage 0 for samples a reward source or filter dropped (``keep`` [B] bool; None keeps all)."""
    if keep is None or bool(keep.all()):
        return advantages
    k = keep.to(advantages.dtype)
    return advantages * (k[:, None] if advantages.dim() == 2 else k)


# --------------------------------------------------------------------------- process rewards
def load_process_scorer(rcfg, device: str = "cpu"):
    """The PRM of ``reward.process_prm`` with its input format from ``rlvr_reward_model.json`` (what ``rlvr rm
    train`` wrote), overridden by ``reward.process_prm_params``; returns ``(scorer, delimiter)``."""
    from rlvr.search.scorers import ProcessRewardModel, check_reward_model_dir

    check_reward_model_dir(rcfg.process_prm, "prm")
    meta_file = Path(rcfg.process_prm) / "rlvr_reward_model.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    opts = {"step_tag": meta.get("step_tag", "ки"), "good": meta.get("good", "+"), "bad": meta.get("bad", "-"),
            "delimiter": meta.get("delimiter", "\n\n")}
    opts.update(rcfg.process_prm_params)
    scorer = ProcessRewardModel(rcfg.process_prm, step_tag=opts["step_tag"], good=opts["good"], bad=opts["bad"],
                                delimiter=opts["delimiter"], device=str(device))
    return scorer, opts["delimiter"]


def prm_step_inputs(scorer, delimiter: str, samples: Sequence[Sample], prompts: dict[str, str], tokenizer,
                    batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(step_scores [B, K], step_ends [B, K], step_mask [B, K])`` of the batch's completions.

    A completion's text is the concatenation of its tokens' pieces
    (:func:`~rlvr.algorithms.process.token_pieces`), so the PRM's steps and the
    step-end tokens are found in the same string; ``step_ends`` are column indices
    of the [B, T] batch (completions start at the longest prompt's length).
    """
    from rlvr.search.scorers import split_steps

    P = max(len(s.prompt_ids) for s in samples)
    scores, ends = [], []
    for s in samples:
        if not s.completion_ids:
            scores.append([]), ends.append([])  # noqa: E702
            continue
        pieces = token_pieces(tokenizer, s.completion_ids)
        steps = split_steps("".join(pieces), delimiter)
        idx = step_end_tokens(pieces, delimiter)
        sc = scorer.score_steps(Problem(s.problem_id, prompt=prompts.get(s.problem_id, "")), steps) if steps else []
        if len(sc) != len(idx):  # pragma: no cover - split_steps and step_end_tokens split alike
            raise RuntimeError(f"{len(sc)} step scores for {len(idx)} step ends")
        scores.append([float(x) for x in sc])
        ends.append([P + i for i in idx])
    B, K = len(samples), max([len(x) for x in scores] + [1])
    step_scores = torch.zeros(B, K)
    step_ends = torch.zeros(B, K, dtype=torch.long)
    step_mask = torch.zeros(B, K, dtype=torch.bool)
    for i, (sc, en) in enumerate(zip(scores, ends)):
        step_scores[i, :len(sc)] = torch.tensor(sc, dtype=step_scores.dtype)
        step_ends[i, :len(en)] = torch.tensor(en, dtype=torch.long)
        step_mask[i, :len(sc)] = True
    return step_scores, step_ends, step_mask


def shape_advantages(rcfg, outcome_adv: torch.Tensor | None, rewards: torch.Tensor, steps: tuple, mask: torch.Tensor,
                     group_size: int, *, values: torch.Tensor | None = None, token_kl: torch.Tensor | None = None,
                     kl_coef: float = 0.0, gae_params: dict | None = None) -> tuple[torch.Tensor, torch.Tensor | None,
                                                                                   dict[str, float]]:
    """Token-level advantages [B, T] with the PRM's step scores (``steps``, from :func:`prm_step_inputs`).

    GRPO family (``values`` None)::

        A_t = outcome_coef * A_est  +  process term of process_advantages(...)      (0 for filtered samples)

    where ``A_est`` is the configured estimator's advantage of the outcome rewards
    ([B] broadcast over the completion, or [B, T]) and the process term is
    :func:`~rlvr.algorithms.process.process_advantages` with ``outcome_coef=0``:
    transforms, the ``process_baseline``, credit (sum | min) and returns-to-go, times
    ``process_coef``.  The filter sees the outcome rewards; its dropped samples get 0.

    PPO (``values`` given): GAE over :func:`~rlvr.algorithms.process.process_token_rewards`
    (credited step rewards on each step's last token, ``outcome_coef * r`` on the
    last token) minus the KL penalty, whitened if ``gae_params['whiten']``; filtered
    samples get advantage 0 (their returns still train the critic).

    Returns ``(advantages [B, T], returns [B, T] or None, metrics)``.
    """
    scores, ends, smask = steps
    transforms = rcfg.process_transform_list()
    m = mask.to(torch.float32)
    keep = PROCESS_FILTERS[rcfg.process_filter](scores, smask, rewards, **rcfg.process_filter_params).bool()
    returns = None
    if values is None:
        proc, info = process_advantages(scores, ends, smask, rewards, group_size, mask, transforms=transforms,
                                        credit=rcfg.process_credit, credit_params=rcfg.process_credit_params,
                                        filter=rcfg.process_filter, filter_params=rcfg.process_filter_params,
                                        baseline=rcfg.process_baseline, outcome_coef=0.0,
                                        process_coef=rcfg.process_coef)
        out = outcome_adv.float()
        out = out * m if out.dim() == 2 else out[:, None] * m
        adv = rcfg.outcome_coef * out * keep[:, None].to(out.dtype) + proc.float()
    else:
        tok = process_token_rewards(scores, ends, smask, mask, rewards, group_size=group_size, transforms=transforms,
                                    credit=rcfg.process_credit, credit_params=rcfg.process_credit_params,
                                    process_coef=rcfg.process_coef, outcome_coef=rcfg.outcome_coef).float()
        if token_kl is not None and kl_coef:
            tok = tok - kl_coef * token_kl.float() * m
        gp = dict(gae_params or {})
        adv, returns = gae_advantages(tok, values.float(), m, gamma=gp.get("gamma", 1.0), lam=gp.get("lam", 1.0))
        if gp.get("whiten", True):
            adv = masked_whiten(adv, m)
        adv = adv * keep[:, None].to(adv.dtype)
        has = smask.any(dim=1)
        info = {"process/kept_share": float(keep.float().mean()),
                "process/min_step_mean": float(torch.where(smask, scores, torch.full_like(scores, math.inf))
                                               .amin(1)[has].mean()) if bool(has.any()) else math.nan}
    info = {k: v for k, v in info.items() if not (isinstance(v, float) and math.isnan(v))}
    info["process/step_score_mean"] = float(scores[smask].mean()) if bool(smask.any()) else 0.0
    info["process/steps_per_sample"] = float(smask.sum(1).float().mean())
    return adv.detach(), returns, info
