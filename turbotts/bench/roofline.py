"""How far a decode step is from what memory bandwidth allows.

A batch-1 decode step reads every GPT weight once; at the machine's measured
copy bandwidth that takes ``weight_bytes / bandwidth`` seconds, the floor no
implementation can beat on this box.
"""

from __future__ import annotations

import time

import torch

from turbotts.model.chattts import ChatTTSModel
from turbotts.model.quant import stored_weight_bytes

BANDWIDTH_PROBE_BYTES = 256 * 2**20


def measure_bandwidth_bytes_per_s(num_bytes: int = BANDWIDTH_PROBE_BYTES, repeats: int = 5) -> float:
    """Best-of-N streaming copy bandwidth, counting bytes read plus bytes written."""
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * num_bytes / best


def decode_weight_bytes(model: ChatTTSModel) -> int:
    """Bytes one decode step must read: GPT layers, final norm and the audio-code heads."""
    # int8-quantized linears are counted as their int8 rows plus scales (packed, not parameters)
    return stored_weight_bytes(model.modules.gpt) + stored_weight_bytes(model.modules.embed.head_code)
