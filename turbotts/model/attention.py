"""Self-attention and the KV cache: the only code that knows the KV layout.

The cache is preallocated (gpt-fast style): per layer one K and one V tensor of
shape (num_slots, num_kv_heads, max_seq_len, head_dim). A sequence owns one slot
for its whole life and its tokens sit at cache positions 0..len-1 with no
padding, so a slot's prefix is one contiguous view. The engine's allocator hands
out slot ids; this module never decides which slot a sequence uses.

Three modes, chosen by the type of the metadata argument:

* :class:`DenseMetadata`   no cache; (B, L) batch, causal, optional LEFT padding
  (teacher forcing and parity with the official package).
* :class:`PrefillMetadata` write B sequences into their slots starting at a
  given position (0 for a fresh prompt, > 0 to extend one), causal.
* :class:`DecodeMetadata`  one new token per row, each row in its own slot at
  its own length (continuous batching).
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
import mmap
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from turbotts.config import GPTConfig
from turbotts.errors import EngineError
from turbotts.model.layers import Fusable, FusedLinear, Rotary


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


class Attention(Fusable):
    """Multi-head self-attention with HF Llama parameter names (q/k/v/o_proj, no bias)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden, head_dim = config.hidden_size, config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, self.num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * head_dim, hidden, bias=False)
        self._qkv: FusedLinear | None = None
        self._o: FusedLinear | None = None

    def _build_fused(self, use_onednn: bool) -> None:
        """One q/k/v matmul and a prepacked o_proj."""
        self._qkv = FusedLinear([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight], use_onednn)
        self._o = FusedLinear([self.o_proj.weight], use_onednn)

    def _drop_fused(self) -> None:
        self._qkv = None
        self._o = None

    def forward(self, x: Tensor, rotary: Rotary, meta: AttentionMetadata, kv: tuple[Tensor, Tensor] | None) -> Tensor:
        """x (B, L, hidden) -> (B, L, hidden); ``kv`` is this layer's cache (required
        unless ``meta`` is DenseMetadata)."""
        batch, seq_len, _ = x.shape
        if self._qkv is None:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            q, k, v = self._qkv.split(x)
        q = q.view(batch, seq_len, self.num_heads, self.head_dim).transpose(1, 2)  # (B, h, L, d)
        k = k.view(batch, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, kvh, L, d)
        v = v.view(batch, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, kvh, L, d)
        q, k = rotary.apply(q), rotary.apply(k)
        if isinstance(meta, DenseMetadata):
            out = self._dense(q, k, v, meta)
        elif kv is None:
            raise EngineError("prefill and decode need a KV cache; build one with GPT.new_kv_cache")
        elif isinstance(meta, PrefillMetadata):
            out = self._prefill(q, k, v, meta, kv)
        else:
            out = self._decode(q, k, v, meta, kv)
        out = out.transpose(1, 2).reshape(batch, seq_len, self.num_heads * self.head_dim)  # (B, L, h*d)
        return self.o_proj(out) if self._o is None else self._o(out)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        gqa = self.num_kv_heads != self.num_heads
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)

    def _single_query_attention(self, q: Tensor, keys: Tensor, values: Tensor, key_mask: Tensor) -> Tensor:
        """One query per row as two batched matmuls: on CPU this reads strided cache
        views about 20% faster than SDPA's flash kernel, which tiles for long queries.

        q (N, h, 1, d), keys/values (N, kvh, K, d), key_mask (N, 1, 1, K) bool -> (N, h, 1, d).
        """
        if self.num_kv_heads != self.num_heads:
            return self._sdpa(q, keys, values, mask=key_mask)
        scores = torch.matmul(q, keys.transpose(-1, -2)).mul_(self.head_dim**-0.5)  # (N, h, 1, K)
        scores.masked_fill_(~key_mask, float("-inf"))
        return torch.matmul(scores.softmax(dim=-1), values)  # (N, h, 1, d)

    def _dense(self, q: Tensor, k: Tensor, v: Tensor, meta: DenseMetadata) -> Tensor:
        if meta.attention_mask is None:
            return self._sdpa(q, k, v, is_causal=True)
        seq_len = q.shape[2]
        is_token = meta.attention_mask.bool()  # (B, L)
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=q.device).tril()  # (L, L)
        # A padded query sees no token; letting it see itself avoids an all-masked
        # row (NaN), and its output is zeroed below.
        diagonal = torch.eye(seq_len, dtype=torch.bool, device=q.device)
        mask = (causal & is_token[:, None, None, :]) | diagonal  # (B, 1, L, L)
        out = self._sdpa(q, k, v, mask=mask)
        return out * is_token[:, None, :, None].to(out.dtype)

    def _prefill(self, q: Tensor, k: Tensor, v: Tensor, meta: PrefillMetadata, kv: tuple[Tensor, Tensor]) -> Tensor:
        k_cache, v_cache = kv
        out = torch.zeros_like(q)  # right padding stays zero
        for row, (slot, start, count) in enumerate(
            zip(meta.slot_ids, meta.start_positions, meta.num_tokens, strict=True)
        ):
            end = start + count
            batch, tokens = meta.token_slice(row)
            k_cache[slot, :, start:end] = k[batch, :, tokens]  # (cast to the cache's dtype where it differs)
            v_cache[slot, :, start:end] = v[batch, :, tokens]
            q_row = q[batch : batch + 1, :, tokens]  # (1, h, n, d)
            keys = k_cache[slot : slot + 1, :, :end].to(q.dtype)  # (1, kvh, end, d)
            values = v_cache[slot : slot + 1, :, :end].to(q.dtype)
            if start == 0:
                out[batch : batch + 1, :, tokens] = self._sdpa(q_row, keys, values, is_causal=True)
            else:
                # query i sits at position start + i and sees keys 0..start + i
                key_pos = torch.arange(end, device=q.device)
                query_pos = torch.arange(start, end, device=q.device)
                mask = key_pos[None, :] <= query_pos[:, None]  # (n, end)
                out[batch : batch + 1, :, tokens] = self._sdpa(q_row, keys, values, mask=mask)
        return out

    def _decode(self, q: Tensor, k: Tensor, v: Tensor, meta: DecodeMetadata, kv: tuple[Tensor, Tensor]) -> Tensor:
        k_cache, v_cache = kv
        # one scatter for the whole batch: (B, kvh, d) into cache[slot_i, :, len_i]
        k_cache[meta.slot_index, :, meta.write_index] = k[:, :, 0].to(k_cache.dtype)
        v_cache[meta.slot_index, :, meta.write_index] = v[:, :, 0].to(v_cache.dtype)
        if meta.strategy is DecodeStrategy.SLOT_RANGE:
            assert meta.key_mask is not None  # built with the strategy
            span, num_keys = meta.key_mask.shape[0], meta.key_mask.shape[-1]
            lo = meta.slot_lo
            keys = k_cache[lo : lo + span, :, :num_keys].to(q.dtype)  # (span, kvh, num_keys, d) view, no copy
            values = v_cache[lo : lo + span, :, :num_keys].to(q.dtype)  # (a copy where the cache is bf16)
            range_rows = meta.slot_index - lo
            q_range = q.new_zeros(span, *q.shape[1:])  # (span, h, 1, d)
            q_range[range_rows] = q
            return self._single_query_attention(q_range, keys, values, meta.key_mask)[range_rows]  # (B, h, 1, d)
        if meta.key_mask is not None:  # DecodeStrategy.GATHER
            num_keys = meta.key_mask.shape[-1]
            keys = k_cache[meta.slot_index, :, :num_keys].to(q.dtype)  # (B, kvh, num_keys, d) copy
            values = v_cache[meta.slot_index, :, :num_keys].to(q.dtype)
            return self._sdpa(q, keys, values, mask=meta.key_mask)
        rows = []
        for row, (slot, length) in enumerate(zip(meta.slot_ids, meta.cache_lens, strict=True)):
            keys = k_cache[slot : slot + 1, :, : length + 1].to(q.dtype)  # (1, kvh, len + 1, d) view
            values = v_cache[slot : slot + 1, :, : length + 1].to(q.dtype)
            rows.append(self._sdpa(q[row : row + 1], keys, values))
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)  # (B, h, 1, d)
