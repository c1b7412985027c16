"""Supervised fine-tuning in the learner: examples rendered to token ids with a loss mask, and the masked-NLL
update with the RL learner's memory options (micro-batches or token-packed rows, log-probs from the last hidden
states in chunks, activation checkpointing, bf16 autocast, gradient clipping).

Rendering (:func:`encode_example`) matches what the policy sees at rollout and evaluation time:

- ``prompt`` + ``completion``: the prompt is :func:`rlvr.engines.hf.format_prompt` of a problem with that prompt
  and the task's system prompt (the rollout engine's own rendering, generation prompt included); the completion
  is its text's ids (no special tokens) followed by the end-of-sequence token the sampler stops at.  Loss on the
  completion and that token.
- ``messages``: everything before the first assistant message is the prompt (rendered as above); every later
  message is appended as the chat template renders it, each turn's text the difference between the renderings
  of the conversation before and after it.  Loss on each assistant message's content up to and including the
  end-of-sequence token; none on the template's turn headers, on what follows the end-of-turn token (a newline)
  or on the other roles' turns.

The loss (:func:`masked_nll`) is the mean negative log-likelihood over the loss-masked tokens of the whole
optimizer batch: ``L = -(1 / sum_t m_t) sum_t m_t log p(x_t | x_<t)``; prompt tokens have ``m_t = 0`` and carry
no loss (their log-probabilities are not even computed: the forward keeps only the completion positions).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Sequence

import torch

from rlvr.engines.hf import format_prompt
from rlvr.learner.batching import collate, packed_logprobs, policy_logprobs, token_budget_chunks
from rlvr.learner.guards import require_finite_norm
from rlvr.learner.update import clip_gradients, enable_activation_checkpointing, sub_batch
from rlvr.tasks.jsonl import DatasetError
from rlvr.tasks.sft_data import SFTExample
from rlvr.types import Batch, Problem, Sample

__all__ = ["SFTSettings", "encode_example", "encode_examples", "masked_nll", "sft_batch", "supervised_update",
           "heldout_nll"]


@dataclass(frozen=True, kw_only=True)
class SFTSettings:
    """What the supervised update reads; each field names its config key (``train.*`` of an SFT run)."""

    micro_batch_size: int = 8
    """``train.micro_batch_size``: rows per forward/backward pass."""
    micro_batch_tokens: int = 0
    """``train.micro_batch_tokens``: rows packed into micro-batches of this many tokens (0: padded rows)."""
    logprob_chunk_size: int = 0
    """``train.logprob_chunk_size``: log-probs from the last hidden states this many tokens at a time (0: off)."""
    activation_checkpointing: bool = False
    """``train.activation_checkpointing``: recompute each decoder layer in the backward."""
    autocast: str = "none"
    """``train.autocast``: ``bfloat16`` runs the forward/backward under bf16 autocast."""
    max_grad_norm: float = 1.0
    """``train.max_grad_norm``: gradient clipping norm (0: none)."""


def _eos_id(tokenizer) -> int:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token: SFT completions end with it (the sampler's stop token)")
    return int(eos)


def _enc(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _render(tokenizer, messages, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def _message_turns(tokenizer, ex: SFTExample, msgs: list[dict], first: int) -> tuple[list[int], list[int]]:
    """Ids and loss mask of ``msgs[first:]`` as the chat template appends them to the rendered prompt."""
    ids: list[int] = []
    mask: list[int] = []
    eos_text = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):  # a base model: plain text, as format_prompt renders it
        for m in msgs[first:]:
            if m["role"] == "assistant":
                part = _enc(tokenizer, m["content"]) + [_eos_id(tokenizer)]
                ids += part
                mask += [1] * len(part)
            else:
                part = _enc(tokenizer, "\n\n" + m["content"] + "\n")
                ids += part
                mask += [0] * len(part)
        return ids, mask
    before = _render(tokenizer, msgs[:first], True)
    for j in range(first, len(msgs)):
        gen = j + 1 < len(msgs) and msgs[j + 1]["role"] == "assistant" and msgs[j]["role"] != "assistant"
        after = _render(tokenizer, msgs[:j + 1], gen)
        if not after.startswith(before):
            raise DatasetError(f"{ex.where}: the chat template renders the conversation before message {j} "
                               "differently once that message follows it; this template cannot be trained turn "
                               "by turn (give prompt/completion pairs instead)")
        seg = after[len(before):]
        if msgs[j]["role"] == "assistant":
            head = ""
            k = seg.find(msgs[j]["content"]) if msgs[j]["content"] else -1
            if k > 0:  # a header the template writes inside the turn (none for ChatML after the generation prompt)
                head, seg = seg[:k], seg[k:]
            cut = seg.find(eos_text) + len(eos_text) if eos_text and eos_text in seg else len(seg)
            body, tail = seg[:cut], seg[cut:]
            h, b, t = _enc(tokenizer, head), _enc(tokenizer, body), _enc(tokenizer, tail)
            if not eos_text or eos_text not in body:  # the template writes no end token: add the sampler's
                b.append(_eos_id(tokenizer))
            ids += h + b + t
            mask += [0] * len(h) + [1] * len(b) + [0] * len(t)
        else:
            part = _enc(tokenizer, seg)
            ids += part
            mask += [0] * len(part)
        before = after
    return ids, mask


def encode_example(tokenizer, ex: SFTExample, system_prompt: str | None = None,
                   max_length: int = 0) -> Sample | None:
    """``ex`` as a :class:`Sample` (prompt ids; completion ids and their loss ``mask``, None when every
    completion token carries loss), rendered as the module docstring says.  With ``max_length`` > 0 the
    completion is cut so the row holds at most that many tokens; an example whose prompt alone fills it is
    None (left out)."""
    if ex.messages:
        msgs = Problem(ex.id, messages=[dict(m) for m in ex.messages]).to_messages(system_prompt)
        first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        prompt_ids = format_prompt(tokenizer, Problem(ex.id, messages=msgs[:first]))
        completion, mask = _message_turns(tokenizer, ex, msgs, first)
        while mask and not mask[-1]:  # nothing after the last trained token is needed
            completion.pop()
            mask.pop()
    else:
        prompt_ids = format_prompt(tokenizer, Problem(ex.id, prompt=ex.prompt or ""), system_prompt)
        completion = _enc(tokenizer, ex.completion or "") + [_eos_id(tokenizer)]
        mask = [1] * len(completion)
    if max_length > 0 and len(prompt_ids) + len(completion) > max_length:
        room = max_length - len(prompt_ids)
        if room <= 0 or not any(mask[:room]):
            return None
        completion, mask = completion[:room], mask[:room]
    return Sample(ex.id, list(prompt_ids), completion, [0.0] * len(completion), ex.completion or "", "stop",
                  mask=None if all(mask) else mask, info={"weight": ex.weight} if ex.weight != 1.0 else {})


def encode_examples(tokenizer, examples: Sequence[SFTExample], system_prompt: str | None = None,
                    max_length: int = 0) -> tuple[list[Sample], int]:
    """Every example encoded; returns ``(samples, how many were left out for max_length)``."""
    out, dropped = [], 0
    for ex in examples:
        s = encode_example(tokenizer, ex, system_prompt, max_length)
        if s is None:
            dropped += 1
        else:
            out.append(s)
    return out, dropped


def masked_nll(logp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(-sum_t m_t log p_t, sum_t m_t)`` of per-token log-probs ``logp`` and loss mask ``mask`` (same shape).

    The SFT loss of a batch is the first over the second summed over its micro-batches (mean NLL per
    loss-masked token, the token-level cross-entropy of supervised fine-tuning); a position with ``m_t = 0``
    contributes nothing to either, so its target has no gradient.
    """
    m = mask.to(logp.dtype)
    return -(logp * m).sum(), m.sum()


def sft_batch(samples: Sequence[Sample], pad_id: int) -> Batch:
    """The padded batch of encoded examples (prompts left-padded, completions right-padded; the loss mask is the
    batch's ``completion_mask``; each row's loss weight, ``info["weight"]`` or 1, in ``advantages``)."""
    weights = torch.tensor([float(s.info.get("weight", 1.0)) for s in samples])
    return collate(list(samples), weights, pad_id)


def _chunks(batch: Batch, s: SFTSettings) -> list[torch.Tensor]:
    rows = torch.arange(batch.input_ids.shape[0])
    if s.micro_batch_tokens > 0:
        return token_budget_chunks(rows, batch.attention_mask.sum(1), s.micro_batch_tokens)
    return list(rows.split(s.micro_batch_size))


def _logprobs(model, mb: Batch, start: int, s: SFTSettings) -> torch.Tensor:
    fn = packed_logprobs if s.micro_batch_tokens > 0 else policy_logprobs
    return fn(model, mb.input_ids, mb.attention_mask, start, 1.0, chunk_size=s.logprob_chunk_size)[0]


def supervised_update(model, optimizer, samples: Sequence[Sample], settings: SFTSettings,
                      pad_id: int) -> dict[str, float]:
    """One optimizer step of mean (weighted) NLL over the loss-masked tokens of ``samples``, gradients accumulated
    over micro-batches (each weighted by its share of the batch's loss tokens); returns ``loss`` (that mean, before
    the step), ``grad_norm`` (before clipping), ``tokens`` (loss tokens) and ``seqs``.  The caller zeroes
    nothing: gradients are set to None before and after."""
    s = settings
    batch = sft_batch(samples, pad_id)
    total = float(batch.completion_mask.sum())
    if total <= 0:
        raise ValueError("an SFT batch without a single loss token")
    if s.activation_checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    device = next(model.parameters()).device
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if s.autocast == "bfloat16" else nullcontext()
    optimizer.zero_grad(set_to_none=True)
    nll_sum = 0.0
    for chunk in _chunks(batch, s):
        mb, start = sub_batch(batch, chunk, device)
        with amp:
            logp = _logprobs(model, mb, start, s)
        # each row's weight scales its tokens' NLL; the normaliser stays the batch's loss tokens: reward-weighted
        # regression, sum_i w_i sum_t -log p / N (every weight 1: plain SFT)
        nll, _ = masked_nll(logp.float(), mb.completion_mask[:, start:] * mb.advantages[:, None])
        (nll / total).backward()
        nll_sum += float(nll.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = clip_gradients(params, s.max_grad_norm)
    require_finite_norm(grad_norm, "policy")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": nll_sum / total, "grad_norm": grad_norm, "tokens": int(total), "seqs": len(samples)}


@torch.no_grad()
def heldout_nll(model, samples: Sequence[Sample], settings: SFTSettings, pad_id: int,
                batch_rows: int = 32) -> dict[str, float]:
    """Mean NLL per loss token of ``samples`` under ``model`` (eval mode, no gradient): ``{"loss", "tokens",
    "ppl"}`` (``ppl = exp(loss)``)."""
    import math

    was = model.training
    model.eval()
    device = next(model.parameters()).device
    nll_sum = tokens = 0.0
    try:
        for i in range(0, len(samples), batch_rows):
            batch = sft_batch(samples[i:i + batch_rows], pad_id)
            for chunk in _chunks(batch, settings):
                mb, start = sub_batch(batch, chunk, device)
                nll, n = masked_nll(_logprobs(model, mb, start, settings).float(), mb.completion_mask[:, start:])
                nll_sum += float(nll)
                tokens += float(n)
    finally:
        model.train(was)
    loss = nll_sum / max(tokens, 1.0)
    return {"loss": loss, "tokens": int(tokens), "ppl": math.exp(min(loss, 50.0))}
