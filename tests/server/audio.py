"""Decode what the server sent with real decoders (PyAV, soundfile)."""

from __future__ import annotations

import io

import av
import numpy as np
import soundfile as sf


def decode(data: bytes, fmt: str) -> tuple[int, np.ndarray]:
    """``(sample_rate_hz, mono float32 samples)`` of one response body."""
    if fmt == "pcm":
        return 24000, np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
    if fmt == "wav":
        # a streamed wav has 0xFFFFFFFF sizes: libsndfile reads up to the end of the data
        samples, rate = sf.read(io.BytesIO(data), dtype="float32")
        return int(rate), np.asarray(samples, dtype=np.float32).reshape(-1)
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        parts = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
        rate = stream.codec_context.sample_rate
    return int(rate), np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


EXPECTED_RATE_HZ = {"mp3": 24000, "opus": 48000, "aac": 24000, "flac": 24000, "wav": 24000, "pcm": 24000}
