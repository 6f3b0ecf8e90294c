"""Self-attention over the KV cache: the only Python code that reads and writes the KV layout.

The layout itself (one slot per sequence, tokens at positions 0..len-1, no
padding) is allocated by :class:`turbotts.model.kv_cache.KVCache`; which mode a
call runs (dense, prefill or decode) is the type of its metadata argument
(:mod:`turbotts.model.attention_metadata`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from turbotts.config import GPTConfig
from turbotts.errors import EngineError
from turbotts.model.attention_metadata import (
    AttentionMetadata,
    DecodeMetadata,
    DecodeStrategy,
    DenseMetadata,
    PrefillMetadata,
)
from turbotts.model.layers import Fusable, FusedLinear, Rotary


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
        views faster than SDPA's flash kernel, which tiles for long queries.

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
