"""The KV cache's storage, and so the KV layout: one preallocated tensor for every layer's keys and values.

The cache is preallocated (gpt-fast style): per layer one K and one V tensor of
shape (num_slots, num_kv_heads, max_seq_len, head_dim). A sequence owns one slot
for its whole life and its tokens sit at cache positions 0..len-1 with no
padding, so a slot's prefix is one contiguous view. The engine's allocator hands
out slot ids; this module never decides which slot a sequence uses.
:mod:`turbotts.model.attention` is the Python code that reads and writes the
layout defined here (the fused int8 decode stack, ``cpu/kernels/decode_stack.cpp``,
writes the same layout from C++).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Sequence

import torch
from torch import Tensor

from turbotts.errors import EngineError


class KVCache:
    """Preallocated K/V storage for ``num_slots`` sequences of up to ``max_seq_len`` tokens.

    Zero-filled rather than empty so positions past a slot's length never hold
    NaN (the padded decode path reads them under a mask, and 0 * NaN is NaN).
    On CPU the zeros come from a fresh anonymous mapping instead of a memset:
    the kernel commits a page only when a token is written to it, so resident
    memory follows the tokens actually cached, not the slots times
    ``max_seq_len`` reserved (a 128-frame utterance touches a few percent of a
    2048-token slot). Reading an untouched position maps the shared zero page,
    which costs no memory either.
    """

    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        max_seq_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self.num_slots = num_slots
        self.max_seq_len = max_seq_len
        # (layers, k|v, slots, kv_heads, max_seq_len, head_dim)
        shape = (num_layers, 2, num_slots, num_kv_heads, max_seq_len, head_dim)
        if torch.device(device or "cpu").type == "cpu":
            self._mapping, self.data = _lazy_zeros(shape, dtype)
        else:
            self.data = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def num_bytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def layer(self, index: int) -> tuple[Tensor, Tensor]:
        """(k, v) of one layer, each (num_slots, num_kv_heads, max_seq_len, head_dim)."""
        return self.data[index, 0], self.data[index, 1]

    def check_fits(self, slot_ids: Sequence[int], end_positions: Sequence[int]) -> None:
        """Raise before writing past a slot's capacity (indexing would fail obscurely or silently wrap)."""
        for slot, end in zip(slot_ids, end_positions, strict=True):
            if not 0 <= slot < self.num_slots:
                raise EngineError(
                    f"KV slot {slot} does not exist (the cache has {self.num_slots}); pass a slot id from the allocator"
                )
            if end > self.max_seq_len:
                raise EngineError(
                    f"sequence in slot {slot} needs {end} KV positions but the cache holds {self.max_seq_len}; "
                    "lower max_new_token or build the cache with a larger max_seq_len"
                )


def _lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[mmap.mmap, Tensor]:
    """A zero tensor whose pages the kernel commits on first write (see :class:`KVCache`).

    Huge pages are declined for the mapping: one written token would commit
    2 MiB, which is more than a whole head's slab of a slot.
    """
    num_bytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    mapping = mmap.mmap(-1, max(num_bytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        mapping.madvise(mmap.MADV_NOHUGEPAGE)
    tensor = torch.frombuffer(mapping, dtype=dtype, count=math.prod(shape)).view(shape)
    return mapping, tensor
