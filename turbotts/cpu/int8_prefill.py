"""oneDNN's int8 matmul for prefill-sized int8 calls, where a start-up probe finds it faster.

Why: a prefill multiplies every prompt token by every GPT weight, so it is bound
by compute, not by the weight stream; 16 prompts arriving at once spend most of
their time to first audio there. fbgemm's dynamic int8 linear runs it on VNNI;
oneDNN's int8 matmul uses AMX tiles where the CPU has them, whose 16-row tiles pay
on prefill shapes (hundreds of tokens) and not on a decode batch's few rows.
Both quantize the activations the same way (per tensor, asymmetric uint8,
full 8 bits) and multiply into int32, so their outputs are bit for bit the same:
adopting it changes speed, never numerics.

Which CPUs: only where fbgemm uses the full 8 bits (VNNI: with 7-bit
activations the two would differ), where the probe, one prefill-sized matmul
timed both ways at start-up, finds oneDNN at least :data:`MIN_SPEEDUP` faster, and
where that matmul's two results are bit for bit equal. (Equal on an AMX Xeon; on an
AVX-512 VNNI core without AMX the two libraries dequantize in another float order,
one ulp apart in a third of the outputs, so fbgemm is kept there.)
So an AMX machine gets it and a CPU where it does not pay keeps fbgemm, with no
threshold tuned to one of them. The cost: a third int8 copy of each GPT weight
(oneDNN's packed layout, about 190 MB at full size) on machines that adopt it.
``TURBOTTS_ONEDNN_PREFILL=0`` turns it off.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from turbotts.cpu.settings import SWITCHES, cpu_settings

logger = logging.getLogger(__name__)

DISABLE_ENV = SWITCHES["onednn_prefill"][0]
#: calls of at least this many rows (prompt tokens) go to oneDNN: above any decode batch's head call
MIN_ROWS = 32
#: oneDNN must beat fbgemm by this much in the probe to be adopted (noise must not flip it)
MIN_SPEEDUP = 1.2
#: the probe's shape: a prefill of a few prompts through the widest GPT matmul (768 -> 3072 at full size)
PROBE_ROWS, PROBE_IN, PROBE_OUT = 256, 768, 3072


@dataclass(frozen=True)
class PrefillChoice:
    """What runs prefill-sized int8 matmuls here, and why (for ``bench`` JSON and the log)."""

    is_onednn: bool
    reason: str

    @property
    def name(self) -> str:
        return "onednn" if self.is_onednn else "fbgemm"


def has_onednn_int8() -> bool:
    return hasattr(torch.ops.onednn, "qlinear_prepack") and hasattr(torch.ops.onednn, "qlinear_pointwise")


@dataclass(frozen=True)
class PackedWeight:
    """An (out, in) symmetric int8 weight in oneDNN's layout, with its per-row scales (zero points all 0)."""

    packed: Tensor
    scale: Tensor
    zero_points: Tensor


def prepack(q: Tensor, scale: Tensor) -> PackedWeight:
    """oneDNN's packed form of an (out, in) symmetric int8 weight with (out,) float32 scales."""
    zero_points = torch.zeros(scale.shape[0], dtype=torch.int64)
    return PackedWeight(torch.ops.onednn.qlinear_prepack(q, None), scale, zero_points)


def matmul(x: Tensor, weight: PackedWeight) -> Tensor:
    """(rows, in) float32 times a packed int8 weight -> (rows, out) float32, activations quantized as fbgemm does."""
    with warnings.catch_warnings():  # the quantized-tensor API is deprecated; it is what torch's dynamic Linear uses
        warnings.simplefilter("ignore")
        xq = torch.quantize_per_tensor_dynamic(x, torch.quint8, False)
        codes, x_scale, x_zero = xq.int_repr(), xq.q_scale(), xq.q_zero_point()
    return torch.ops.onednn.qlinear_pointwise(
        codes, x_scale, x_zero, weight.packed, weight.scale, weight.zero_points, None, 1.0, 0, torch.float32,
        "none", [], "",
    )  # fmt: skip


@functools.cache
def choice(reduce_range: bool) -> PrefillChoice:
    """Probe once per process whether oneDNN runs prefill-sized int8 matmuls faster than fbgemm here."""
    if not cpu_settings().onednn_prefill:
        return PrefillChoice(False, f"{DISABLE_ENV}=0")
    if reduce_range:
        return PrefillChoice(False, "no VNNI: fbgemm uses 7-bit activations, which oneDNN would not reproduce")
    if not has_onednn_int8() or "fbgemm" not in torch.backends.quantized.supported_engines:
        return PrefillChoice(False, "this torch build lacks oneDNN's or fbgemm's int8 linear")
    try:
        probe = _probe()
    except RuntimeError as exc:  # an op that exists but does not run on this CPU
        return PrefillChoice(False, f"oneDNN int8 failed its probe: {exc}")
    speedup = probe.fbgemm_s / probe.onednn_s
    reason = (
        f"probe ({PROBE_ROWS}x{PROBE_IN}->{PROBE_OUT}): oneDNN {1e3 * probe.onednn_s:.2f} ms, "
        f"fbgemm {1e3 * probe.fbgemm_s:.2f} ms"
    )
    if not probe.is_bit_equal:
        reason += "; oneDNN's results differ from fbgemm's in the last bits here, so fbgemm is kept"
    chosen = PrefillChoice(probe.is_bit_equal and speedup >= MIN_SPEEDUP, reason)
    logger.info("int8 prefill matmuls on %s (%s)", chosen.name, reason)
    return chosen


@dataclass(frozen=True)
class ProbeResult:
    """Best-of-5 seconds of one prefill-sized matmul each way, and whether the two gave the same bits."""

    onednn_s: float
    fbgemm_s: float
    is_bit_equal: bool


def _probe() -> ProbeResult:
    """Time one prefill-sized matmul on oneDNN and on fbgemm, and compare their outputs."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (PROBE_OUT, PROBE_IN), dtype=torch.int8, generator=gen)
    scale = torch.full((PROBE_OUT,), 1e-3)
    zero_points = torch.zeros(PROBE_OUT, dtype=torch.int64)
    x = torch.randn(PROBE_ROWS, PROBE_IN, generator=gen)
    packed = prepack(q, scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qweight = torch._make_per_channel_quantized_tensor(q, scale.double(), zero_points, 0)
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = "fbgemm"
        try:
            fbgemm_packed = torch.ops.quantized.linear_prepack(qweight, None)
        finally:
            torch.backends.quantized.engine = previous

    def best_of(run: Callable[[], Tensor]) -> float:
        run()  # first call: kernel creation
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    onednn_s = best_of(lambda: matmul(x, packed))
    fbgemm_s = best_of(lambda: torch.ops.quantized.linear_dynamic(x, fbgemm_packed, False))
    is_bit_equal = torch.equal(matmul(x, packed), torch.ops.quantized.linear_dynamic(x, fbgemm_packed, False))
    return ProbeResult(onednn_s, fbgemm_s, is_bit_equal)
