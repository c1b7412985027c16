"""A KV cache that pre-allocates its buffers and writes new tokens in place.

transformers' ``DynamicCache`` appends with ``torch.cat``, which copies the whole
cache of every layer at every decoding step; on CPU that copy was over half of a
decode step of SmolLM2-135M at batch 64.  This cache allocates ``capacity``
positions up front, writes each new key/value into its slot and hands attention a
view of the filled part.  It keeps ``DynamicCache``'s batch operations (repeat a
prefill across a group, drop finished rows), so it is a drop-in replacement.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

__all__ = ["PreallocatedCache", "PrefixCache", "cache_from_prefixes", "cache_kwarg", "stack_layers"]

_INSTALLED_CACHE_KW = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
"""transformers 5.2x renamed a model's cache argument and output field ``past_key_values`` -> ``cache``
(the old name warns, and goes in 5.40); earlier versions know only ``past_key_values``."""


@functools.lru_cache(maxsize=None)
def _cache_kwarg_of(cls: type) -> str:
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return _INSTALLED_CACHE_KW
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return _INSTALLED_CACHE_KW  # a forward(**kwargs) wrapper: what the installed transformers takes


def cache_kwarg(model) -> str:
    """The keyword ``model``'s forward takes a KV cache by: ``cache`` on the transformers that renamed it, else
    ``past_key_values`` (call ``model(..., **{cache_kwarg(model): cache})``; the model updates ``cache`` in place,
    so callers keep their own reference instead of reading the output's field, whose name changed too)."""
    return _cache_kwarg_of(type(model))


class _PreallocatedLayer(DynamicLayer):
    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.is_initialized = False  # set by the base class since transformers 4.57, not before

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, dk = key_states.shape
        self._k = key_states.new_empty((b, h, self.capacity, dk))
        self._v = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
        self.length = 0
        self.is_initialized = True

    def _refresh_views(self) -> None:
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self._k.shape[2]:  # out of room: grow geometrically (rare)
            extra = max(n, self._k.shape[2])
            self._k = torch.cat([self._k, self._k.new_empty(self._k.shape[:2] + (extra, self._k.shape[3]))], 2)
            self._v = torch.cat([self._v, self._v.new_empty(self._v.shape[:2] + (extra, self._v.shape[3]))], 2)
        self._k[:, :, self.length: self.length + n] = key_states
        self._v[:, :, self.length: self.length + n] = value_states
        self.length += n
        self._refresh_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self._refresh_views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k = self._k[indices]
            self._v = self._v[indices]
            self._refresh_views()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        if self.is_initialized and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)
            self._refresh_views()


class PreallocatedCache(DynamicCache):
    """``DynamicCache`` with in-place appends into buffers of ``capacity`` positions per layer."""

    def __init__(self, num_layers: int, capacity: int):
        Cache.__init__(self, layers=[_PreallocatedLayer(capacity) for _ in range(num_layers)])


class PrefixCache:
    """Keys and values of token sequences an engine has already run, for continuing them.

    A multi-turn episode re-enters the sampler with its whole trajectory as the
    prompt.  ``HFEngine.generate(..., cache=...)`` looks each prompt up here, feeds
    the model only the tokens after the longest stored prefix, and stores every
    row's keys and values when it finishes (the prompt and every sampled token but
    the last, which was never fed).  An entry is consumed when a longer sequence
    continues it, and at its end a call drops the entries of earlier calls it did
    not continue (their episodes ended), so between calls the cache holds one turn's rows.  ``max_bytes``
    caps everything it holds, consumed entries included until :meth:`release` (the engine calls it after
    each chunk's prefill has copied them): a row that does not fit is not stored and its next turn is
    prefilled in full.  A cache belongs to one set of weights: make a new one per rollout.
    Store each row's layers in one allocation (:func:`stack_layers`): per-layer tensors of a
    short row are small enough for the C heap, where freeing them leaves holes the process keeps.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self.entries: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._born: dict[tuple[int, ...], int] = {}
        self._taken: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.nbytes = 0
        self.calls = 0
        self.reused_tokens = 0
        self.fed_tokens = 0
        self.skipped = 0

    @staticmethod
    def _size(kv) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)

    def begin_call(self) -> None:
        """Start a ``generate`` call."""
        self.calls += 1

    def end_call(self) -> None:
        """End a ``generate`` call: forget the entries it consumed and those it did not (their rows ended)."""
        self.release()
        for key in [k for k, born in self._born.items() if born < self.calls]:
            self._drop(key)

    def lookup(self, ids: list[int]):
        """``(length, per-layer (k, v) of shape [heads, length, dim])`` for the longest stored prefix of ``ids``
        shorter than ``ids`` (its last token must be fed to get the next logits), or ``(0, None)``.

        The entry is consumed, but stays available to the other rows of the same call
        (the rows of a greedy group are often identical)."""
        best = self._longest(ids)
        if best is None:
            return 0, None
        if best in self.entries:  # consumed: still counted in nbytes until release()
            self._taken[best] = self.entries.pop(best)
            self._born.pop(best, None)
        return len(best), self._taken[best]

    def has_prefix(self, ids: list[int]) -> bool:
        """Whether :meth:`lookup` would find a stored prefix of ``ids`` now (nothing is consumed)."""
        return self._longest(ids) is not None

    def _longest(self, ids: list[int]) -> tuple[int, ...] | None:
        """The key of the longest stored or consumed prefix of ``ids`` shorter than ``ids``, or None."""
        lengths = sorted({len(k) for t in (self.entries, self._taken) for k in t if len(k) < len(ids)}, reverse=True)
        for n in lengths:  # longest first: one hashed probe per stored length, not a comparison per entry
            key = tuple(ids[:n])
            if key in self.entries or key in self._taken:
                return key
        return None

    def release(self) -> None:
        """Forget the entries consumed so far (their keys and values have been copied into a working cache);
        a later row of the same call with the same prefix is then prefilled in full."""
        for kv in self._taken.values():
            self.nbytes -= self._size(kv)
        self._taken.clear()

    def store(self, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
        """Keep ``kv`` (per layer, ``[heads, len(ids), dim]``) for ``ids``; False if it would exceed ``max_bytes``."""
        size = self._size(kv)
        key = tuple(ids)
        if key in self.entries:
            self._drop(key)
        if self.nbytes + size > self.max_bytes:
            self.skipped += 1
            return False
        self.entries[key], self._born[key] = kv, self.calls
        self.nbytes += size
        return True

    def _drop(self, key) -> None:
        self.nbytes -= self._size(self.entries.pop(key))
        self._born.pop(key, None)

    def clear(self) -> None:
        self.release()
        self.entries.clear()
        self._born.clear()
        self.nbytes = 0


def cache_from_prefixes(num_layers: int, capacity: int, prefixes: list, lengths: list[int], width: int) -> PreallocatedCache:
    """A ``PreallocatedCache`` holding each row's stored prefix right-aligned in ``width`` positions.

    ``prefixes[i]`` is ``None`` or the per-layer ``(k, v)`` of ``[heads, lengths[i], dim]``; empty
    positions are zeros (the caller's attention mask hides them).
    """
    cache = PreallocatedCache(num_layers, capacity)
    sample = next(p for p in prefixes if p is not None)
    for layer_idx, layer in enumerate(cache.layers):
        k0, v0 = sample[layer_idx]
        b = len(prefixes)
        k = k0.new_zeros((b, k0.shape[0], width, k0.shape[-1]))
        v = v0.new_zeros((b, v0.shape[0], width, v0.shape[-1]))
        for i, p in enumerate(prefixes):
            if p is not None and lengths[i]:
                k[i, :, width - lengths[i]:] = p[layer_idx][0]
                v[i, :, width - lengths[i]:] = p[layer_idx][1]
        layer.update(k, v)
    return cache


def stack_layers(layers: list[tuple[torch.Tensor, torch.Tensor]], row: int,
                 positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batch row ``row``'s keys and values at ``positions`` (indices along the sequence) of every layer, as
    per-layer ``(k, v)`` of ``[heads, len(positions), dim]`` that are views of one ``[layers, 2, heads, len,
    dim]`` allocation.  ``layers`` holds each layer's ``(keys, values)`` of ``[batch, heads, seq, dim]``.

    One row of SmolLM2-135M at 140 tokens is 30 x 2 tensors of 53 KB: below glibc's mmap threshold each, so
    they came from the heap, and as episodes ended out of order their freed blocks stayed in the process
    (the resident set of a 256-episode evaluation climbed ~0.5 GB beyond the cache's cap).  One 3.2 MB block
    per row is its own mapping, returned to the system when the row is dropped.
    """
    k0 = layers[0][0][row]
    block = k0.new_empty((len(layers), 2, k0.shape[0], len(positions), k0.shape[-1]))
    for i, (k, v) in enumerate(layers):
        torch.index_select(k[row], 1, positions, out=block[i, 0])
        torch.index_select(v[row], 1, positions, out=block[i, 1])
    return [(block[i, 0], block[i, 1]) for i in range(len(layers))]
