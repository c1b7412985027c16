"""Fixed-shape decode steps for ``HFEngine(decode="static" | "compiled")``.

The default decode loop (``decode="dynamic"``) changes shape every step: it drops
finished rows from the batch and hands attention a cache view one position longer
each time.  That is right on CPU, where a dropped row is compute saved, but on a GPU
a 0.5B model's decode step is a few hundred small kernel launches whose cost is
the CPU launching them, not the GPU running them (``gpu_check.py`` measured the
dynamic engine at 0.45x ``model.generate`` on an H100).  The cure every serving
engine uses is to record the step once as a CUDA graph and replay it, which needs
every tensor the step touches to keep its shape and address:

* the keys and values live in a transformers ``StaticCache`` of ``capacity``
  positions for ``batch`` rows, written in place at the position its own counter
  holds (``index_copy_``), so the step's only inputs are the fed tokens, their
  position ids and a ``[batch, capacity]`` attention mask;
* no row ever leaves the batch: a finished row is fed a pad token and its output
  ignored, and rows beyond the chunk's (the batch is rounded up to a power of two
  and the capacity to 128 positions, so that few shapes are ever compiled) copy row 0;
* with ``compile=True`` the step goes through ``torch.compile(fullgraph=True)``:
  on CUDA with ``mode="reduce-overhead"`` (CUDA graphs through inductor's cudagraph
  trees, the path transformers' own static-cache generation takes), elsewhere with
  the default mode.  ``fullgraph=True`` makes a graph break an error instead of a
  silent fall-back to eager, so the CPU tests check the same trace the GPU replays.

The sampled tokens are those of the dynamic loop: the caller samples only the live
rows' logits, in the same order, from the same generators.  Logits agree to float
rounding (batch shapes differ); in float64 the tests find them equal.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers.cache_utils import StaticCache, StaticLayer

from rlvr.engines.kv_cache import cache_kwarg

__all__ = ["StaticDecoder", "DecoderPool", "static_batch", "static_capacity", "COMPILED_VARIANTS",
           "STATIC_DECODE_MIN_TRANSFORMERS", "static_decode_available"]

STATIC_DECODE_MIN_TRANSFORMERS = "5.4.0"
"""The first transformers whose StaticCache layers count their positions in place (``cumulative_length``),
which the fixed-shape decode step is written against; older ones decode with ``decode='dynamic'`` only."""


def static_decode_available() -> bool:
    """Whether the installed transformers supports ``decode='static'`` / ``'compiled'``."""
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) >= Version(STATIC_DECODE_MIN_TRANSFORMERS)

COMPILED_VARIANTS = 64
"""The most compiled decode steps (shapes x decoders) a process keeps before torch runs new ones eagerly."""


def static_batch(rows: int, limit: int) -> int:
    """Rows the fixed-shape batch holds for ``rows`` live ones: the next power of two, at most ``limit``
    (and never fewer than ``rows``), so that a run compiles a handful of shapes, not one per chunk size."""
    p = 1
    while p < rows:
        p *= 2
    return max(rows, min(p, limit))


def static_capacity(positions: int, multiple: int = 128) -> int:
    """Cache positions for ``positions`` needed ones, rounded up to ``multiple``: few distinct shapes, and
    attention (which reads all ``capacity`` positions every step) at most ``multiple - 1`` positions wider."""
    return -(-positions // multiple) * multiple


class StaticDecoder:
    """A ``StaticCache`` of ``batch`` rows x ``capacity`` positions and the decode step that feeds it.

    Use: :meth:`load` a prefill (any ``Cache`` whose layers expose ``keys``/``values``),
    then :meth:`step` once per new token.  ``compile``: run the step through
    ``torch.compile`` (CUDA graphs on CUDA).
    """

    def __init__(self, model, batch: int, capacity: int, *, compile: bool = False):
        self.model, self.batch, self.capacity = model, batch, capacity
        hf_config = model.config.get_text_config(decoder=True)
        self.cache = StaticCache(config=hf_config, max_cache_len=capacity)
        if not all(type(layer) is StaticLayer for layer in self.cache.layers):
            kinds = sorted({type(layer).__name__ for layer in self.cache.layers})
            raise ValueError(f"decode='static'/'compiled' supports full-attention layers only, this model has {kinds}: "
                             "use decode='dynamic'")
        p = next(model.parameters())
        heads = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        self.cache.early_initialization(batch, heads, head_dim, p.dtype, p.device)
        if not all(hasattr(layer, "cumulative_length") for layer in self.cache.layers):
            import transformers

            raise RuntimeError(f"transformers {transformers.__version__}'s StaticCache keeps no in-place position "
                               "counter (cumulative_length), which decode='static'/'compiled' is written against; "
                               f"upgrade transformers (>= {STATIC_DECODE_MIN_TRANSFORMERS}) or use decode='dynamic'")
        self._cache_kw = cache_kwarg(model)  # transformers 5.2x renamed it (past_key_values -> cache)
        self.mask = torch.zeros((batch, capacity), dtype=torch.long, device=p.device)
        torch._dynamo.mark_static_address(self.mask)  # updated in place between replays, never copied into a graph
        self.filled = 0  # positions written so far (the same number as each layer's counter)
        self._forward = self._step
        self._graphs = compile and p.device.type == "cuda"
        if compile:
            # each decoder is one more compiled variant of the same function: past torch's default of 8 a new
            # shape would silently run eagerly, so allow as many as a long run with varied prompts may build
            limit = torch._dynamo.config
            limit.recompile_limit = max(limit.recompile_limit, COMPILED_VARIANTS)
            mode = "reduce-overhead" if self._graphs else None
            self._forward = torch.compile(self._step, fullgraph=True, dynamic=False, mode=mode)

    def _step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=True, **{self._cache_kw: self.cache})
        return out.logits[:, -1, :].float()

    def load(self, prefill_cache, mask: torch.Tensor, n: int) -> None:
        """Copy a prefill of ``P`` prompts (its cache and ``[P, L]`` mask) into rows ``0 .. P*n - 1``, each prompt's
        keys repeated for its ``n`` rows; the rows after them copy row 0.  The next step writes position ``L``."""
        length = mask.shape[1]
        rows = mask.shape[0] * n
        if rows > self.batch or length >= self.capacity:
            raise ValueError(f"a prefill of {rows} rows x {length} positions does not fit a static cache of "
                             f"{self.batch} x {self.capacity}")
        pad = self.batch - rows
        src = torch.arange(mask.shape[0], device=mask.device).repeat_interleave(n)
        if pad:
            src = torch.cat([src, src.new_zeros(pad)])
        for dst, layer in zip(self.cache.layers, prefill_cache.layers):
            dst.keys[:, :, :length].copy_(layer.keys.index_select(0, src))
            dst.values[:, :, :length].copy_(layer.values.index_select(0, src))
            dst.cumulative_length.fill_(length)
        self.mask.zero_()
        self.mask[:, :length].copy_(mask.index_select(0, src))
        self.filled = length

    def step(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (``[batch]`` tokens, ``[batch, 1]`` position ids); returns ``[batch, vocab]``
        float32 logits of the next token.  The returned tensor may be reused by the next step: read it first."""
        if self.filled >= self.capacity:
            raise RuntimeError(f"static cache full ({self.capacity} positions)")
        self.mask[:, self.filled] = 1
        if self._graphs:  # a new iteration: the previous step's outputs may be overwritten (they have been read)
            torch.compiler.cudagraph_mark_step_begin()
        logits = self._forward(tokens[:, None], self.mask, position_ids)
        self.filled += 1
        return logits


class DecoderPool:
    """The engine's :class:`StaticDecoder` per (model, batch, capacity), least recently used dropped past ``size``.

    Keeping them lets a run compile (and, on CUDA, record a graph for) each shape once."""

    def __init__(self, size: int = 4):
        self.size = size
        self._decoders: OrderedDict[tuple, StaticDecoder] = OrderedDict()

    def get(self, model, batch: int, capacity: int, compile: bool) -> StaticDecoder:
        p = next(model.parameters())
        key = (id(model), batch, capacity, compile, p.dtype, str(p.device))
        dec = self._decoders.get(key)
        if dec is None or dec.model is not model:
            dec = StaticDecoder(model, batch, capacity, compile=compile)
            self._decoders[key] = dec
            while len(self._decoders) > self.size:
                self._decoders.popitem(last=False)
        self._decoders.move_to_end(key)
        return dec

    def __len__(self) -> int:
        return len(self._decoders)
