"""Segment audio from the two-level cache, and one synthesis for identical concurrent segments.

What is cached is the *unmarked* float32 audio of one segment, before joining,
time-stretch, watermark and encoding: the watermark payload differs per request
and the encoders are cheap, so one entry serves every response format and every
request. Long texts are cached segment by segment, so a request retried after a
dropped connection resumes from the segments already made.

The key (:func:`turbotts.cache.keys.cache_key`) holds the segment text, every
field of the :class:`SynthesisParams` (voice, seed, both sampling passes, the
``[speed_N]`` prompt, refine flags), the stored representation (``f32``), the
sample rate and the model fingerprint. The residual time-stretch of ``speed`` is
applied after the cache, so it is not part of the key. Only requests that name a
seed are cached (:func:`turbotts.cache.keys.is_cacheable` would accept every
server request, since the server draws a seed when the client gives none).

A miss goes through :class:`SingleFlight`: the first request streams the audio as
the engine makes it, and identical requests arriving meanwhile wait for the same
synthesis and get the whole segment at its end. No FastAPI here.
"""

from __future__ import annotations

import asyncio
import struct

import numpy as np

from turbotts.cache.keys import cache_key
from turbotts.cache.singleflight import SingleFlight
from turbotts.cache.tiered import CacheLevel, TieredCache
from turbotts.params import SynthesisParams
from turbotts.server.speech.pipeline import Emit, SegmentSource

CACHED_FORMAT = "f32"  # what the cache holds: mono float32 samples behind a frame count
_HEADER = struct.Struct("<I")  # code frames of the segment (for usage)
_MAX_CONCURRENT_LOOKUPS = 8


def pack(num_frames: int, audio: np.ndarray) -> bytes:
    return _HEADER.pack(num_frames) + np.asarray(audio, dtype="<f4").tobytes()


def unpack(value: bytes) -> tuple[int, np.ndarray]:
    (num_frames,) = _HEADER.unpack_from(value)
    return num_frames, np.frombuffer(value, dtype="<f4", offset=_HEADER.size).astype(np.float32)


class AudioCache:
    """The tiered cache and the single-flight table of one server (built in ``lifespan``)."""

    def __init__(self, cache: TieredCache, model_fingerprint: str, sample_rate_hz: int) -> None:
        self.cache = cache
        self.flights: SingleFlight[bytes] = SingleFlight()
        self.model_fingerprint = model_fingerprint
        self.sample_rate_hz = sample_rate_hz

    def key(self, text: str, params: SynthesisParams) -> str:
        return cache_key(
            text,
            params,
            response_format=CACHED_FORMAT,
            model_fingerprint=self.model_fingerprint,
            extra={"sample_rate_hz": self.sample_rate_hz},
        )

    async def look_up(self, keys: list[str]) -> CacheLevel:
        """Look every segment up once (L2 hits land in L1); the response's ``X-Cache`` level.

        ``miss`` if any segment must be synthesized, else ``l2`` if any came from Redis, else ``l1``.
        Only levels are kept, not the audio, so memory stays flat however long the text.
        """
        slots = asyncio.Semaphore(_MAX_CONCURRENT_LOOKUPS)

        async def one(key: str) -> CacheLevel:
            async with slots:
                return (await self.cache.get(key)).level

        levels = set(await asyncio.gather(*(one(k) for k in dict.fromkeys(keys))))
        if "miss" in levels:
            return "miss"
        return "l2" if "l2" in levels else "l1"

    def source(self, inner: SegmentSource, params: SynthesisParams, looked_up: frozenset[str]) -> CachedSource:
        return CachedSource(self, inner, params, looked_up)


class CachedSource:
    """A :class:`SegmentSource` that serves segments from the cache and fills it on a miss."""

    def __init__(
        self, audio_cache: AudioCache, inner: SegmentSource, params: SynthesisParams, looked_up: frozenset[str]
    ) -> None:
        self._audio_cache = audio_cache
        self._inner = inner
        self._params = params
        self._looked_up = looked_up  # keys :meth:`AudioCache.look_up` already counted

    async def run(self, text: str, request_id: str, emit: Emit) -> int:
        audio_cache = self._audio_cache
        key = audio_cache.key(text, self._params)
        if key in self._looked_up:
            value = audio_cache.cache.l1.get(key)  # counted already: read L1 directly
        else:
            value = (await audio_cache.cache.get(key)).value
        if value is not None:
            num_frames, audio = unpack(value)
            emit(audio)
            return num_frames
        is_leader = False

        async def synthesize() -> bytes:
            nonlocal is_leader
            is_leader = True
            chunks: list[np.ndarray] = []

            def collect(chunk: np.ndarray) -> None:
                chunks.append(chunk)
                emit(chunk)  # the leader streams; a cancelled leader's queue is simply dropped

            num_frames = await self._inner.run(text, request_id, collect)
            audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
            packed = pack(num_frames, audio)
            await audio_cache.cache.set(key, packed)
            return packed

        packed = await audio_cache.flights.do(key, synthesize)
        num_frames, audio = unpack(packed)
        if not is_leader:
            emit(audio)
        return num_frames
