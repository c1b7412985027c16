"""Turn sampled completions into padded tensors, and run the learner's forward pass.

Layout of one row:  [pad ... pad | prompt tokens | completion tokens | pad ... pad]
Prompts are left-padded and completions right-padded, so every row's completion
starts at the same column ``P`` (the longest prompt).  The learner therefore only
needs logits for the last ``C + 1`` positions (``logits_to_keep``), which skips
the LM head on prompt tokens.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import Sequence

import torch

from rlvr.algorithms import entropy_from_logits, selective_log_softmax
from rlvr.algorithms.logprobs import fused_linear_logprobs
from rlvr.models.value_head import lm_head_inputs
from rlvr.types import Batch, Sample

__all__ = ["collate", "policy_logprobs", "chunked_head"]


def collate(samples: Sequence[Sample], advantages: torch.Tensor, pad_id: int) -> Batch:
    """Pad ``samples`` into a :class:`Batch`; ``sampler_logprobs`` are the sampler's log-probs."""
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
            completion_mask[i, P:P + c] = 1
            sampler_logprobs[i, P:P + c] = torch.tensor(s.logprobs, dtype=torch.float32)
    return Batch(input_ids, attention_mask, completion_mask, sampler_logprobs, advantages.float())


def completion_start(batch: Batch) -> int:
    """Column where completions start (the same for every row by construction)."""
    cols = batch.completion_mask.any(0).nonzero()
    return int(cols[0]) if len(cols) else batch.input_ids.shape[1]


def chunked_head(model) -> tuple[torch.nn.Module, torch.Tensor] | str:
    """``(decoder, lm_head weight)`` when log-probs can be computed from the last hidden states, else why not.

    The chunked path (:func:`rlvr.algorithms.logprobs.chunked_linear_logprobs`)
    reproduces ``logits = hidden @ W^T``: it needs a plain bias-free
    ``nn.Linear`` head and no post-processing of the logits.  Models whose head
    has a bias, a LoRA adapter on the head itself, or a final logit soft-cap /
    scale (Gemma 2's ``final_logit_softcapping``, Cohere's ``logit_scale``) are
    refused: the reason is returned and the caller uses the full-logits path.
    LoRA adapters elsewhere (peft) are fine: the decoder carries them.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not hasattr(model, "get_decoder"):
        return f"{type(model).__name__} has no get_output_embeddings()/get_decoder()"
    if type(head) is not torch.nn.Linear:
        return f"its LM head is a {type(head).__name__}, not a plain nn.Linear (e.g. LoRA on lm_head)"
    if head.bias is not None:
        return "its LM head has a bias"
    cfg = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "output_logits_scaling"):
        if getattr(cfg, key, None) not in (None, 1.0):
            return f"its config sets {key}={getattr(cfg, key)!r} (logits are post-processed)"
    decoder = model.get_decoder()
    if decoder is None:
        return "get_decoder() returned None"
    return decoder, head.weight


_warned: set[str] = set()


def policy_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                    temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                    return_hidden: bool = False, chunk_size: int = 0, position_ids: torch.Tensor | None = None):
    """Per-token log p(token_t | tokens_<t) for columns ``start:``, under logits / temperature.

    Returns ``(logp [B, T - start], entropy [B, T - start] or None)``; columns
    before ``start`` are not computed.  The entropy is detached unless
    ``entropy_grad`` (needed for an entropy bonus).  With ``return_hidden`` a
    third item is the LM head's input at the same positions, [B, T - start, H]
    (in the autograd graph; a shared value head reads it).

    ``chunk_size`` > 0 (``train.logprob_chunk_size``) runs the decoder alone and
    computes log-probs and entropy from its last hidden states ``chunk_size``
    tokens at a time (:func:`rlvr.algorithms.logprobs.fused_linear_logprobs`), so
    no [B, T, V] logits tensor or gradient exists; equal to the full path within
    float32 rounding, gradients included.  Models the chunked path cannot
    reproduce (see :func:`chunked_head`) fall back to full logits with a warning.
    ``position_ids`` default to the attention mask's running count (left padding).
    """
    T = input_ids.shape[1]
    keep = T - start + 1  # logits at positions start-1 .. T-2 predict tokens start .. T-1
    if position_ids is None:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if chunk_size > 0:
        route = chunked_head(model)
        if isinstance(route, str):
            if route not in _warned:
                _warned.add(route)
                warnings.warn(f"train.logprob_chunk_size: {type(model).__name__} cannot use chunked log-probs "
                              f"({route}); computing full logits instead", stacklevel=2)
        else:
            decoder, weight = route
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=False).last_hidden_state[:, start - 1:-1]
            B, K, H = hidden.shape
            logp, ent = fused_linear_logprobs(hidden.reshape(B * K, H), weight, input_ids[:, start:].reshape(-1),
                                              temperature, chunk_size, with_entropy)
            logp = logp.view(B, K)
            if ent is not None:
                ent = ent.view(B, K) if entropy_grad else ent.detach().view(B, K)
            return (logp, ent, hidden) if return_hidden else (logp, ent)
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
