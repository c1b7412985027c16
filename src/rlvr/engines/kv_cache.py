"""A KV cache that pre-allocates its buffers and writes new tokens in place.

transformers' ``DynamicCache`` appends with ``torch.cat``, which copies the whole
cache of every layer at every decoding step; on CPU that copy was over half of a
decode step of SmolLM2-135M at batch 64.  This cache allocates ``capacity``
positions up front, writes each new key/value into its slot and hands attention a
view of the filled part.  It keeps ``DynamicCache``'s batch operations (repeat a
prefill across a group, drop finished rows), so it is a drop-in replacement.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

__all__ = ["PreallocatedCache"]


class _PreallocatedLayer(DynamicLayer):
    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

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
