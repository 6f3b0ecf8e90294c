"""A whole int8 GPT decode step for a few rows in one C++ call (``kernels/decode_stack.cpp``).

Why: once the tile kernel streamed the int8 weights near bandwidth, a batch-1
step spent a large share of its time in the ~25 small eager ops per layer around
the matmuls (norms, rotary, cache writes, single-query attention) and their
Python dispatch, each too small to use the bandwidth. The stack runs those as plain
loops between the same kernel's matmuls, with the GIL released, so a step of
1 to :data:`MAX_ROWS` rows costs about its weight reads. Wider steps (a batch
of 16) run fbgemm's matmuls on the same int8 weights from inside the stack
(where fbgemm is the int8 engine): the tile kernel streams the weights once
per 4 rows and loses there, while attention over the cache, a large part of an
eager step at 16 rows, stays fused.

It reads the weights the int8 linears already hold (no copy) and writes the
same KV cache the eager path does, so a sequence can move between the two from
one step to the next (a batch grows past the row limit, or shrinks back).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any, cast

import torch
from torch import Tensor

from turbotts.cpu.settings import SWITCHES, cpu_settings
from turbotts.model.attention import Attention
from turbotts.model.attention_metadata import DecodeMetadata
from turbotts.model.gpt import GPT, DecoderLayer
from turbotts.model.kv_cache import KVCache
from turbotts.model.layers import MLP

logger = logging.getLogger(__name__)

#: ``TURBOTTS_DECODE_STACK=0`` keeps the tile kernel's matmuls but runs the rest of the step eagerly (for A/B runs)
DISABLE_ENV = SWITCHES["decode_stack"][0]
#: rows per step the stack takes on its tile kernel alone (it streams the weights once per 4 rows): at
#: 8-16 rows that beats the layer-by-layer step at long contexts but loses at short ones, where the
#: repeated weight streams dominate, so wider steps take fbgemm's matmuls, or go layer by layer without them
MAX_ROWS = 4


class Int8DecodeStack:
    """The fused decode step of one int8-quantized GPT; build it with :meth:`build`."""

    def __init__(self, gpt: GPT, stack: Any, max_rows: int | None) -> None:
        self._rotary = gpt.rotary
        self._stack = stack
        self.max_rows = max_rows  # None: any number of rows (fbgemm takes the wide ones)
        # cos and signed sin of positions 0..P-1, (2, P, head_dim): a step indexes it once, where
        # computing its rows took ~10 small ops every step; grown on demand
        self._rotary_table = torch.empty(2, 0, gpt.config.head_dim)

    @classmethod
    def build(
        cls, gpt: GPT, kernel: ModuleType | None = None, *, reduce_range: bool = False, wide: bool = True
    ) -> Int8DecodeStack | None:
        """The stack for ``gpt`` where every layer's int8 linears run on the tile kernel, else None.

        ``kernel`` is the compiled extension to run it on (default: the one the linears use);
        ``reduce_range`` is how fbgemm is called for steps wider than :data:`MAX_ROWS`;
        ``wide=False`` leaves those steps to the layer-by-layer path.
        """
        if not cpu_settings().decode_stack:
            logger.info("fused int8 decode stack off (%s): decode steps run layer by layer", DISABLE_ENV + "=0")
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
        packed = [linear.packed for linear in linears]
        wide = wide and all(p is not None for p in packed)
        stack = kernel.DecodeStack(
            norms=[norm.detach().clone() for norm in norms],  # own copies: views would keep the file mapped
            tiles=[linear.tiles for linear in linears],
            scales=[linear.scale for linear in linears],
            wide=packed if wide else [],
            reduce_range=reduce_range,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            eps=config.rms_norm_eps,
        )
        if wide:
            logger.info("fused int8 decode stack ready: every decode step runs as one call (fbgemm beyond %d rows)",
                        MAX_ROWS)  # fmt: skip
        else:
            logger.info("fused int8 decode stack ready: decode steps of 1 to %d rows run as one call", MAX_ROWS)
        return cls(gpt, stack, None if wide else MAX_ROWS)

    def accepts(self, inputs_embeds: Tensor, cache: KVCache) -> bool:
        """Whether this step fits: float32 rows (few, without wide matmuls), a contiguous float32 or
        bfloat16 CPU cache."""
        data = cache.data
        return (
            (self.max_rows is None or inputs_embeds.shape[0] <= self.max_rows)
            and inputs_embeds.dtype == torch.float32
            and data.dtype in (torch.float32, torch.bfloat16)
            and data.device.type == "cpu"
            and data.is_contiguous()
        )

    def __call__(self, inputs_embeds: Tensor, position_ids: Tensor, meta: DecodeMetadata, cache: KVCache) -> Tensor:
        """(B, hidden) embeddings -> (B, hidden) final hidden states, writing each row's K/V (callers check fit)."""
        rotary = self._rotary_rows(position_ids)  # (2, B, d)
        return cast(
            Tensor,
            self._stack.forward(
                inputs_embeds.contiguous(),
                rotary[0],
                rotary[1],
                cache.data,
                list(meta.slot_ids),
                list(meta.cache_lens),
            ),
        )

    def _rotary_rows(self, position_ids: Tensor) -> Tensor:
        """(B,) positions -> (2, B, d): each row's cos and signed sin, the values the rotary module gives."""
        needed = int(position_ids.max()) + 1
        if needed > self._rotary_table.shape[1]:
            size = max(needed, 2 * self._rotary_table.shape[1], 256)
            rotary = self._rotary(torch.arange(size)[None], torch.float32)  # tables (1, size, d)
            self._rotary_table = torch.stack([rotary.cos[0], rotary.signed_sin[0]])
        return self._rotary_table[:, position_ids]
