"""Attention metadata: how one forward pass addresses the KV cache, passed to every layer as an argument.

Three modes, chosen by the type of the metadata argument:

* :class:`DenseMetadata`   no cache; (B, L) batch, causal, optional LEFT padding
  (teacher forcing and parity with the official package).
* :class:`PrefillMetadata` write B sequences into their slots starting at a
  given position (0 for a fresh prompt, > 0 to extend one), causal.
* :class:`DecodeMetadata`  one new token per row, each row in its own slot at
  its own length (continuous batching).

Plain frozen dataclasses, built once per step and shared by all layers, never a
module-level global; :mod:`turbotts.model.attention` reads them.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from turbotts.errors import EngineError


@dataclass(frozen=True)
class DenseMetadata:
    """No cache. ``attention_mask`` (B, L) is 1 for tokens and 0 for LEFT padding; None = no padding."""

    attention_mask: Tensor | None = None


@dataclass(frozen=True)
class PrefillMetadata:
    """Row b holds ``num_tokens[b]`` tokens that go to slot ``slot_ids[b]`` at positions
    ``start_positions[b]`` onward; its first ``start_positions[b]`` positions must already be cached.

    The rows are either a RIGHT-padded (B, L) batch or, with ``is_packed``, one (1, T)
    row of every prompt back to back (row b from ``token_offsets[b]``): the matmuls then
    run over real tokens only, where padding to the longest prompt would cost up to
    half of a prefill's compute.
    """

    slot_ids: tuple[int, ...]
    start_positions: tuple[int, ...]
    num_tokens: tuple[int, ...]
    is_packed: bool = False

    def __post_init__(self) -> None:
        if not len(self.slot_ids) == len(self.start_positions) == len(self.num_tokens):
            raise EngineError("prefill needs one slot id, start position and token count per row")
        if min(self.num_tokens, default=1) < 1:
            raise EngineError("a prefill row must hold at least one token")

    @classmethod
    def build(
        cls,
        slot_ids: Sequence[int],
        num_tokens: Sequence[int],
        start_positions: Sequence[int] | None = None,
        *,
        is_packed: bool = False,
    ) -> PrefillMetadata:
        starts = tuple(start_positions) if start_positions is not None else (0,) * len(slot_ids)
        return cls(tuple(slot_ids), starts, tuple(num_tokens), is_packed)

    @functools.cached_property
    def token_offsets(self) -> tuple[int, ...]:
        """Where each row's tokens start in a packed batch."""
        return (0, *itertools.accumulate(self.num_tokens))[:-1]

    def token_slice(self, row: int) -> tuple[int, slice]:
        """(batch index, token range) of ``row``'s tokens in the (B, ..., L, ...) layout."""
        if self.is_packed:
            offset = self.token_offsets[row]
            return 0, slice(offset, offset + self.num_tokens[row])
        return row, slice(0, self.num_tokens[row])


class DecodeStrategy(enum.Enum):
    """How a decode step reads the cache.

    PER_SLOT: attend over each slot's contiguous cache view in place, one SDPA per
    row (no copy, but one kernel call per row and layer). GATHER: copy
    cache[slot_ids, :, :max_len] into a padded batch and run one masked SDPA (shapes
    that depend only on B and the padded length, which suits GPUs and CUDA
    graphs). SLOT_RANGE: one masked SDPA over the cache view of the slot range the
    batch occupies (no copy, one call; slots are handed out lowest first, so the
    running set is nearly contiguous). AUTO: SLOT_RANGE while the range is compact,
    else PER_SLOT (the CPU default).
    """

    PER_SLOT = "per_slot"
    GATHER = "gather"
    SLOT_RANGE = "slot_range"
    AUTO = "auto"


#: SLOT_RANGE attends over the view cache[lo:hi + 1, :, :max_len] (no copy) in one
#: masked SDPA; holes in the range cost wasted reads, so AUTO uses it while the
#: range is at most this many times the batch, and PER_SLOT otherwise.
MAX_RANGE_PER_ROW = 2.0


@dataclass(frozen=True)
class DecodeMetadata:
    """Row i is one new token for slot ``slot_ids[i]`` which already caches
    ``cache_lens[i]`` tokens; the token is written at position ``cache_lens[i]``.

    Build it once per step with :meth:`build`; all layers share its tensors.
    """

    slot_ids: tuple[int, ...]
    cache_lens: tuple[int, ...]
    slot_index: Tensor  # (B,) int64
    write_index: Tensor  # (B,) int64, = cache_lens
    key_mask: Tensor | None  # GATHER: (B, 1, 1, max_len + 1); SLOT_RANGE: (hi - lo + 1, 1, 1, max_len + 1)
    strategy: DecodeStrategy
    slot_lo: int = 0  # SLOT_RANGE: first slot of the range

    @classmethod
    def build(
        cls,
        slot_ids: Sequence[int],
        cache_lens: Sequence[int],
        device: torch.device | str | None = None,
        strategy: DecodeStrategy = DecodeStrategy.PER_SLOT,
    ) -> DecodeMetadata:
        slots, lens = tuple(slot_ids), tuple(cache_lens)
        if len(slots) != len(lens) or not slots:
            raise EngineError("a decode batch needs one cache length per slot id and at least one row")
        if len(set(slots)) != len(slots):
            raise EngineError("a decode batch lists the same KV slot twice; each sequence needs its own slot")
        lens_t = torch.tensor(lens, dtype=torch.int64, device=device)
        slots_t = torch.tensor(slots, dtype=torch.int64, device=device)
        num_keys = max(lens) + 1
        if strategy is DecodeStrategy.AUTO:
            span = max(slots) - min(slots) + 1
            strategy = DecodeStrategy.SLOT_RANGE if span <= MAX_RANGE_PER_ROW * len(slots) else DecodeStrategy.PER_SLOT
        if strategy is DecodeStrategy.PER_SLOT:
            return cls(slots, lens, slots_t, lens_t, None, strategy)
        positions = torch.arange(num_keys, device=device)
        if strategy is DecodeStrategy.GATHER:
            key_mask = (positions[None, :] <= lens_t[:, None])[:, None, None, :]  # (B, 1, 1, num_keys)
            return cls(slots, lens, slots_t, lens_t, key_mask, strategy)
        lo = min(slots)  # DecodeStrategy.SLOT_RANGE
        # rows of the range that no sequence of this batch owns see only key 0 (never NaN)
        range_lens = torch.zeros(max(slots) - lo + 1, dtype=torch.int64, device=device)
        range_lens[slots_t - lo] = lens_t
        key_mask = (positions[None, :] <= range_lens[:, None])[:, None, None, :]  # (span, 1, 1, num_keys)
        return cls(slots, lens, slots_t, lens_t, key_mask, strategy, slot_lo=lo)


AttentionMetadata = DenseMetadata | PrefillMetadata | DecodeMetadata
