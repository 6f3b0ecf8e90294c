"""How far a decode step is from what memory bandwidth allows.

A batch-1 decode step reads every GPT weight once; at the machine's measured
copy bandwidth that takes ``weight_bytes / bandwidth`` seconds, the floor no
implementation can beat on this box.
"""

from __future__ import annotations

import time

import torch

from turbotts.model.chattts import ChatTTSModel

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
    gpt_bytes = sum(p.numel() * p.element_size() for p in model.modules.gpt.parameters())
    heads = model.modules.embed.head_code
    head_bytes = sum(p.numel() * p.element_size() for p in heads.parameters())
    return gpt_bytes + head_bytes
