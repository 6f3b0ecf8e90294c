"""One synthesis and its way out: audio from a source, watermarked, encoded, with its captions.

No FastAPI here. A :class:`SpeechJob` is built once, complete (resolved options, source,
segments), by :class:`~turbotts.server.speech.service.SpeechService`; the route only
streams :meth:`SpeechJob.encoded` or :meth:`SpeechJob.events`.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from turbotts.audio import read_mono
from turbotts.cache.tiered import CacheLevel
from turbotts.errors import AudioReadError, InvalidInputError
from turbotts.guard.watermark import WatermarkStream
from turbotts.params import SynthesisParams
from turbotts.server.audio.encoding import StreamEncoder
from turbotts.server.audio.timeline import Caption, Timeline
from turbotts.server.ops.metrics import Metrics
from turbotts.server.speech.pipeline import SynthesisTally
from turbotts.text.instructions import Instructed
from turbotts.text.utterances import Pause, Utterance


@dataclass(frozen=True)
class ResolvedOptions:
    """A request's options, resolved: the same params (voice, seed, speed token) for every segment."""

    params: SynthesisParams
    response_format: str
    stretch_rate: float
    warnings: tuple[str, ...] = ()
    is_deterministic: bool = False  # the client gave a seed: the audio may be cached
    bit_rate_kbps: int | None = None  # mp3, opus, aac: the server's setting for the format
    instructions: Instructed | None = None  # what ``instructions`` became (None: none given)
    playback_buffer_s: float | None = None  # the client's player buffer (None: the server's setting)


class AudioSource(Protocol):
    """Where a job's audio comes from: the segment pipeline, or the fallback clip."""

    tally: SynthesisTally
    timeline: Timeline
    sample_rate_hz: int

    def audio(self, segments: AsyncIterable[str | Utterance | Pause]) -> AsyncIterator[np.ndarray]: ...


class ClipSource:
    """The configured fallback clip, answered while the server is degraded."""

    @classmethod
    def from_file(cls, path: Path, sample_rate_hz: int) -> ClipSource:
        """The clip in ``path`` as mono float32 at the model's rate.

        Raises:
            InvalidInputError: the file cannot be read as audio.
        """
        try:
            return cls(read_mono(Path(path).expanduser(), sample_rate_hz), sample_rate_hz)
        except AudioReadError as exc:
            raise InvalidInputError(
                f"cannot read fallback_clip {path} ({exc}); give a WAV, FLAC, OGG or mp3 file"
            ) from exc

    def __init__(self, clip: np.ndarray, sample_rate_hz: int) -> None:
        self.clip = clip
        self.sample_rate_hz = sample_rate_hz
        self.tally = SynthesisTally()
        self.timeline = Timeline(sample_rate_hz)  # the clip says none of the text: no captions

    async def audio(self, segments: AsyncIterable[str | Utterance | Pause]) -> AsyncIterator[np.ndarray]:
        self.tally.num_segments, self.tally.num_samples = 1, self.clip.size
        yield self.clip


@dataclass
class SpeechJob:
    """A synthesis ready to run, and its running tally (usage and metrics).

    ``watermark`` marks the final waveform (after joining and time-stretch) chunk by
    chunk before it is encoded; ``on_first_audio`` gets the time to first audio.
    """

    resolved: ResolvedOptions
    pipeline: AudioSource
    segments: AsyncIterable[str | Utterance | Pause]
    metrics: Metrics
    started_s: float = field(default_factory=time.perf_counter)
    watermark: WatermarkStream | None = None
    on_first_audio: Callable[[float], None] | None = None
    cache_level: CacheLevel | None = None  # None: not cacheable (no seed)
    is_degraded: bool = False

    def usage(self) -> dict[str, int]:
        tally = self.pipeline.tally
        return {
            "input_tokens": tally.num_input_tokens,
            "output_tokens": tally.num_frames,
            "total_tokens": tally.num_input_tokens + tally.num_frames,
        }

    async def encoded(self) -> AsyncIterator[bytes]:
        """Bytes of ``response_format``, sent as soon as the encoder has them."""
        async for data, _ in self.captioned():
            if data:
                yield data

    async def captioned(self) -> AsyncIterator[tuple[bytes, list[Caption]]]:
        """Encoded bytes, each with the captions whose audio is complete once those bytes are sent.

        A caption waits for the next bytes the encoder gives after its last sample
        was encoded: for ``pcm`` and ``wav`` the very chunk that holds that sample, for
        an encoder that buffers (mp3, aac, opus) at most one frame later, for ``flac``
        the whole file at the end. Bytes may come with no captions.
        """
        resolved = self.resolved
        timeline = self.pipeline.timeline
        encoder = StreamEncoder(
            resolved.response_format, self.pipeline.sample_rate_hz, bit_rate_kbps=resolved.bit_rate_kbps
        )
        self.metrics.in_flight.inc()
        pending: list[Caption] = []
        is_first = True
        try:
            async for pcm in self.pipeline.audio(self.segments):
                data = encoder.encode(pcm if self.watermark is None else self.watermark.push(pcm))
                pending += timeline.release(self.pipeline.tally.num_samples)
                if data:
                    if is_first:
                        is_first = False
                        self._observe_first_audio()
                    yield data, pending
                    pending = []
            tail = encoder.finish()
            if tail and is_first:  # a buffered format (flac): its first byte is its last
                self._observe_first_audio()
            pending += timeline.release(self.pipeline.tally.num_samples)
            if tail or pending:
                yield tail, pending
            self._observe_done()
        finally:
            encoder.close()
            self.metrics.in_flight.dec()

    async def collected(self) -> tuple[bytes, list[Caption]]:
        """The whole encoded audio and every caption, once synthesis has ended."""
        parts: list[bytes] = []
        captions: list[Caption] = []
        stream = self.captioned()
        try:
            async for data, released in stream:
                parts.append(data)
                captions.extend(released)
        finally:  # cancelled (the client left): close the pipeline now, which aborts the engine requests
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator
        return b"".join(parts), captions

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Audio deltas (base64), a ``speech.audio.segment`` event after each segment's audio, then done."""
        async for data, captions in self.captioned():
            if data:
                yield {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            for caption in captions:
                yield caption.event()
        done: dict[str, Any] = {"type": "speech.audio.done", "usage": self.usage()}
        if self.resolved.instructions is not None:  # what the request's instructions became
            done["instructions"] = self.resolved.instructions.report()
        yield done

    def _observe_first_audio(self) -> None:
        ttfa_s = time.perf_counter() - self.started_s
        self.metrics.ttfa_s.labels(self.resolved.response_format).observe(ttfa_s)
        if self.on_first_audio is not None:
            self.on_first_audio(ttfa_s)

    def _observe_done(self) -> None:
        audio_s = self.pipeline.tally.num_samples / self.pipeline.sample_rate_hz
        self.metrics.audio_s.inc(audio_s)
        if audio_s > 0:
            self.metrics.rtf.observe((time.perf_counter() - self.started_s) / audio_s)
