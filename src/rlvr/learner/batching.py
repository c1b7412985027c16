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

__all__ = ["collate", "policy_logprobs", "chunked_head", "pack_rows", "pack_rows_shared", "prompt_keys",
           "shared_mask_style", "token_budget_chunks", "packed_logprobs"]


def collate(samples: Sequence[Sample], advantages: torch.Tensor, pad_id: int) -> Batch:
    """Pad ``samples`` into a :class:`Batch`; ``sampler_logprobs`` are the sampler's log-probs.

    A multi-turn episode's ``mask`` becomes its row of ``completion_mask``: the loss,
    KL, entropy and every per-token estimator see only the policy's own tokens.
    Samples with ``info["off_policy"]`` (guidance demonstrations) set ``Batch.off_policy``
    ([B] bool; None when there are none).
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
    off = [bool(s.info.get("off_policy")) for s in samples]
    images = [getattr(s, "image_inputs", None) for s in samples]
    return Batch(input_ids, attention_mask, completion_mask, sampler_logprobs, advantages.float(),
                 off_policy=torch.tensor(off) if any(off) else None,
                 image_inputs=images if any(x is not None for x in images) else None)


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
    hf_config = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "output_logits_scaling"):
        if getattr(hf_config, key, None) not in (None, 1.0):
            return f"its config sets {key}={getattr(hf_config, key)!r} (logits are post-processed)"
    decoder = model.get_decoder()
    if decoder is None:
        return "get_decoder() returned None"
    return decoder, head.weight


_warned: set[str] = set()


def _image_kwargs(model, images) -> dict:
    """The image tensors of rows ``images`` (one ImageInputs or None per row) for the model's forward ({} if none)."""
    if images is None or all(x is None for x in images):
        return {}
    from rlvr.models.vision import merge_image_inputs

    p = next(model.parameters())
    return merge_image_inputs(images, device=p.device, dtype=p.dtype)


def _image_decoder(model, route):
    """``route`` (chunked_head's) with the decoder replaced by the VLM trunk, which also takes the images."""
    from rlvr.models.vision import vision_trunk

    return route if isinstance(route, str) else (vision_trunk(model), route[1])


def policy_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                    temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                    return_hidden: bool = False, chunk_size: int = 0, position_ids: torch.Tensor | None = None,
                    images=None):
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
    ``images`` (a vision-language policy: one :class:`~rlvr.types.ImageInputs` or None per row) go into the
    same forward; a model with multimodal rotary positions then computes its own positions.
    """
    T = input_ids.shape[1]
    keep = T - start + 1  # logits at positions start-1 .. T-2 predict tokens start .. T-1
    extra = _image_kwargs(model, images)
    if extra:
        from rlvr.models.vision import uses_mrope

        if uses_mrope(model):
            position_ids = None  # get_rope_index from the ids, the image grid and the attention mask
        elif position_ids is None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    elif position_ids is None:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if chunk_size > 0:
        route = chunked_head(model)
        if isinstance(route, str):
            if route not in _warned:
                _warned.add(route)
                warnings.warn(f"train.logprob_chunk_size: {type(model).__name__} cannot use chunked log-probs "
                              f"({route}); computing full logits instead", stacklevel=2)
        else:
            decoder, weight = _image_decoder(model, route) if extra else route
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=False, **extra).last_hidden_state[:, start - 1:-1]
            B, K, H = hidden.shape
            logp, ent = fused_linear_logprobs(hidden.reshape(B * K, H), weight, input_ids[:, start:].reshape(-1),
                                              temperature, chunk_size, with_entropy)
            logp = logp.view(B, K)
            if ent is not None:
                ent = ent.view(B, K) if entropy_grad else ent.detach().view(B, K)
            return (logp, ent, hidden) if return_hidden else (logp, ent)
    with lm_head_inputs(model) if return_hidden else nullcontext() as rec:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=False, logits_to_keep=keep, **extra)
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


def token_budget_chunks(rows: torch.Tensor, lengths: torch.Tensor, budget: int,
                        shared: tuple[list, torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Split ``rows`` (in order) into micro-batches of at most ``budget`` tokens (``lengths[i]`` for row i).

    A row longer than the budget gets a micro-batch of its own.  With ``shared =
    (keys, prompt_lengths)`` (:func:`prompt_keys`) rows whose prompt is already in
    the micro-batch cost only their completion: the packing of
    :func:`pack_rows_shared` carries each distinct prompt once.
    """
    chunks, cur, used, seen = [], [], 0, set()
    for r in rows.tolist():
        n = int(lengths[r])
        if shared is not None and shared[0][r] in seen:
            n -= int(shared[1][r])
        if cur and used + n > budget:
            chunks.append(torch.tensor(cur, dtype=torch.long))
            cur, used, seen = [], 0, set()
            n = int(lengths[r])
        cur.append(r)
        used += n
        if shared is not None:
            seen.add(shared[0][r])
    if cur:
        chunks.append(torch.tensor(cur, dtype=torch.long))
    return chunks


def prompt_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                images=None) -> tuple[list, torch.Tensor]:
    """``(keys, lengths)``: each row's prompt (its real tokens before column ``start``) as a hashable key, and
    its length.  With ``images`` (one ImageInputs or None per row) a row's key also holds its images' hash:
    the placeholder ids are the same for every image, so equal ids alone are not the same prompt."""
    am = attention_mask[:, :start].bool()
    keys = [tuple(input_ids[i, :start][am[i]].tolist()) for i in range(input_ids.shape[0])]
    if images is not None:
        keys = [k if im is None else (k, im.key) for k, im in zip(keys, images)]
    return keys, am.sum(1)


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int):
    """Concatenate every row's real tokens into one row, with where each completion token's prediction lands.

    Returns ``(ids [1, L], position_ids [1, L], src [n], rows [n], cols [n])``:
    the packed row, positions restarting at 0 for every sequence (transformers
    detects the sequence boundaries from them and keeps attention within a
    sequence when no attention mask is passed), and for each of the ``n``
    unpadded target tokens at column ``cols >= start`` of row ``rows`` the packed
    position ``src`` whose output predicts it.
    """
    am = attention_mask.bool()
    lengths = am.sum(1)
    ids = input_ids[am][None]  # row-major: row 0's tokens, then row 1's, ...
    offsets = torch.cumsum(lengths, 0) - lengths
    first = am.float().argmax(1)  # first real column of every row (left padding)
    pos = torch.arange(ids.shape[1]) - torch.repeat_interleave(offsets, lengths)
    tgt = am.clone()
    tgt[:, :start] = False
    rows, cols = tgt.nonzero(as_tuple=True)
    src = offsets[rows] + (cols - first[rows]) - 1
    return ids, pos[None].to(input_ids.device), src, rows, cols


def pack_rows_shared(input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int, images=None):
    """:func:`pack_rows` with rows that have the same prompt sharing one copy of it, plus the attention mask.

    The packed row holds, for each distinct prompt (in order of first appearance),
    the prompt once and then the completion of every row that has it.  Returns
    ``(ids [1, L], position_ids [1, L], allowed [L, L] bool, src, rows, cols)``:
    token ``i`` may attend to token ``j`` when both belong to the same prompt
    group, ``j <= i``, and ``j`` is a prompt token or a token of ``i``'s own row.
    Position ids count from 0 at the prompt and go on through each completion, so
    every completion sees exactly the positions and keys it would see unpacked:
    the shared-prefix forward of Prefix Grouper (Liu et al. 2025, "Prefix
    Grouper: Efficient GRPO Training through Shared-Prefix Forward").  A group of
    G completions of a P-token prompt costs ``P + sum(C_i)`` tokens instead of
    ``G * P + sum(C_i)``.  ``src`` is where each target's prediction lands: the
    first completion token of every row of a group is predicted by the one shared
    last prompt token.  ``images`` (per row) keep rows with different images apart (:func:`prompt_keys`).
    """
    dev = input_ids.device
    input_ids, attention_mask = input_ids.cpu(), attention_mask.cpu()  # index bookkeeping on the host
    am = attention_mask.bool()
    keys, _ = prompt_keys(input_ids, attention_mask, start, images)
    B = input_ids.shape[0]
    where = torch.full(input_ids.shape, -1, dtype=torch.long)  # packed index of every real (row, col)
    ids, pos, group, owner = [], [], [], []
    first_of: dict = {}
    for i in range(B):
        pcols = am[i, :start].nonzero().squeeze(1)
        ccols = am[i, start:].nonzero().squeeze(1) + start
        if keys[i] not in first_of:  # a new group: its prompt goes in once
            first_of[keys[i]] = (len(ids), len(first_of))
            ids += input_ids[i, pcols].tolist()
            pos += list(range(len(pcols)))
            group += [first_of[keys[i]][1]] * len(pcols)
            owner += [-1] * len(pcols)
        base, g = first_of[keys[i]]
        where[i, pcols] = torch.arange(base, base + len(pcols))
        n = len(ids)
        where[i, ccols] = torch.arange(n, n + len(ccols))
        ids += input_ids[i, ccols].tolist()
        pos += list(range(len(pcols), len(pcols) + len(ccols)))
        group += [g] * len(ccols)
        owner += [i] * len(ccols)
    group_t, owner_t = torch.tensor(group), torch.tensor(owner)
    L = len(ids)
    allowed = (group_t[:, None] == group_t[None, :]) & torch.ones(L, L, dtype=torch.bool).tril() \
        & ((owner_t[None, :] == -1) | (owner_t[None, :] == owner_t[:, None]))
    tgt = am.clone()
    tgt[:, :start] = False
    rows, cols = tgt.nonzero(as_tuple=True)
    src = where[rows, cols - 1]
    return (torch.tensor(ids, device=dev)[None], torch.tensor(pos, device=dev)[None], allowed.to(dev),
            src, rows, cols)


def shared_mask_style(model) -> str:
    """How the model's attention takes :func:`pack_rows_shared`'s custom mask: ``"bool"`` (SDPA) or
    ``"additive"`` (eager); a ValueError naming ``train.share_prompts`` for kernels that take none
    (FlashAttention, flex).  The recipe calls it at set-up, so a bad pairing fails before sampling."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", "sdpa") or "sdpa"
    if impl in ("sdpa", "eager"):
        return "bool" if impl == "sdpa" else "additive"
    raise ValueError(f"train.share_prompts needs sdpa or eager attention (a custom attention mask); "
                     f"the model uses {impl!r}")


def _attention_mask_4d(model, allowed: torch.Tensor) -> torch.Tensor:
    """``allowed`` [L, L] as the [1, 1, L, L] mask transformers passes through unchanged."""
    if shared_mask_style(model) == "bool":
        return allowed[None, None]
    dtype = next(model.parameters()).dtype
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min)[None, None]


def _check_packing_support() -> None:
    """Packed rows without a mask need torch >= 2.6: on older torch, transformers' masks ignore the restarting
    position ids and every row would attend to the rows packed before it (wrong log-probs, no error)."""
    from packaging.version import Version

    if Version(torch.__version__.split("+")[0]) < Version("2.6"):
        raise RuntimeError(f"train.micro_batch_tokens packs rows, which needs torch >= 2.6 (this is "
                           f"{torch.__version__}): upgrade torch, set train.share_prompts=true, or set "
                           "train.micro_batch_tokens=0")


def _packed_image_kwargs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int, images,
                         share_prompts: bool) -> dict:
    """The image inputs of packed rows (``{}`` for text): the rows' image tensors in packing order, under
    ``share_prompts`` once per shared prompt (as its placeholders are)."""
    if images is None or not any(x is not None for x in images):
        return {}
    from rlvr.models.vision import uses_mrope

    if uses_mrope(model):
        raise ValueError(f"{type(model).__name__} computes multimodal rotary positions per sequence, which a "
                         "packed row does not give it: train it with train.micro_batch_tokens=0")
    order = images
    if share_prompts:  # a group's prompt (and its placeholders) is packed once: its images once too
        keys, _ = prompt_keys(input_ids.cpu(), attention_mask.cpu(), start, images)
        first = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        order = [images[i] for i in sorted(first.values())]
    return _image_kwargs(model, order)


def packed_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int,
                    temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                    return_hidden: bool = False, chunk_size: int = 0, share_prompts: bool = False, images=None):
    """:func:`policy_logprobs` with the rows packed into one sequence (no padding), unpacked to [B, T - start].

    Same arguments and outputs as :func:`policy_logprobs` (padding positions
    hold 0), so every loss downstream is unchanged; only real tokens go through
    the model.  Attention stays within each sequence: position ids restart per
    sequence and no attention mask is passed, so transformers' masking utilities
    build the block-diagonal causal mask.  ``share_prompts`` packs rows with the
    same prompt around one copy of it (:func:`pack_rows_shared`) and passes the
    mask that keeps each completion to its prompt and itself.  ``images`` (per row) are packed with their
    rows: the rows' image tensors in packing order (under ``share_prompts`` once per shared prompt, as its
    placeholders are), so every placeholder run gets its own row's image features.
    """
    B, T = input_ids.shape
    K = T - start
    mask4d = None
    extra = _packed_image_kwargs(model, input_ids, attention_mask, start, images, share_prompts)
    if share_prompts:
        ids, pos, allowed, src, rows, cols = pack_rows_shared(input_ids, attention_mask, start, images)
        mask4d = _attention_mask_4d(model, allowed)
    else:
        _check_packing_support()
        ids, pos, src, rows, cols = pack_rows(input_ids, attention_mask, start)
    src, rows, cols = src.to(input_ids.device), rows.to(input_ids.device), cols.to(input_ids.device)
    targets = input_ids[rows, cols]
    route = chunked_head(model) if chunk_size > 0 else "full logits asked for"
    if isinstance(route, str) and chunk_size > 0 and route not in _warned:
        _warned.add(route)
        warnings.warn(f"train.logprob_chunk_size: {type(model).__name__} cannot use chunked log-probs ({route}); "
                      "computing full logits instead", stacklevel=2)
    # ``src`` repeats an index under share_prompts (a group's last prompt token predicts every row's first
    # completion token).  ``x[src]``'s backward accumulates those repeats with CPU atomics, in whatever order
    # the threads run (the seeded demo drifted from run to run), so gather with index_select (its backward,
    # index_add_, is deterministic) and hand transformers only distinct positions.
    if not isinstance(route, str):
        decoder, weight = _image_decoder(model, route) if extra else route
        hidden = decoder(input_ids=ids, position_ids=pos, attention_mask=mask4d,
                         use_cache=False, **extra).last_hidden_state[0].index_select(0, src)
        logp_f, ent_f = fused_linear_logprobs(hidden, weight, targets, temperature, chunk_size, with_entropy)
    else:
        uniq, inv = src.unique(return_inverse=True) if share_prompts else (src, None)
        with lm_head_inputs(model) if return_hidden else nullcontext() as rec:
            out = model(input_ids=ids, position_ids=pos, attention_mask=mask4d, use_cache=False,
                        logits_to_keep=uniq, **extra)
        logits = out.logits[0].float()
        if inv is not None:
            logits = logits.index_select(0, inv)
        if temperature not in (0.0, 1.0):
            logits = logits / temperature
        logp_f = selective_log_softmax(logits, targets)
        ent_f = None
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ent_f = entropy_from_logits(logits if entropy_grad else logits.detach())
        hidden = (rec.hidden[0] if inv is None else rec.hidden[0].index_select(0, inv)) if return_hidden else None

    def unpack(x: torch.Tensor) -> torch.Tensor:
        full = x.new_zeros((B, K) + tuple(x.shape[1:]))
        return full.index_put((rows, cols - start), x)

    logp = unpack(logp_f)
    ent = None
    if ent_f is not None:
        ent = unpack(ent_f) if entropy_grad else unpack(ent_f.detach())
    if return_hidden:
        return logp, ent, unpack(hidden)
    return logp, ent
