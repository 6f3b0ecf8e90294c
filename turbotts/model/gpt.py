"""The ChatTTS GPT: a Llama decoder stack over input embeddings.

Parameter names equal the official ``asset/gpt/model.safetensors`` keys (an HF
LlamaModel without ``embed_tokens``), so ``GPT(cfg).load_state_dict(sd,
strict=True)`` loads it directly. Token embedding and the output heads live in
:mod:`turbotts.model.embed`; this module maps embeddings to final hidden states.

Three entry points share one layer stack and differ only in the attention
metadata (see :mod:`turbotts.model.attention_metadata`):

* :meth:`GPT.forward` dense, no cache (teacher forcing, parity tests);
* :meth:`GPT.prefill` prompts into KV slots;
* :meth:`GPT.decode`  one token per running sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from turbotts.config import GPTConfig
from turbotts.errors import EngineError
from turbotts.model.attention import Attention
from turbotts.model.attention_metadata import AttentionMetadata, DecodeMetadata, DenseMetadata, PrefillMetadata
from turbotts.model.kv_cache import KVCache
from turbotts.model.layers import MLP, Fusable, RMSNorm, Rotary, RotaryEmbedding


def kv_bytes_per_token(config: GPTConfig, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of K plus V that one cached token takes across all layers (for sizing a KV budget)."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element_size


class FusedDecode(Protocol):
    """A faster :meth:`GPT.decode` for the steps it accepts (see :mod:`turbotts.cpu.int8_decode`)."""

    def accepts(self, inputs_embeds: Tensor, cache: KVCache) -> bool: ...

    def __call__(self, inputs_embeds: Tensor, position_ids: Tensor, meta: DecodeMetadata, cache: KVCache) -> Tensor: ...


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, rotary: Rotary, meta: AttentionMetadata, kv: tuple[Tensor, Tensor] | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rotary, meta, kv)
        return x + self.mlp(self.post_attention_layernorm(x))


class GPT(nn.Module):
    """Llama decoder stack plus final norm; inputs are embeddings, outputs final hidden states."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)
        #: set by int8 quantization where the fused decode stack runs on this CPU; dropped by ``.to()``
        self.fused_decode: FusedDecode | None = None

    # -- the three modes -------------------------------------------------------------

    def forward(self, inputs_embeds: Tensor, position_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Dense causal pass without a cache.

        Args:
            inputs_embeds: (B, L, hidden).
            position_ids: (B, L) int64; the official batching uses cumsum(mask) - 1.
            attention_mask: (B, L) 1 = token, 0 = LEFT padding; None when unpadded.

        Returns:
            (B, L, hidden) after the final norm. Rows at padded positions are finite
            but meaningless.
        """
        return self.run_layers(inputs_embeds, position_ids, DenseMetadata(attention_mask), None)

    def prefill(self, inputs_embeds: Tensor, position_ids: Tensor, meta: PrefillMetadata, cache: KVCache) -> Tensor:
        """Run prompts and write their K/V into the cache slots named by ``meta``.

        Args:
            inputs_embeds: (B, L, hidden), RIGHT-padded, row b has ``meta.num_tokens[b]`` tokens;
                or with ``meta.is_packed`` (1, T, hidden), every row's tokens back to back.
            position_ids: (B, L) or (1, T) int64, normally ``meta.start_positions[b] + arange(n)`` per row.
            meta: slots, start positions and lengths.
            cache: from :meth:`new_kv_cache`.

        Returns:
            The same layout as ``inputs_embeds``; row b's last token is at index
            ``meta.num_tokens[b] - 1`` (padded) or ``meta.token_offsets[b] + meta.num_tokens[b] - 1`` (packed).

        Raises:
            EngineError: a slot does not exist or would overflow, or a packed batch is not (1, T) for its rows.
        """
        if meta.is_packed and (inputs_embeds.shape[0] != 1 or inputs_embeds.shape[1] != sum(meta.num_tokens)):
            raise EngineError(
                f"a packed prefill takes (1, {sum(meta.num_tokens)}, hidden) embeddings for its rows, "
                f"got {tuple(inputs_embeds.shape)}"
            )
        ends = [s + n for s, n in zip(meta.start_positions, meta.num_tokens, strict=True)]
        cache.check_fits(meta.slot_ids, ends)
        return self.run_layers(inputs_embeds, position_ids, meta, cache)

    def decode(self, inputs_embeds: Tensor, position_ids: Tensor, meta: DecodeMetadata, cache: KVCache) -> Tensor:
        """One step for B running sequences, each in its own slot at its own length.

        Args:
            inputs_embeds: (B, hidden), the embedding of each row's newest token.
            position_ids: (B,) int64, normally equal to ``meta.cache_lens``.
            meta: ``DecodeMetadata.build(slot_ids, cache_lens, device)``.
            cache: from :meth:`new_kv_cache`.

        Returns:
            (B, hidden) hidden state of each row's new token.

        Raises:
            EngineError: a slot does not exist or is full.
        """
        cache.check_fits(meta.slot_ids, [n + 1 for n in meta.cache_lens])
        if self.fused_decode is not None and self.fused_decode.accepts(inputs_embeds, cache):
            return self.fused_decode(inputs_embeds, position_ids, meta, cache)
        hidden = self.run_layers(inputs_embeds.unsqueeze(1), position_ids.unsqueeze(1), meta, cache)  # (B, 1, hidden)
        return hidden.squeeze(1)

    def run_layers(self, x: Tensor, position_ids: Tensor, meta: AttentionMetadata, cache: KVCache | None) -> Tensor:
        """The layer stack with no shape or capacity checks (callers check; CUDA graphs capture this)."""
        rotary = self.rotary(position_ids, x.dtype)
        for index, layer in enumerate(self.layers):
            x = layer(x, rotary, meta, None if cache is None else cache.layer(index))
        return self.norm(x)

    def _apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GPT:
        self.fused_decode = None  # it points at weights that ``.to()`` replaces
        return super()._apply(fn, *args, **kwargs)

    # -- KV cache -------------------------------------------------------------------

    def new_kv_cache(
        self,
        num_slots: int,
        max_seq_len: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache:
        """A zeroed cache for ``num_slots`` sequences of up to ``max_seq_len`` tokens
        (dtype/device default to the model's)."""
        weight = self.norm.weight
        cfg = self.config
        return KVCache(
            cfg.num_hidden_layers,
            num_slots,
            cfg.num_key_value_heads,
            max_seq_len,
            cfg.head_dim,
            dtype=dtype or weight.dtype,
            device=device or weight.device,
        )

    def kv_bytes_per_token(self, dtype: torch.dtype | None = None) -> int:
        return kv_bytes_per_token(self.config, dtype or self.norm.weight.dtype)

    # -- inference layout -----------------------------------------------------------

    def fuse(self, use_onednn: bool = True) -> GPT:
        """Fuse q/k/v and gate/up into one matmul each (one weight copy per layer).

        On float32 CPU weights with ``use_onednn`` the copies are also prepacked for
        oneDNN, which makes small-batch decode markedly faster than the default matmul.
        Costs one extra copy of the layer weights in memory. Call it after loading
        and after ``.to(...)``; loading or moving again drops the fusion (the unfused
        weights stay the source of truth), so call it again afterwards.
        """
        for module in self.modules():
            if isinstance(module, Fusable):
                module.fuse(use_onednn)
        return self

    def unfuse(self) -> GPT:
        for module in self.modules():
            if isinstance(module, Fusable):
                module.unfuse()
        return self

    @property
    def is_fused(self) -> bool:
        return all(m.is_fused for m in self.modules() if isinstance(m, Fusable))
