"""A batched sampler on a plain HF causal LM with a KV cache (the CPU default).

Why not ``model.generate``?  We need per-token log-probs of the sampled tokens
without materialising scores for every vocabulary entry at every step, we want to
prefill each prompt once and share it across its group of ``n`` samples
(``batch_repeat_interleave`` on the cache), we drop finished rows from the batch
so short answers stop costing compute, and we append to a pre-allocated KV cache
(``kv_cache.PreallocatedCache``) instead of re-concatenating it every step.  The loop is:

    prefill(unique prompts) -> repeat cache n times -> for each step:
        logits / T -> (top-p) -> sample -> log-prob -> append -> drop finished rows

Multi-turn episodes pass a ``kv_cache.PrefixCache``: each finished row's keys and
values are kept, and the next turn (whose prompt is the trajectory so far) feeds
the model only the environment's tokens and what follows, not the whole prefix.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from rlvr.engines.base import EngineBase, SamplingParams, eos_token_ids
from rlvr.engines.kv_cache import PreallocatedCache, PrefixCache, cache_from_prefixes, cache_kwarg, stack_layers
from rlvr.engines.static_decode import DecoderPool, static_batch, static_capacity
from rlvr.types import Problem, Sample

__all__ = ["HFEngine", "format_prompt", "with_prefixes", "sample_categorical", "sampler_dtype"]


def format_prompt(tokenizer, problem: Problem, system_prompt: str | None = None) -> list[int]:
    """Token ids of a problem rendered with the tokenizer's chat template (generation prompt added)."""
    messages = problem.to_messages(system_prompt)
    if getattr(tokenizer, "chat_template", None):
        extra = {"tools": problem.tools} if getattr(problem, "tools", None) else {}
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **extra)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    # No chat template (base models): plain concatenation of the contents.
    text = "\n\n".join(m["content"] for m in messages) + "\n"
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def with_prefixes(tokenizer, prompts: list[list[int]], prefixes: Sequence[Sequence[int] | str]) -> list[list[int]]:
    """Each prompt's ids followed by its prefix: token ids as given, text encoded without special tokens."""
    if len(prefixes) != len(prompts):
        raise ValueError(f"got {len(prefixes)} prefixes for {len(prompts)} problems")
    return [p + (tokenizer.encode(x, add_special_tokens=False) if isinstance(x, str) else list(x))
            for p, x in zip(prompts, prefixes)]


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set logits outside the smallest set with cumulative probability >= top_p to -inf."""
    if top_p >= 1.0:
        return logits
    sorted_logits, sorted_idx = torch.sort(logits, descending=True, dim=-1)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove = cum - sorted_logits.softmax(-1) > top_p  # keep the token that crosses top_p
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, sorted_idx, sorted_logits)


def sampler_dtype(name: str, model=None) -> torch.dtype | None:
    """``rollout.dtype`` config value -> dtype for ``HFEngine`` (``"auto"``: the policy's own, ``None``).

    ``"fast"`` is resolved for ``model``'s device (None: CUDA when available, else the CPU) by
    :func:`rlvr.utils.precision.fast_dtype`, which says which and why: bfloat16 where bf16 is native, float32
    elsewhere; ``None`` when that is ``model``'s own dtype (the engine then samples from the policy itself, as with
    ``"auto"``).
    """
    if name == "fast":
        from rlvr.utils.precision import fast_dtype

        param = next(model.parameters(), None) if model is not None else None
        dtype = getattr(torch, fast_dtype(param.device if param is not None else None))
        return None if param is not None and param.dtype == dtype else dtype
    return None if name == "auto" else getattr(torch, name)


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None = None,
                       u: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row of ``probs`` (rows need not sum to 1) by inverse-CDF sampling.

    Draws ``u ~ U(0, total)`` and returns the first index whose cumulative mass
    exceeds ``u``.  It samples the same distribution as ``torch.multinomial(probs, 1)``
    but needs one random number per row instead of one per vocabulary entry, which
    made ``multinomial`` a third of a bf16 decode step on CPU (49k-token vocabulary).
    Zero-probability entries are never returned.  ``u`` (``[rows, 1]`` uniforms in [0, 1), e.g. drawn
    from one generator per problem) replaces the draw from ``generator``.
    """
    cdf = probs.cumsum(-1)
    if u is None:
        # drawn on the generator's device (a CPU generator keeps runs reproducible on any device)
        dev = generator.device if generator is not None else probs.device
        u = torch.rand((probs.shape[0], 1), generator=generator, device=dev, dtype=cdf.dtype)
    u = u.to(device=probs.device, dtype=cdf.dtype)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
    over = idx >= probs.shape[-1]
    if over.any():  # u * total rounded up to the total: take the row's last entry with mass
        rows = probs[over]
        idx[over] = rows.shape[-1] - 1 - (rows.flip(-1) > 0).int().argmax(-1)
    return idx


class HFEngine(EngineBase):
    """Sample completions from an in-process HF model.

    Args:
        model: a ``transformers`` causal LM (shared with the learner on CPU, so
            ``sync_weights`` is a no-op unless another model is passed).
        tokenizer: its tokenizer (chat template used for prompts).
        batch_size: max sequences decoded together (prompts x n are chunked).
        system_prompt: optional system message prepended to every problem.
        dtype: sample from a copy of ``model`` in this dtype (e.g. ``torch.bfloat16``,
            2-3x faster matmuls on CPUs with AVX-512 BF16 or AMX; tens of times slower on
            CPUs without them, see ``rlvr.utils.precision``).  ``sync_weights``
            then copies the learner's weights into it.  ``None`` samples from
            ``model`` itself.  Log-probs are those of the copy, so they differ from the
            learner's by the precision gap (the trainer logs it as ``logprob_mismatch``).
        merge_lora: for a LoRA (peft) ``model``, sample from a plain copy with the
            adapters merged (``W + (alpha/r) B A``, refreshed by ``sync_weights``) rather
            than through the adapter branches.  A LoRA model with ``dtype`` set is
            always merged into the copy.
        cache_bytes: the most memory a :meth:`prefix_cache` may hold (rows beyond it
            are recomputed at their next turn).
        decode: ``"dynamic"`` (the default: finished rows leave the batch, the cache grows a
            position per step; best on CPU), ``"static"`` (fixed shapes: a transformers
            ``StaticCache``, rows kept to the end) or ``"compiled"`` (static, the step
            through ``torch.compile``: CUDA graphs on a GPU).  See ``rlvr.engines.static_decode``.
            Calls with a ``PrefixCache`` (multi-turn) always decode dynamically.
        share_prefix: when the prompts of a chunk all begin with the same ``share_prefix`` or more
            tokens (the chat template and system prompt usually do), run that common prefix through
            the model once and start every row from its keys and values, as a stored prefix of a
            ``PrefixCache`` is used; ``0`` (the default) turns it off.  The same distribution, different
            rounding (the rows' padding sits after the prefix instead of before it): in bf16 that
            flips near-tied greedy tokens, so a seeded run's samples change when it is turned on.
    """

    DECODE_MODES = ("dynamic", "static", "compiled")

    def __init__(self, model, tokenizer, *, batch_size: int = 64, system_prompt: str | None = None,
                 dtype: torch.dtype | None = None, merge_lora: bool = True, cache_bytes: int = 1 << 30,
                 decode: str = "dynamic", share_prefix: int = 0):
        if decode not in self.DECODE_MODES:
            raise ValueError(f"decode must be one of {', '.join(self.DECODE_MODES)}, got {decode!r}")
        if share_prefix < 0:
            raise ValueError(f"share_prefix must be >= 0 (0: off), got {share_prefix}")
        self.decode = decode
        self.share_prefix = share_prefix
        self._decoders = DecoderPool()
        self.model = model
        self._lora_merged = False
        from rlvr.models.lora import is_lora_model

        if is_lora_model(model) and (merge_lora or dtype is not None):
            from rlvr.models.lora import merged_copy

            # a plain copy holding W + (alpha/r) B A: no adapter branches while decoding
            self.model, self._lora_merged = merged_copy(model, dtype), True
        elif dtype is not None and dtype != next(model.parameters()).dtype:
            from rlvr.models.frozen import frozen_copy

            self.model = frozen_copy(model, dtype)
        self._own_copy = self.model is not model and not self._lora_merged
        self._asleep: list[tuple[torch.nn.Parameter, torch.Size]] | None = None
        # tokenizer, generator (seed 0), pad_id, eos_ids, batch_size; on_chunk(done, total) is called after each
        # decoded chunk with the number of its problems and the call's (a progress hook: sampling is unchanged)
        super().__init__(tokenizer, batch_size=batch_size, seed=0,
                         eos_ids=eos_token_ids(tokenizer, getattr(model, "generation_config", None)))
        self.cache_bytes = cache_bytes
        self.system_prompt = system_prompt
        from rlvr.engines.multimodal import banned_ids

        self._banned = banned_ids(tokenizer)  # a vision-language policy's image placeholders (None: text-only)

    def sync_weights(self, model) -> None:
        """Sample from ``model``'s current weights: share the module, or copy into the low-precision copy."""
        if self._asleep is not None:
            self._wake_up()
        if self.model is model:
            return
        if self._lora_merged:
            from rlvr.models.lora import copy_merged_into

            copy_merged_into(self.model, model)
            return
        if next(self.model.parameters()).dtype == next(model.parameters()).dtype:
            self.model = model
            return
        with torch.no_grad():
            for dst, src in zip(self.model.state_dict().values(), model.state_dict().values()):
                dst.copy_(src)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy HF-named tensors (LoRA merged) into the model the engine samples from (waking it if asleep).

        The model is the policy itself when the engine shares it (then the policy's weights change too), else the
        engine's own copy (cast to its dtype, as :meth:`sync_weights` does)."""
        if self._asleep is not None:
            self._wake_up()
        with torch.no_grad():
            self.model.load_state_dict(dict(state_dict))

    @property
    def sleeping(self) -> bool:
        return self._asleep is not None

    def sleep(self) -> bool:
        """Free the sampler's own low-precision copy of the weights until the next :meth:`sync_weights`.

        The learner does not need it, and on CPU it is 0.27 GB of the 135M model's peak (the bf16 copy
        beside fp32 weights). The parameters' storage is released and the modules kept; ``sync_weights``
        reallocates and refills them with the same ``copy_`` as always, so sampling is bit-for-bit what it
        would have been (vLLM's sleep mode is the GPU counterpart). A no-op, returning False, when the engine
        samples from the policy itself or from a merged LoRA copy.
        """
        if not self._own_copy or self._asleep is not None:
            return False
        self._asleep = [(p, p.shape) for p in self.model.parameters()]
        for p, _ in self._asleep:
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        return True

    def _wake_up(self) -> None:
        for p, shape in self._asleep:
            p.data = torch.empty(shape, dtype=p.dtype, device=p.device)
        self._asleep = None

    # ------------------------------------------------------------------ public
    def prefix_cache(self) -> PrefixCache:
        """A cache for continuing sequences across calls (``generate(..., cache=)``), capped at ``cache_bytes``."""
        return PrefixCache(self.cache_bytes)

    @torch.inference_mode()
    def generate(self, problems: Sequence[Problem], params: SamplingParams,
                 prefixes: Sequence[Sequence[int] | str] | None = None,
                 cache: PrefixCache | None = None) -> list[list[Sample]]:
        """``params.n`` samples per problem.

        ``prefixes`` (optional, one per problem): the beginning of the assistant's
        answer, as token ids or as text (encoded without special tokens), appended
        after the chat prompt so that sampling *continues* it (step-level search
        and multi-turn episodes use this).  Each sample's ``prompt_ids`` then ends
        with the prefix and its completion holds only the new tokens.

        ``cache`` (optional, from :meth:`prefix_cache`): reuse the keys and values of
        any stored prefix of a prompt instead of recomputing them, and store every
        row's for the next call.  Log-probs agree with an uncached call to float
        rounding (the padding layout differs).
        """
        params.check_seeds(len(problems))
        if params.seeds is None and params.seed is not None:
            self.generator.manual_seed(params.seed)
        prompts = [format_prompt(self.tokenizer, p, self.system_prompt) for p in problems]
        images = None
        if any(getattr(p, "images", None) for p in problems):  # a vision-language policy's image problems
            from rlvr.engines.multimodal import image_prompts

            prompts, images = image_prompts(self.tokenizer, problems, prompts, self.system_prompt, self.model)
        if prefixes is not None:
            prompts = with_prefixes(self.tokenizer, prompts, prefixes)
        out: list[list[Sample]] = [[] for _ in problems]
        if cache is not None:
            cache.begin_call()
        # Chunk by prompts so that each chunk decodes at most batch_size rows.
        per_chunk = max(1, self.batch_size // params.n)
        was_training = self.model.training
        self.model.eval()
        try:
            for idx in self._chunks(prompts, per_chunk, cache if images is None else None):
                gens = None if params.seeds is None else \
                    [torch.Generator(device="cpu").manual_seed(int(params.seeds[i])) for i in idx]
                chunk = [prompts[i] for i in idx]
                imgs = None if images is None else [images[i] for i in idx]
                if self.decode == "dynamic" or cache is not None:
                    rows = self._generate_chunk(chunk, params, cache, gens, imgs)
                else:
                    rows = self._generate_chunk_static(chunk, params, gens, imgs)
                for j, i in enumerate(idx):
                    for g in range(params.n):
                        ids, lps, reason = rows[j * params.n + g]
                        out[i].append(self._to_sample(problems[i].id, prompts[i], ids, lps, reason, g, params))
                        if imgs is not None:
                            out[i][-1].image_inputs = imgs[j]
                if self.on_chunk is not None:
                    self.on_chunk(len(idx), len(prompts))
        finally:
            self.model.train(was_training)
            if cache is not None:
                cache.end_call()
        return out

    # ----------------------------------------------------------------- private
    @staticmethod
    def _chunks(prompts: list[list[int]], per_chunk: int, cache: PrefixCache | None) -> list[list[int]]:
        """Problem indices in chunks of ``per_chunk``; with a ``cache``, the prompts that continue a stored prefix
        are chunked apart from those that do not (each group in order).  A chunk mixing the two is laid out
        ``[pad | stored prefix | pad | rest]`` with the longest prefix *and* the longest whole prompt, nearly
        twice the positions of either: the KV cache of an execution-feedback evaluation chunk grew to ~0.7 GB."""
        order = list(range(len(prompts)))
        if cache is not None and cache.entries:
            stored = [cache.has_prefix(p) for p in prompts]
            groups = [[i for i in order if stored[i]], [i for i in order if not stored[i]]]
        else:
            groups = [order]
        return [g[s: s + per_chunk] for g in groups for s in range(0, len(g), per_chunk)]

    def _to_sample(self, pid, prompt_ids, ids, lps, reason, g, params) -> Sample:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for s in params.stop:
            cut = text.find(s)
            if cut != -1:
                text = text[: cut + len(s)]
        return Sample(pid, list(prompt_ids), ids, lps, text, reason, g)

    def _hit_stop(self, ids: list[int], stop: Sequence[str]) -> bool:
        tail = self.tokenizer.decode(ids[-8:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _prefill(self, prompts: list[list[int]], params: SamplingParams, store: PrefixCache | None, images=None):
        """Run the prompts (left-padded) through the model; with ``store``, only what follows a stored prefix.

        Row ``i`` is laid out as ``[pad | stored prefix | pad | rest of prompt]``: the
        attention mask hides the pads and the position ids count only real tokens.  ``images`` (one
        :class:`~rlvr.types.ImageInputs` or None per prompt) go into this forward with the ids; a chunk with
        images uses no stored or shared prefix (equal placeholder ids can stand for different images).
        """
        if self._asleep is not None:
            raise RuntimeError("HFEngine.generate while asleep: call sync_weights(model) after the learner step first")
        model = self.model
        device = next(model.parameters()).device
        layers = model.config.get_text_config().num_hidden_layers
        from rlvr.engines.multimodal import has_images, prefill_inputs

        with_images = has_images(images)
        found = [store.lookup(p) for p in prompts] if store is not None and not with_images \
            else [(0, None)] * len(prompts)
        shared = self._shared_prefix(prompts) if not any(n for n, _ in found) and not with_images else 0
        if shared:  # the chunk's common prefix (chat template, system prompt) runs once, as a stored prefix would
            kv = self._prefix_kv(prompts[0][:shared], layers, device)
            found = [(shared, kv)] * len(prompts)
        lengths = [n for n, _ in found]
        rests = [p[n:] for p, (n, _) in zip(prompts, found)]
        if store is not None:
            store.reused_tokens += sum(lengths) - shared * len(prompts)
            store.fed_tokens += shared + sum(len(r) for r in rests)
        past, width = max(lengths), max(len(r) for r in rests)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), past + width), dtype=torch.long)
        for i, r in enumerate(rests):
            input_ids[i, width - len(r):] = torch.tensor(r)
            mask[i, past - lengths[i]: past] = 1
            mask[i, past + width - len(r):] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        position_ids = ((mask.cumsum(-1) - 1).clamp(min=0))[:, past:]
        capacity = past + width + params.max_new_tokens
        if past:
            cache = cache_from_prefixes(layers, capacity, [kv for _, kv in found], lengths, past)
        else:
            cache = PreallocatedCache(layers, capacity)
        extra = prefill_inputs(images, model) if with_images else {}
        out = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                    logits_to_keep=1, **{cache_kwarg(model): cache}, **extra)
        return out, cache, mask, position_ids

    def _shared_prefix(self, prompts: list[list[int]]) -> int:
        """How many leading tokens all ``prompts`` share, if at least ``share_prefix`` (else 0); each prompt
        keeps at least one token of its own to feed."""
        if not self.share_prefix or len(prompts) < 2:
            return 0
        first, limit = prompts[0], min(map(len, prompts)) - 1
        n = 0
        while n < limit and all(p[n] == first[n] for p in prompts):
            n += 1
        return n if n >= self.share_prefix else 0

    def _prefix_kv(self, ids: list[int], layers: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer ``(k, v)`` of ``[heads, len(ids), dim]`` for one token sequence (the form PrefixCache stores)."""
        cache = PreallocatedCache(layers, len(ids))
        x = torch.tensor([ids], device=device)
        positions = torch.arange(len(ids), device=device)[None]
        self.model(input_ids=x, attention_mask=torch.ones_like(x), position_ids=positions, use_cache=True,
                   logits_to_keep=1, **{cache_kwarg(self.model): cache})
        return [(layer.keys[0], layer.values[0]) for layer in cache.layers]

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams, store: PrefixCache | None = None,
                        gens: list[torch.Generator] | None = None, images=None):
        """Decode ``params.n`` rows per prompt; ``gens`` (one per prompt): each prompt's rows draw from its own."""
        model, n = self.model, params.n
        device = next(model.parameters()).device
        if images is not None and any(x is not None for x in images):
            store = None  # cached rows are keyed by token ids, and image placeholders are the same ids for any image
        out, cache, mask, position_ids = self._prefill(prompts, params, store, images)  # fills cache in place
        if store is not None:  # the stored prefixes this chunk used are in `cache` now: their bytes go back to the cap
            store.release()
        logits = out.logits[:, -1, :].float()
        if n > 1:  # share the prefill across the group
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            mask = mask.repeat_interleave(n, dim=0)
            position_ids = position_ids.repeat_interleave(n, dim=0)
        next_pos = position_ids[:, -1:] + 1
        tokens, logps, reasons, active = self._new_rows(logits.shape[0])

        for step in range(params.max_new_tokens):
            tok, lp = self._sample(logits, params, gens, active, n)
            keep = self._record(active, tok, lp, params, tokens, logps, reasons)
            if not keep or step == params.max_new_tokens - 1:
                if store is not None:
                    self._store_rows(store, cache, mask, active, range(len(active)), prompts, n, tokens)
                break
            tok = tok.to(device)
            if len(keep) < len(active):  # drop finished rows from the batch and the cache
                if store is not None:
                    done = sorted(set(range(len(active))) - set(keep))
                    self._store_rows(store, cache, mask, active, done, prompts, n, tokens)
                keep_t = torch.tensor(keep, device=device)
                cache.batch_select_indices(keep_t)
                active, tok, mask, next_pos = active[keep_t.cpu()], tok[keep_t], mask[keep_t], next_pos[keep_t]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, use_cache=True,
                        **{cache_kwarg(model): cache})
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        return list(zip(tokens, logps, reasons))

    @staticmethod
    def _new_rows(rows: int):
        """Per-row sampled tokens, their log-probs, finish reasons, and the original index of each live row."""
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        return tokens, logps, ["length"] * rows, torch.arange(rows)

    def _sample(self, logits: torch.Tensor, params: SamplingParams, gens: list[torch.Generator] | None,
                active: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token of each row of ``logits`` (the live rows, original indices ``active``) and its log-prob."""
        banned = self._banned
        if params.temperature == 0:
            lp_all = torch.log_softmax(logits, -1)
            tok = lp_all.argmax(-1) if banned is None else self._ban(lp_all, float("-inf")).argmax(-1)
        else:
            scaled = logits / params.temperature if params.temperature != 1.0 else logits
            lp_all = torch.log_softmax(scaled, -1)
            if params.top_p < 1.0:
                probs = _top_p_filter(scaled, params.top_p).softmax(-1)
            else:
                probs = lp_all.exp()
            if banned is not None:  # never an image placeholder; the recorded log-probs stay the full distribution's
                probs = self._ban(probs, 0.0)
            if gens is None:
                tok = sample_categorical(probs, self.generator)
            else:  # per prompt, the same draws as a call holding only that prompt's live rows
                owners = torch.div(active, n, rounding_mode="floor")
                counts = torch.bincount(owners, minlength=len(gens)).tolist()
                u = torch.cat([torch.rand((k, 1), generator=gens[j], dtype=probs.dtype)
                               for j, k in enumerate(counts) if k])
                tok = sample_categorical(probs, u=u)
        return tok, lp_all.gather(-1, tok[:, None]).squeeze(-1)

    def _ban(self, x: torch.Tensor, fill: float) -> torch.Tensor:
        from rlvr.engines.multimodal import ban_tokens

        return ban_tokens(x, self._banned, fill)

    def _record(self, active, tok, lp, params, tokens, logps, reasons) -> list[int]:
        """Append each live row's token; returns the positions (in ``active``) of the rows still going."""
        keep = []
        for r, (row, t, l) in enumerate(zip(active.tolist(), tok.tolist(), lp.tolist())):
            tokens[row].append(t)
            logps[row].append(l)
            eos_hit = t in self.eos_ids and not params.ignore_eos
            if eos_hit or (params.stop and self._hit_stop(tokens[row], params.stop)):
                reasons[row] = "stop"
            else:
                keep.append(r)
        return keep

    def _generate_chunk_static(self, prompts: list[list[int]], params: SamplingParams,
                               gens: list[torch.Generator] | None = None, images=None):
        """:meth:`_generate_chunk` on fixed shapes (``decode="static"``/``"compiled"``, see ``static_decode``):
        the rows stay in the batch to the end, finished ones fed a pad token; the same tokens are sampled."""
        model, n = self.model, params.n
        device = next(model.parameters()).device
        out, prefill_cache, mask, position_ids = self._prefill(prompts, params, None, images)
        rows = len(prompts) * n
        batch = static_batch(rows, max(rows, self.batch_size))
        dec = self._decoders.get(model, batch, static_capacity(mask.shape[1] + params.max_new_tokens),
                                 self.decode == "compiled")
        logits = out.logits[:, -1, :].float().repeat_interleave(n, dim=0)
        del out
        dec.load(prefill_cache, mask, n)
        del prefill_cache  # copied into the static cache: free it before decoding
        pos = position_ids[:, -1:].repeat_interleave(n, dim=0) + 1
        pos = torch.cat([pos, pos[:1].expand(batch - rows, 1)]) if batch > rows else pos
        feed = torch.full((batch,), self.pad_id, dtype=torch.long, device=device)

        tokens, logps, reasons, active = self._new_rows(rows)
        for step in range(params.max_new_tokens):
            tok, lp = self._sample(logits, params, gens, active, n)
            keep = self._record(active, tok, lp, params, tokens, logps, reasons)
            if not keep or step == params.max_new_tokens - 1:
                break
            feed.fill_(self.pad_id)
            feed[active.to(device)] = tok.to(device)
            active = active[torch.tensor(keep)]
            logits = dec.step(feed, pos)[active.to(device)]
            pos = pos + 1
        return list(zip(tokens, logps, reasons))

    @staticmethod
    def _store_rows(store: PrefixCache, cache, mask, active, rows, prompts, n, tokens) -> None:
        """Keep the keys and values of batch rows ``rows`` (the prompt and every sampled token fed so far)."""
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for r in rows:
            orig = int(active[r])
            kv = stack_layers(layers, r, mask[r].nonzero().squeeze(-1).to(layers[0][0].device))
            ids = prompts[orig // n] + tokens[orig][:-1]
            if kv[0][0].shape[1] != len(ids):  # never expected: a layout bug must not poison the next turn
                raise RuntimeError(f"prefix cache: {kv[0][0].shape[1]} cached positions for {len(ids)} tokens")
            store.store(ids, kv)

