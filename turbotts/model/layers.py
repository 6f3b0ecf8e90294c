"""Building blocks of the Llama-style GPT: RMSNorm, rotary embedding, gated MLP
and fused (optionally CPU-prepacked) linears.

Everything here follows the Hugging Face Llama conventions so the official
checkpoint loads by name and the numbers match the official package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from turbotts.config import GPTConfig
from turbotts.model.file_views import page_out


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32 (as HF does) so half-precision
    weights do not lose the variance."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # one fused kernel, bit-identical to the HF formula below in float32
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        variance = x32.pow(2).mean(-1, keepdim=True)
        return self.weight * (x32 * torch.rsqrt(variance + self.eps)).to(x.dtype)


@dataclass(frozen=True)
class Rotary:
    """cos/sin of every (row, position), shared by all layers of one forward pass.

    ``signed_sin`` is sin with its first half negated, so that
    ``rotate_half(x) * sin == x.roll(d/2) * signed_sin`` exactly: one roll
    instead of two slices, a negation and a cat per call.
    """

    cos: Tensor  # (B, L, d)
    signed_sin: Tensor  # (B, L, d)

    def apply(self, x: Tensor) -> Tensor:
        """Rotate ``x`` (B, heads, L, d)."""
        cos, signed_sin = self.cos.unsqueeze(1), self.signed_sin.unsqueeze(1)  # (B, 1, L, d)
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (HF ``rotate_half`` convention, halves not interleaved).

    cos/sin are computed from explicit position ids on every call rather than
    read from a table, because a continuous-batching step mixes rows at
    unrelated positions. ``inv_freq`` is rebuilt in float32 each call (d/2
    values) instead of being a buffer, so ``module.to(torch.bfloat16)`` cannot
    degrade it.
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta

    def inv_freq(self, device: torch.device) -> Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float() / self.head_dim
        return 1.0 / (self.theta**exponents)  # (d/2,)

    def forward(self, position_ids: Tensor, dtype: torch.dtype) -> Rotary:
        """Tables for ``position_ids`` (B, L) in ``dtype``."""
        freqs = position_ids.float().unsqueeze(-1) * self.inv_freq(position_ids.device)  # (B, L, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, L, d)
        sin = freqs.sin()
        return Rotary(emb.cos().to(dtype), torch.cat((-sin, sin), dim=-1).to(dtype))


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the last dim (the reference form of :meth:`Rotary.apply`)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FusedLinear:
    """Several bias-free linears sharing one input, run as a single matmul.

    It holds its own copy of the weights (concatenated along the output dim), so
    it must be rebuilt after the source weights change (see :class:`Fusable`). The
    sources' pages are handed back to the kernel: fp32 weights served from the mapped
    checkpoint would otherwise stay resident beside the copy (750 MB at full size) and
    are re-read from the file only if the module is unfused.
    On CPU the copy is reordered once into a oneDNN blocked layout, which runs
    decode-size matmuls (a few rows) near memory bandwidth where the default
    BLAS path, tiled for large matrices, is markedly slower.
    """

    def __init__(self, weights: list[Tensor], use_onednn: bool) -> None:
        self.out_sizes = [w.shape[0] for w in weights]
        fused = torch.cat([w.detach() for w in weights], dim=0).contiguous()  # (sum out, in)
        self.is_onednn = use_onednn and can_use_onednn(fused)
        if self.is_onednn:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(fused, None)
        else:
            self.weight = fused
        for w in weights:  # not read while fused: fp32 weights mapped from the file leave memory
            page_out(w)

    def __call__(self, x: Tensor) -> Tensor:
        if self.is_onednn:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, None, "none", [], "")
        return F.linear(x, self.weight)

    def split(self, x: Tensor) -> list[Tensor]:
        """Run and split the output back into one tensor per source linear."""
        return list(self(x).split(self.out_sizes, dim=-1))


def can_use_onednn(weight: Tensor) -> bool:
    """oneDNN prepacking applies to CPU weights in float32, and in bfloat16/float16
    where the CPU has native instructions for them (e.g. AVX512-BF16)."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    if weight.dtype == torch.float32:
        return True
    if weight.dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if weight.dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return False


class Fusable(nn.Module):
    """A module that can keep fused copies (:class:`FusedLinear`) of its weights.

    The parameters stay the source of truth (official names, strict loading);
    the copies are dropped whenever they could go stale: on ``load_state_dict``
    and on ``.to()/.half()/...``. Call ``fuse()`` again after either.
    """

    def __init__(self) -> None:
        super().__init__()
        self.is_fused = False
        self.register_load_state_dict_post_hook(_unfuse_after_load)

    def fuse(self: FusableT, use_onednn: bool = True) -> FusableT:
        self._build_fused(use_onednn)
        self.is_fused = True
        return self

    def unfuse(self: FusableT) -> FusableT:
        self._drop_fused()
        self.is_fused = False
        return self

    def _build_fused(self, use_onednn: bool) -> None:
        raise NotImplementedError

    def _drop_fused(self) -> None:
        raise NotImplementedError

    def _apply(self: FusableT, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FusableT:
        self.unfuse()  # the copies are not parameters: .to() would not convert them
        return super()._apply(fn, *args, **kwargs)


FusableT = TypeVar("FusableT", bound=Fusable)


def _unfuse_after_load(module: nn.Module, incompatible_keys: Any) -> None:
    if isinstance(module, Fusable):
        module.unfuse()


class MLP(Fusable):
    """SiLU-gated feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self._gate_up: FusedLinear | None = None
        self._down: FusedLinear | None = None

    def _build_fused(self, use_onednn: bool) -> None:
        """One gate/up matmul and a prepacked down_proj."""
        self._gate_up = FusedLinear([self.gate_proj.weight, self.up_proj.weight], use_onednn)
        self._down = FusedLinear([self.down_proj.weight], use_onednn)

    def _drop_fused(self) -> None:
        self._gate_up = None
        self._down = None

    def forward(self, x: Tensor) -> Tensor:
        if self._gate_up is None or self._down is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = self._gate_up.split(x)
        return self._down(F.silu(gate) * up)
