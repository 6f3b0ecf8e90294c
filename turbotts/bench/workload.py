"""The requests of a benchmark run: what each one asks for and when it arrives.

Output lengths are fixed per request (the engine ignores EOS), so runs of
different modes do exactly the same work and compare fairly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: how the bench feeds the engine: one request at a time, static batches, or continuous batching
MODES = ("sequential", "static", "continuous")

SENTENCES = (
    "Hello, and welcome to the TurboTTS benchmark.",
    "今天天气很好，我们一起去公园散步吧。",
    "Continuous batching lets new requests join the running batch at once.",
    "语音合成服务需要在高并发下保持低延迟。",
    "The quick brown fox jumps over the lazy dog.",
    "欢迎使用语音合成，这是一段测试文本。",
)


@dataclass(frozen=True)
class BenchRequest:
    index: int
    text: str
    num_frames: int
    arrival_s: float  # seconds after the start; 0 for closed-loop (concurrency) runs
    seed: int


def parse_output_len(spec: str) -> tuple[int, int]:
    """``"200"`` or ``"100:400"`` -> (min, max) code frames."""
    try:
        parts = [int(p) for p in spec.split(":")]
    except ValueError as exc:
        raise ValueError(f"--output-len takes N or MIN:MAX code frames, got {spec!r}") from exc
    low, high = (parts[0], parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    if len(parts) > 2 or not 1 <= low <= high:
        raise ValueError(f"--output-len takes N or MIN:MAX with 1 <= MIN <= MAX, got {spec!r}")
    return low, high


def make_workload(
    num_requests: int, output_len: tuple[int, int], request_rate: float | None, seed: int = 0
) -> list[BenchRequest]:
    """Deterministic requests; Poisson arrivals at ``request_rate`` per second, else all at t=0."""
    rng = random.Random(seed)
    clock = 0.0
    requests = []
    for index in range(num_requests):
        if request_rate is not None and index > 0:
            clock += rng.expovariate(request_rate)
        requests.append(
            BenchRequest(
                index=index,
                text=SENTENCES[index % len(SENTENCES)],
                num_frames=rng.randint(*output_len),
                arrival_s=clock if request_rate is not None else 0.0,
                seed=rng.randrange(2**62),
            )
        )
    return requests
