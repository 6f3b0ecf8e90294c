"""Int8 weights for the GPT and its output heads (``--quant int8``).

Why: a small-batch decode step is memory bound, it streams every GPT weight
once, so int8 weights (a quarter of the fp32 bytes) make each step cheaper. On
CPU a decode step of 1 to 4 rows runs as one fused call
(:mod:`turbotts.cpu.int8_decode`) on our weight-streaming kernel
(:mod:`turbotts.cpu.int8_gemv`: int16 activations per row, one sequential read
of the weights); other int8 calls of 1 to 3 rows run on that kernel alone, and
larger calls on fbgemm's dynamic int8 linear (prefill-sized ones on oneDNN's
where a start-up probe finds it faster, with the same results: :mod:`turbotts.cpu.int8_prefill`): the
activations are quantized per call (per tensor, asymmetric uint8) and multiplied
with the int8 weights into int32 (VNNI), which measured faster than the
prepacked fp32 oneDNN path at batch 1 and batch 16 (see the bench figures in the
issue), and which the kernel beats only at a few rows.

Layout: symmetric int8 with one scale per output channel. Because every row
has its own scale, quantizing q, k and v separately and concatenating them is
exactly quantizing the fused weight, so the fused groups (q/k/v, gate/up and
the four code heads) stay one matmul each. The fused int8 matmul is the only
copy of those weights: the source ``nn.Linear`` modules are replaced by
:class:`Int8Placeholder`, which records the int8 bytes of its rows (so weight
accounting keeps working) and fails clearly if it is ever run, which happens
only if ``.to()`` or ``load_state_dict`` dropped the fused copies.

The Decoder, DVAE and Vocos stay float32: they run once per audio window rather
than once per code frame (a small share of the compute per audio second), and
their convolutions feed the waveform directly, where quantization noise is
audible.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from turbotts.cpu import int8_gemv, int8_prefill
from turbotts.cpu.huge_pages import HugePageBuffer, huge_page_bytes
from turbotts.cpu.info import cpu_info
from turbotts.cpu.int8_decode import Int8DecodeStack
from turbotts.errors import CheckpointError
from turbotts.model.chattts import ChatTTSModules
from turbotts.model.file_views import page_out
from turbotts.model.gpt import GPT, DecoderLayer
from turbotts.model.layers import FusedLinear

logger = logging.getLogger(__name__)

INT8_MAX = 127


# fbgemm without AVX512-VNNI adds u8*s8 pairs in int16, which saturates unless the
# activations use 7 bits (torch's dynamic Linear always does). With VNNI the full
# 8 bits are safe and measured 3x lower KL on the full-size model.
REDUCE_RANGE = "avx512_vnni" not in cpu_info().flags


def quantize_per_channel(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 with one float32 scale per output row.

    Args:
        weight: (out, in) float tensor.

    Returns:
        (out, in) int8 values in [-127, 127] and (out,) float32 scales, with
        ``weight ~= q * scale[:, None]``.
    """
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / INT8_MAX).clamp(min=1e-12)  # (out,)
    q = torch.round(w / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q.contiguous(), scale


def dequantize(q: Tensor, scale: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(out, in) int8 and (out,) scales back to a float weight."""
    return (q.to(torch.float32) * scale[:, None]).to(dtype)


def can_use_dynamic_int8(device: torch.device) -> bool:
    """Dynamic int8 linears need a CPU and a quantized engine built into torch."""
    engines = torch.backends.quantized.supported_engines
    return device.type == "cpu" and any(e in engines for e in ("fbgemm", "x86", "onednn"))


def _best_engine() -> str:
    # fbgemm measured fastest at batch 1 on AVX-512 (x86 picks oneDNN for some shapes)
    for engine in ("fbgemm", "x86", "onednn"):
        if engine in torch.backends.quantized.supported_engines:
            return engine
    raise CheckpointError("torch has no CPU quantized engine (fbgemm/x86/onednn); use --quant none")


@contextlib.contextmanager
def _quantized_engine(engine: str) -> Iterator[None]:
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def _prepack(q: Tensor, scale: Tensor) -> object:
    """fbgemm's packed int8 weight (the quantized-tensor API is deprecated but is what
    torch's dynamic Linear itself uses; its warning is silenced here only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zero_points = torch.zeros(scale.shape[0], dtype=torch.int64)
        qweight = torch._make_per_channel_quantized_tensor(q, scale.double(), zero_points, 0)
        with _quantized_engine(_best_engine()):
            return torch.ops.quantized.linear_prepack(qweight, None)


class Int8Linear(FusedLinear):
    """Bias-free linears sharing one input, stored as one int8 matrix.

    CPU: up to :data:`int8_gemv.MAX_ROWS` rows (a decode step of a few
    sequences) run on our weight-streaming kernel where it is built, more rows on
    fbgemm's dynamic int8 (int8 x uint8 -> int32 -> float). The kernel keeps its
    own tile-ordered copy of the int8 weights, so int8 with the kernel holds the
    GPT's weights twice (about 190 MB more at full size). Other devices:
    weight-only int8, dequantized on the fly into the activation dtype (correct
    and 4x smaller in memory, not tuned for speed).
    """

    def __init__(self, weights: list[Tensor]) -> None:
        self.out_sizes = [w.shape[0] for w in weights]
        fused = torch.cat([w.detach() for w in weights], dim=0)  # (sum out, in)
        q, scale = quantize_per_channel(fused)
        self.num_bytes = q.numel() * q.element_size() + scale.numel() * scale.element_size()
        self.is_onednn = False
        self.packed = _prepack(q, scale) if can_use_dynamic_int8(fused.device) else None
        # the packed form is self-contained; keep the plain int8 copy only for the fallback
        self.weight = q if self.packed is None else torch.empty(0, dtype=torch.int8)
        self.scale = scale
        kernel = int8_gemv.load_kernel() if self.packed is not None and int8_gemv.fits(*q.shape) else None
        self.kernel = kernel
        self.tiles = kernel.pack(q) if kernel is not None else None
        # prefill-sized calls on oneDNN where it measured faster here (the same results: see int8_prefill)
        is_onednn = self.packed is not None and int8_prefill.choice(REDUCE_RANGE).is_onednn
        self.onednn = int8_prefill.prepack(q, scale) if is_onednn else None

    def __call__(self, x: Tensor) -> Tensor:
        rows = x.numel() // x.shape[-1]
        if self.tiles is not None and rows <= int8_gemv.MAX_ROWS:
            assert self.kernel is not None  # built together with the tiles
            y = self.kernel.gemv(x.reshape(rows, x.shape[-1]).float(), self.tiles, self.scale)  # (rows, out)
            y = y.view(*x.shape[:-1], y.shape[-1])
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        if self.onednn is not None and rows >= int8_prefill.MIN_ROWS:
            y = int8_prefill.matmul(x.reshape(rows, x.shape[-1]).float(), self.onednn)
            y = y.view(*x.shape[:-1], y.shape[-1])
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        if self.packed is not None:
            y = torch.ops.quantized.linear_dynamic(x.float(), self.packed, REDUCE_RANGE)
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        return F.linear(x, dequantize(self.weight, self.scale, x.dtype))


class Int8Placeholder(nn.Module):
    """Stands where a float ``nn.Linear`` was; its rows live in the parent's :class:`Int8Linear`."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        # int8 rows plus one float32 scale per row
        self.num_bytes = self.out_features * self.in_features + 4 * self.out_features

    def forward(self, x: Tensor) -> Tensor:
        raise CheckpointError(
            "this GPT was quantized to int8 at load time and its fused int8 weights were dropped "
            "(by .to() or load_state_dict); load the model again with the device, dtype and quant you want"
        )


def _take(parent: nn.Module, names: list[str]) -> Int8Linear:
    """Quantize ``parent.<names>`` into one fused int8 matmul and leave placeholders behind."""
    linears = [getattr(parent, name) for name in names]
    fused = Int8Linear([linear.weight for linear in linears])
    for name, linear in zip(names, linears, strict=True):
        page_out(linear.weight)  # the float rows are not read again: do not keep the file's pages resident
        setattr(parent, name, Int8Placeholder(linear))
    return fused


QUANT_MODES = ("none", "int8")


def speedup_for(quant: str) -> Callable[[ChatTTSModules], None] | None:
    """What the loader runs in place of fusing for ``--quant`` (None: fuse, the fp32/bf16 path).

    Raises:
        CheckpointError: an unknown mode.
    """
    if quant not in QUANT_MODES:
        raise CheckpointError(f"--quant must be one of {', '.join(QUANT_MODES)}, not {quant!r}")
    return None if quant == "none" else functools.partial(quantize_gpt, mode=quant)


def quantize_gpt(modules: ChatTTSModules, mode: str) -> None:
    """Replace the GPT's and the heads' linears by int8 matmuls, in place.

    Call it once, after the modules are on their device (the loader does, given :func:`speedup_for`).

    Args:
        modules: the loaded modules; only ``gpt`` and ``embed`` change.
        mode: ``"int8"``.

    Raises:
        CheckpointError: an unknown mode, or no quantized engine in this torch build.
    """
    if mode != "int8":
        raise CheckpointError(f"--quant must be none or int8, not {mode!r}")
    quantize_layers(modules.gpt)
    embed = modules.embed
    heads = [cast(nn.Linear, head) for head in embed.head_code]
    embed._code_heads = Int8Linear([head.weight for head in heads])
    for index, head in enumerate(heads):
        page_out(head.weight)
        embed.head_code[index] = Int8Placeholder(head)
    embed._text_head = _take(embed, ["head_text"])
    embed.is_fused = True


def quantize_layers(gpt: GPT) -> None:
    """Replace the layer stack's linears by int8 matmuls, in place, and attach the fused
    decode step where the tile kernel runs here."""
    for layer in gpt.layers:
        attn, mlp = cast(DecoderLayer, layer).self_attn, cast(DecoderLayer, layer).mlp
        attn._qkv = _take(attn, ["q_proj", "k_proj", "v_proj"])
        attn._o = _take(attn, ["o_proj"])
        mlp._gate_up = _take(mlp, ["gate_proj", "up_proj"])
        mlp._down = _take(mlp, ["down_proj"])
        attn.is_fused = mlp.is_fused = True
    _tiles_to_huge_pages(gpt)
    gpt.fused_decode = Int8DecodeStack.build(gpt, reduce_range=REDUCE_RANGE)


def _tiles_to_huge_pages(gpt: GPT) -> None:
    """Put the layer stack's kernel tiles, in step order, into one huge-page buffer (see huge_pages)."""
    linears = []
    for layer in gpt.layers:
        attn, mlp = cast(DecoderLayer, layer).self_attn, cast(DecoderLayer, layer).mlp
        linears += [attn._qkv, attn._o, mlp._gate_up, mlp._down]
    int8_linears = [linear for linear in linears if isinstance(linear, Int8Linear)]
    tiles = [linear.tiles for linear in int8_linears if linear.tiles is not None]
    if len(tiles) != len(linears):
        return
    num_bytes = sum(tile.nbytes for tile in tiles)
    del tiles  # each old copy is freed as its linear takes the new one
    buffer = HugePageBuffer.create(num_bytes)
    if buffer is None:
        return
    for linear in int8_linears:
        linear.tiles = buffer.place(cast(Tensor, linear.tiles))
    logger.info(
        "int8 tiles on transparent huge pages: %.0f MiB, %.0f MiB of it granted",
        num_bytes / 2**20,
        (huge_page_bytes(buffer.bytes) or 0) / 2**20,
    )


def is_quantized(module: nn.Module) -> bool:
    return any(isinstance(m, Int8Placeholder) for m in module.modules())


def stored_weight_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s weights as stored: float parameters at their dtype,
    int8-quantized linears as int8 rows plus their scales."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    return params + sum(m.num_bytes for m in module.modules() if isinstance(m, Int8Placeholder))
