"""A whole int8 GPT decode step for a few rows in one C++ call (``kernels/decode_stack.cpp``).

Why: once the tile kernel streamed the int8 weights near bandwidth, a batch-1
step spent about as long again in the ~25 small eager ops per layer around the
matmuls (norms, rotary, cache writes, single-query attention) and their
Python dispatch as in the matmuls themselves. The stack runs those as plain
loops between the same kernel's matmuls, with the GIL released, so a step of
1 to :data:`int8_gemv.MAX_ROWS` rows costs about its weight reads.

It reads the weights the int8 linears already hold (no copy) and writes the
same KV cache the eager path does, so a sequence can move between the two from
one step to the next (a batch grows past the row limit, or shrinks back).
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Any, cast

import torch
from torch import Tensor

from turbotts.model.attention import Attention, DecodeMetadata, KVCache
from turbotts.model.gpt import GPT, DecoderLayer
from turbotts.model.layers import MLP

logger = logging.getLogger(__name__)

#: ``TURBOTTS_DECODE_STACK=0`` keeps the tile kernel's matmuls but runs the rest of the step eagerly (for A/B runs)
DISABLE_ENV = "TURBOTTS_DECODE_STACK"
MAX_ROWS = 4


class Int8DecodeStack:
    """The fused decode step of one int8-quantized GPT; build it with :meth:`build`."""

    def __init__(self, gpt: GPT, stack: Any) -> None:
        self._rotary = gpt.rotary
        self._stack = stack

    @classmethod
    def build(cls, gpt: GPT, kernel: ModuleType | None = None) -> Int8DecodeStack | None:
        """The stack for ``gpt`` where every layer's int8 linears run on the tile kernel, else None.

        ``kernel`` is the compiled extension to run it on (default: the one the linears use).
        """
        if os.environ.get(DISABLE_ENV, "1") == "0":
            logger.info("fused int8 decode stack off (%s=0): decode steps run layer by layer", DISABLE_ENV)
            return None
        linears: list[Any] = []  # quant.Int8Linear (which imports this module)
        norms: list[Tensor] = []
        for layer in gpt.layers:
            layer = cast(DecoderLayer, layer)
            attn: Attention = layer.self_attn
            mlp: MLP = layer.mlp
            linears += [attn._qkv, attn._o, mlp._gate_up, mlp._down]
            norms += [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]
        norms.append(gpt.norm.weight)
        if not all(getattr(linear, "tiles", None) is not None for linear in linears):
            return None
        if any(norm.dtype != torch.float32 or norm.device.type != "cpu" for norm in norms):
            return None
        kernel = kernel or linears[0].kernel
        assert kernel is not None  # built together with the tiles
        config = gpt.config
        stack = kernel.DecodeStack(
            norms=[norm.detach() for norm in norms],
            tiles=[linear.tiles for linear in linears],
            scales=[linear.scale for linear in linears],
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            eps=config.rms_norm_eps,
        )
        return cls(gpt, stack)

    def accepts(self, inputs_embeds: Tensor, cache: KVCache) -> bool:
        """Whether this step fits the stack: few float32 rows, a contiguous float32 CPU cache."""
        data = cache.data
        return (
            inputs_embeds.shape[0] <= MAX_ROWS
            and inputs_embeds.dtype == torch.float32
            and data.dtype == torch.float32
            and data.device.type == "cpu"
            and data.is_contiguous()
        )

    def __call__(self, inputs_embeds: Tensor, position_ids: Tensor, meta: DecodeMetadata, cache: KVCache) -> Tensor:
        """(B, hidden) embeddings -> (B, hidden) final hidden states, writing each row's K/V (callers check fit)."""
        rotary = self._rotary(position_ids.unsqueeze(1), torch.float32)  # tables (B, 1, d)
        return cast(
            Tensor,
            self._stack.forward(
                inputs_embeds.contiguous(),
                rotary.cos.squeeze(1).contiguous(),
                rotary.signed_sin.squeeze(1).contiguous(),
                cache.data,
                list(meta.slot_ids),
                list(meta.cache_lens),
            ),
        )
