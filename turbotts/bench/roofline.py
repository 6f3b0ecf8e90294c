"""How far a decode step is from what memory bandwidth allows.

A batch-1 decode step reads every GPT weight once; at the machine's measured
copy bandwidth that takes ``weight_bytes / bandwidth`` seconds, the floor no
implementation can beat on this box.
"""

from __future__ import annotations

import time

import torch

from turbotts.bench.read_probe import load_read_probe
from turbotts.cpu import int8_gemv, int8_prefill
from turbotts.cpu.huge_pages import huge_page_bytes
from turbotts.cpu.quant import REDUCE_RANGE, Int8Linear, stored_weight_bytes
from turbotts.model.chattts import ChatTTSModel

BANDWIDTH_PROBE_BYTES = 2**30  # far larger than any last-level cache


def measure_bandwidth_bytes_per_s(num_bytes: int = BANDWIDTH_PROBE_BYTES, repeats: int = 5) -> float:
    """Best-of-N read bandwidth: a sum over a buffer, which streams memory the way a
    decode step streams its weights (read only, once)."""
    data = torch.ones(num_bytes // 4, dtype=torch.float32)
    data.sum()  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return num_bytes / best


def measure_read_bytes_per_s(num_bytes: int, repeats: int = 5) -> float | None:
    """Best-of-N speed of a plain read loop (:mod:`turbotts.bench.read_probe`) over ``num_bytes``;
    None where it is not built here.

    Why beside the probe: torch's sum is not the fastest reader, and a buffer the size of the
    weights may partly stay in a large last-level cache between steps, as the weights do, which
    a 1 GiB probe cannot. A step measured against this is held to what its weights can stream at.
    """
    kernel = load_read_probe()
    if kernel is None:
        return None
    data = torch.ones(max(8, num_bytes // 8 * 8), dtype=torch.uint8)
    kernel.xor_words(data)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        kernel.xor_words(data)
        best = min(best, time.perf_counter() - start)
    return data.numel() / best


#: a weight small enough to stay cached between calls on a small server CPU (its last-level cache, or two cores' L2)
CACHED_WEIGHT_SHAPE = (1024, 3072)  # 3 MiB of int8


def measure_int8_kernel_cached_bytes_per_s(budget_s: float = 0.3) -> float | None:
    """The int8 decode kernel's weight bytes per second at one row on a cache-resident weight (the best call
    within ``budget_s``); None where the kernels are not built here.

    Why: the memory yardsticks assume the kernel's multiply-adds keep up with the stream. Where they
    barely do (AVX2 without VNNI: one 16-lane ``vpmaddwd`` per 16 weight bytes), the kernel is no faster
    on weights already in cache than memory streams, and the step needs compute and memory both at
    their best at once. A time budget, not a count: on a shared VM a fixed number of calls can all fall in
    a noisy stretch, while the best call within a fixed time is stable from run to run.
    """
    kernel = int8_gemv.load_kernel()
    if kernel is None:
        return None
    generator = torch.Generator().manual_seed(0)
    weight = torch.randint(-127, 128, CACHED_WEIGHT_SHAPE, dtype=torch.int8, generator=generator)
    tiles, scale = kernel.pack(weight), torch.ones(CACHED_WEIGHT_SHAPE[0])
    x = torch.randn(1, CACHED_WEIGHT_SHAPE[1], generator=generator)
    kernel.gemv(x, tiles, scale)  # into the cache
    best, end = float("inf"), time.perf_counter() + budget_s
    while time.perf_counter() < end:
        start = time.perf_counter()
        kernel.gemv(x, tiles, scale)
        best = min(best, time.perf_counter() - start)
    return weight.numel() / best


def decode_weight_bytes(model: ChatTTSModel) -> int:
    """Bytes one decode step must read: GPT layers, final norm and the audio-code heads."""
    # int8-quantized linears are counted as their int8 rows plus scales (packed, not parameters)
    return stored_weight_bytes(model.modules.gpt) + stored_weight_bytes(model.modules.embed.head_code)


def _int8_linears(model: ChatTTSModel) -> list[Int8Linear]:
    return [v for m in model.modules.gpt.modules() for v in vars(m).values() if isinstance(v, Int8Linear)]


def int8_prefill_report(model: ChatTTSModel) -> dict[str, str] | None:
    """What runs the GPT's prefill-sized int8 matmuls (``onednn`` or ``fbgemm``) and why; None without int8."""
    linears = _int8_linears(model)
    if not linears:
        return None
    name = "onednn" if linears[0].onednn is not None else "fbgemm"
    return {"matmul": name, "reason": int8_prefill.choice(REDUCE_RANGE).reason}


def int8_kernel_name(model: ChatTTSModel) -> str | None:
    """Which kernel runs the GPT's small-batch int8 decode: ``int8_gemv/<isa>`` (plus ``+decode_stack`` where the
    whole step of a few rows is one fused call), ``fbgemm``, or None (no int8)."""
    linears = _int8_linears(model)
    if not linears:
        return None
    kernel = linears[0].kernel
    if kernel is None:
        return "fbgemm"
    stack = "+decode_stack" if model.modules.gpt.fused_decode is not None else ""
    return f"int8_gemv/{kernel.isa()}{stack}"


def int8_tiles_huge_page_bytes(model: ChatTTSModel) -> int | None:
    """Bytes of huge pages behind the int8 kernel's weight tiles (see model/huge_pages); None without them."""
    tiles = [linear.tiles for linear in _int8_linears(model) if linear.tiles is not None]
    return huge_page_bytes(tiles[0]) if tiles else None
