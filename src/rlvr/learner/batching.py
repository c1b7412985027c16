"""Turn sampled completions into padded tensors, and run the learner's forward pass.

Layout of one row:  [pad ... pad | prompt tokens | completion tokens | pad ... pad]
Prompts are left-padded and completions right-padded, so every row's completion
starts at the same column ``P`` (the longest prompt).  The learner therefore only
needs logits for the last ``C + 1`` positions (``logits_to_keep``), which skips
the LM head on prompt tokens.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Sequence

import torch

from rlvr.algorithms import entropy_from_logits, selective_log_softmax
from rlvr.models.value_head import lm_head_inputs
from rlvr.types import Batch, Sample

__all__ = ["collate", "policy_logprobs"]


def collate(samples: Sequence[Sample], advantages: torch.Tensor, pad_id: int) -> Batch:
    """Pad ``samples`` into a :class:`Batch`; ``sampler_logprobs`` are the sampler's log-probs.

    A multi-turn episode's ``mask`` becomes its row of ``completion_mask``: the loss,
    KL, entropy and every per-token estimator see only the policy's own tokens.
    """
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    P = max(len(s.prompt_ids) for s in samples)
    C = max(max(len(s.completion_ids) for s in samples), 1)
    B = len(samples)
    input_ids = torch.full((B, P + C), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, P + C), dtype=torch.long)
    completion_mask = torch.zeros((B, P + C), dtype=torch.float32)
    sampler_logprobs = torch.zeros((B, P + C), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        input_ids[i, P - p:P] = torch.tensor(s.prompt_ids)
        attention_mask[i, P - p:P + c] = 1
        if c:
            input_ids[i, P:P + c] = torch.tensor(s.completion_ids)
            completion_mask[i, P:P + c] = 1 if s.mask is None else torch.tensor(s.mask, dtype=torch.float32)
            sampler_logprobs[i, P:P + c] = torch.tensor(s.logprobs, dtype=torch.float32)
    return Batch(input_ids, attention_mask, completion_mask, sampler_logprobs, advantages.float())


def completion_start(batch: Batch) -> int:
    """Column where completions start (the same for every row by construction)."""
    cols = batch.completion_mask.any(0).nonzero()
    return int(cols[0]) if len(cols) else batch.input_ids.shape[1]


def policy_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                    temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                    return_hidden: bool = False):
    """Per-token log p(token_t | tokens_<t) for columns ``start:``, under logits / temperature.

    Returns ``(logp [B, T - start], entropy [B, T - start] or None)``; columns
    before ``start`` are not computed.  The entropy is detached unless
    ``entropy_grad`` (needed for an entropy bonus).  With ``return_hidden`` a
    third item is the LM head's input at the same positions, [B, T - start, H]
    (in the autograd graph; a shared value head reads it).
    """
    T = input_ids.shape[1]
    keep = T - start + 1  # logits at positions start-1 .. T-2 predict tokens start .. T-1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with lm_head_inputs(model) if return_hidden else nullcontext() as rec:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False, logits_to_keep=keep)
    logits = out.logits[:, :-1, :].float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = selective_log_softmax(logits, input_ids[:, start:])
    ent = None
    if with_entropy and entropy_grad:
        ent = entropy_from_logits(logits)
    elif with_entropy:
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach())
    if return_hidden:
        return logp, ent, rec.hidden[:, -keep:-1]
    return logp, ent
