"""``auto`` precision: the fastest correct mode on this machine, chosen by its features and a short probe.

Why: bf16 halves the bytes a decode step reads, but where the CPU has no native
bf16 it is emulated, and the emulation costs more than the halved reads save: it
runs slower than fp32. So ``auto`` never picks an emulated mode: it requires the
feature, then times a matmul of the decode step's shape in each candidate and
keeps the faster (one small matmul, short enough to run at every start).

int8 is probed on the matmul a batch-1 decode step would run: our weight-streaming
kernel (int16 multiply-adds, native on every AVX2 CPU) where it is built, else
fbgemm, which pays only with 8-bit dot products (VNNI). Without VNNI the kernel
still makes a lone request several times faster than fp32, because the step is
bound by its weight reads and int8 reads a quarter of the bytes, so requiring VNNI
would cost exactly the machines that need int8 most. int8 changes numerics, so serving takes it only
when asked (``--quant auto``).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from turbotts.cpu import int8_gemv
from turbotts.cpu.info import CpuInfo, cpu_info
from turbotts.errors import CheckpointError
from turbotts.model.layers import FusedLinear

DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")
QUANT_CHOICES = ("auto", "none", "int8")
VOCODER_DTYPE_CHOICES = ("auto", "fp32", "bf16")
_PROBE_SHAPE = (768, 3 * 768)  # one fused q/k/v projection of the full-size GPT
_PROBE_REPEATS = 30
_MIN_GAIN = 1.1  # a candidate must be 10 % faster to replace fp32
#: With int8 weights every GPT matmul reads and writes fp32 (fbgemm's dynamic int8 kernel), so bf16
#: activations only add a cast at each of the 81 linears and slower bf16 attention and elementwise ops,
#: and save no weight reads: slower steps at every batch size, even where the CPU has native bf16.
INT8_ACTIVATIONS_WHY = "int8 matmuls take fp32 activations (bf16 would add a cast per linear)"


@dataclass(frozen=True)
class Precision:
    """The modes a model is loaded in, with why ``auto`` chose them (for logs and bench JSON)."""

    dtype: str
    quant: str
    vocoder_dtype: str
    isa: str
    reasons: tuple[str, ...] = ()

    def report(self) -> dict[str, object]:
        return {"dtype": self.dtype, "quant": self.quant, "vocoder_dtype": self.vocoder_dtype, "isa": self.isa,
                "reasons": list(self.reasons)}  # fmt: skip


def _best_time_s(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(_PROBE_REPEATS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
@torch.inference_mode()
def _probe_s(mode: str, batch: int) -> float:
    """Best time of one (batch, 768) x (768, 2304) linear in ``mode`` (fp32, bf16, int8 on fbgemm, or
    int8_kernel: the weight-streaming kernel)."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(*reversed(_PROBE_SHAPE), generator=generator) / 30
    x = torch.randn(batch, _PROBE_SHAPE[0], generator=generator)
    if mode == "bf16":
        weight, x = weight.bfloat16(), x.bfloat16()
    if mode == "int8_kernel":
        kernel = int8_gemv.load_kernel()
        assert kernel is not None  # callers probe it only where it is built
        tiles = kernel.pack(torch.round(weight * 127 / weight.abs().max()).to(torch.int8))
        scale = torch.full((weight.shape[0],), float(weight.abs().max()) / 127)
        return _best_time_s(lambda: kernel.gemv(x, tiles, scale))
    if mode == "int8":
        with warnings.catch_warnings():  # torch marks quantized tensor creation deprecated; the model uses it too
            warnings.simplefilter("ignore", UserWarning)
            layer = torch.ao.nn.quantized.dynamic.Linear(*_PROBE_SHAPE, dtype=torch.qint8)
            layer.set_weight_bias(torch.quantize_per_tensor(weight, 0.01, 0, torch.qint8), None)
        return _best_time_s(lambda: layer(x))
    fused = FusedLinear([weight], use_onednn=True)  # the kernel the model's decode step runs
    return _best_time_s(lambda: fused(x))


def _auto_quant(cpu: CpuInfo, fp32_s: float) -> tuple[str, str]:
    """int8 or none for ``--quant auto``, and why: the int8 matmul of a batch-1 step must beat fp32's."""
    if "avx2" in cpu.flags and int8_gemv.load_kernel() is not None:
        if fp32_s / _probe_s("int8_kernel", 1) >= _MIN_GAIN:
            return "int8", "the int8 decode kernel is faster in the probe"
        return "none", "the int8 decode kernel not faster in the probe"
    if not cpu.has_int8_dot:
        return "none", "no int8 decode kernel here and no 8-bit dot product (VNNI) for fbgemm"
    if fp32_s / _probe_s("int8", 1) >= _MIN_GAIN:
        return "int8", "VNNI and faster in the probe"
    return "none", "int8 not faster in the probe"


def _check(value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        raise CheckpointError(f"{flag} must be one of {', '.join(choices)}, not {value!r}")


def resolve_precision(
    dtype: str = "auto", quant: str = "none", vocoder_dtype: str = "auto", device: str = "cpu",
    cpu: CpuInfo | None = None,
) -> Precision:  # fmt: skip
    """Turn ``auto`` into concrete modes for ``device``; explicit modes pass through unchanged.

    Raises:
        CheckpointError: a mode that is not one of the choices.
    """
    _check(dtype, DTYPE_CHOICES, "--dtype")
    _check(quant, QUANT_CHOICES, "--quant")
    _check(vocoder_dtype, VOCODER_DTYPE_CHOICES, "--vocoder-dtype")
    cpu = cpu or cpu_info()
    reasons: list[str] = []
    if device.startswith("cuda"):
        if dtype == "auto":
            dtype = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"
            reasons.append(f"dtype {dtype}: GPU")
        vocoder_dtype = "fp32" if vocoder_dtype == "auto" else vocoder_dtype
        quant = "none" if quant == "auto" else quant
        return Precision(dtype, quant, vocoder_dtype, "cuda", tuple(reasons))
    fp32_s = _probe_s("fp32", 1) if "auto" in (dtype, quant, vocoder_dtype) else 0.0
    if quant == "auto":
        quant, why_quant = _auto_quant(cpu, fp32_s)
        reasons.append(f"quant {quant}: {why_quant}")
    bf16_ok = False
    if dtype == "auto" or vocoder_dtype == "auto":
        bf16_ok = cpu.has_native_bf16 and fp32_s / _probe_s("bf16", 1) >= _MIN_GAIN
    why = (
        "native bf16 and faster in the probe"
        if bf16_ok
        else ("bf16 not faster in the probe" if cpu.has_native_bf16 else "no native bf16 (it would be emulated)")
    )
    if dtype == "auto" and quant == "int8":
        dtype = "fp32"
        reasons.append(f"dtype fp32: {INT8_ACTIVATIONS_WHY}")
    elif dtype == "auto":
        dtype = "bf16" if bf16_ok else "fp32"
        reasons.append(f"dtype {dtype}: {why}")
    if vocoder_dtype == "auto":
        vocoder_dtype = "bf16" if bf16_ok else "fp32"
        reasons.append(f"vocoder {vocoder_dtype}: {why}")
    return Precision(dtype, quant, vocoder_dtype, cpu.isa, tuple(reasons))
