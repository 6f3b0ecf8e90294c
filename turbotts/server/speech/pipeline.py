"""Long text and text streams: segments synthesized a bounded number ahead, audio joined in order.

One request becomes a sequence of segments (sentences or packed sentences).
A feeder task starts segment synthesis while at most ``max_segments_in_flight`` segments
are started but not yet fully streamed (a ring of two by default: the one being
sent and the next one). The consumer streams segment after segment through an
:class:`AudioAssembler` (a short crossfade at each boundary, time-stretch, exact
pauses, and the caption :class:`Timeline`), so however long the text, memory holds
at most ``max_segments_in_flight`` segments of audio. Every segment
uses the same :class:`SynthesisParams` (voice and seed), so the voice stays the
same across the request, except the segments of an SSML ``<voice>``: they come from
that voice's own source (``voice_sources``, its params resolved before the job starts).
No FastAPI here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import InvalidInputError
from turbotts.params import SynthesisParams
from turbotts.server.audio.timeline import Timeline, caption_text
from turbotts.server.speech.assembler import AudioAssembler
from turbotts.text.segment import SentenceBuffer
from turbotts.text.segmenter import split_plain
from turbotts.text.utterances import Pause, Utterance, as_utterance

_END = object()


@dataclass
class SynthesisTally:
    """What a request produced, for usage and metrics."""

    num_segments: int = 0
    num_frames: int = 0
    num_samples: int = 0
    num_input_tokens: int = 0
    first_audio_s: float | None = None


async def sentences_of(pieces: AsyncIterable[str], max_chars: int) -> AsyncIterator[str]:
    """Clean, speakable segments of a text stream, as soon as each sentence is complete.

    Each sentence is cut as the one segmenter cuts plain text (:func:`split_plain`).
    """
    buffer = SentenceBuffer(max_chars)
    async for piece in pieces:
        for sentence in buffer.push(piece):
            for utterance in split_plain(sentence, max_chars):
                yield utterance.text
    for sentence in buffer.flush():
        for utterance in split_plain(sentence, max_chars):
            yield utterance.text


Emit = Callable[[np.ndarray], None]


class SegmentSource(Protocol):
    """Makes the audio of one segment: calls ``emit`` with its chunks in order, returns its code frames."""

    async def run(self, text: str, request_id: str, emit: Emit) -> int: ...


class EngineSource:
    """Every segment straight from the engine: streamed chunk by chunk, or whole for buffered formats."""

    def __init__(
        self,
        engine: AsyncEngine,
        params: SynthesisParams,
        on_request: Callable[[], None] | None = None,
        *,
        is_realtime: bool = True,
        playback_buffer_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.params = params
        self._on_request = on_request  # counts engine requests (a metric)
        # False: the client gets the audio whole (flac), so it is batch work, decoded once at the end: the
        # exact one-shot audio, without the chunks' re-decoded context (about a third of the vocoder's work)
        self.is_realtime = is_realtime
        self.playback_buffer_s = playback_buffer_s  # the listener's player buffer: its deadlines

    async def run(self, text: str, request_id: str, emit: Emit) -> int:
        if self._on_request is not None:
            self._on_request()
        num_frames = 0
        outputs = self.engine.generate(
            text, self.params, request_id=request_id, stream=self.is_realtime, is_realtime=self.is_realtime,
            playback_buffer_s=self.playback_buffer_s,
        )  # fmt: skip
        try:
            async for output in outputs:
                if output.audio.size:
                    emit(output.audio)
                if output.is_finished:
                    num_frames = output.num_frames
        finally:
            aclose = getattr(outputs, "aclose", None)
            if aclose is not None:
                await aclose()  # at once, not at garbage collection: this aborts the engine request
        return num_frames


class _Segment:
    """One segment being synthesized; its audio chunks wait in a queue for the consumer."""

    def __init__(
        self, source: SegmentSource, utterance: Utterance, caption: str, request_id: str, voice: str | None
    ) -> None:
        self.chunks: asyncio.Queue[np.ndarray | BaseException | None] = asyncio.Queue()
        self.num_frames = 0
        self.utterance = utterance
        self.caption = caption
        self.voice = voice  # the caption's voice name (None: unnamed)
        self.task = asyncio.create_task(self._run(source, utterance.text, request_id))

    async def _run(self, source: SegmentSource, text: str, request_id: str) -> None:
        try:
            self.num_frames = await source.run(text, request_id, self.chunks.put_nowait)
            self.chunks.put_nowait(None)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self.chunks.put_nowait(exc)


async def _next_segment(ring: asyncio.Queue[object]) -> _Segment | Pause | None:
    """The next started segment (or pause) from the feeder; None at the end; the text source's error raises here."""
    item = await ring.get()
    if item is _END:
        return None
    if isinstance(item, BaseException):
        raise item
    assert isinstance(item, _Segment | Pause)
    return item


class SegmentPipeline:
    """Synthesizes a stream of segment texts in order with bounded look-ahead."""

    def __init__(
        self,
        engine: AsyncEngine,
        params: SynthesisParams,
        *,
        request_id: str,
        max_segments_in_flight: int = 2,
        stretch_rate: float = 1.0,
        sample_rate_hz: int = 24000,
        count_tokens: Callable[[str], int] | None = None,
        source: SegmentSource | None = None,
        observe_in_flight: Callable[[int, int], None] | None = None,
        spoken_text: Callable[[str], str] | None = None,
        voice_sources: Mapping[str, SegmentSource] | None = None,
        default_voice: str | None = None,
    ) -> None:
        """``voice_sources``: the source of each SSML ``<voice name>``; ``default_voice``: the caption name of
        the request's own voice in such a document (None: unnamed)."""
        self.engine = engine
        self.params = params
        self.request_id = request_id
        self.max_segments_in_flight = max_segments_in_flight
        self.stretch_rate = stretch_rate
        self.sample_rate_hz = sample_rate_hz
        self.count_tokens = count_tokens
        self.source = source or EngineSource(engine, params)
        self.voice_sources = voice_sources if voice_sources is not None else {}  # may fill lazily: never `or`
        self.default_voice = default_voice
        self.tally = SynthesisTally()
        self.timeline = Timeline(sample_rate_hz)
        self._spoken_text = spoken_text  # the text as the model says it (front end), for captions
        self._ids = itertools.count()
        self._observe_in_flight = observe_in_flight  # (change, segments now in flight): a metric
        self.num_in_flight = 0
        self._last_error: InvalidInputError | None = None

    def _count_in_flight(self, change: int) -> None:
        self.num_in_flight += change
        if self._observe_in_flight is not None:
            self._observe_in_flight(change, self.num_in_flight)

    async def audio(self, segments: AsyncIterable[str | Utterance | Pause]) -> AsyncIterator[np.ndarray]:
        """Float32 audio of every segment, in order, crossfaded and time-stretched, pauses as exact silence.

        ``self.timeline`` places each segment as its audio leaves (captions).

        Raises:
            InvalidInputError: no segment could be synthesized (the last segment's error).
            QueueFullError, EngineError: from the engine.
        """
        slots = asyncio.Semaphore(self.max_segments_in_flight)
        ring: asyncio.Queue[object] = asyncio.Queue()
        feeder = asyncio.create_task(self._feed(segments, slots, ring))
        post = AudioAssembler(self.stretch_rate, self.sample_rate_hz, self.tally, self.timeline)
        started: list[_Segment] = []
        try:
            while (segment := await _next_segment(ring)) is not None:
                if isinstance(segment, Pause):
                    if (pcm := post.pause(segment.duration_ms)).size:
                        yield pcm
                    continue
                started.append(segment)  # until all its audio is sent: a stream closed sooner cancels it in _stop
                async for pcm in self._segment_audio(segment, post):
                    yield pcm
                started.remove(segment)
                slots.release()
                self._count_in_flight(-1)
            if (tail := post.finish()).size:
                yield tail
            if self.tally.num_segments == 0 and self._last_error is not None:
                raise self._last_error
        finally:
            await self._stop(feeder, ring, started)

    async def _segment_audio(self, segment: _Segment, post: AudioAssembler) -> AsyncIterator[np.ndarray]:
        """One segment's audio as it arrives; a segment with nothing speakable is skipped, not fatal."""
        if (pcm := post.begin_segment(segment.caption, segment.utterance.rate, segment.voice)).size:
            yield pcm
        while (chunk := await segment.chunks.get()) is not None:
            if isinstance(chunk, InvalidInputError):
                self._last_error = chunk  # e.g. nothing speakable once normalized
                break
            if isinstance(chunk, BaseException):
                raise chunk
            if (pcm := post.add(chunk)).size:
                yield pcm
        else:
            self.tally.num_segments += 1
            self.tally.num_frames += segment.num_frames
        if (pcm := post.end_segment()).size:
            yield pcm

    async def _stop(self, feeder: asyncio.Task[None], ring: asyncio.Queue[object], started: list[_Segment]) -> None:
        """Stop feeding and cancel every started segment (which aborts its engine request)."""
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
        while not ring.empty():
            item = ring.get_nowait()
            if isinstance(item, _Segment):
                started.append(item)
        for segment in started:
            segment.task.cancel()  # closes its engine iterator, which aborts the engine request
        if self.num_in_flight:
            self._count_in_flight(-self.num_in_flight)

    def _caption(self, text: str) -> str:
        return caption_text(self._spoken_text(text) if self._spoken_text is not None else text)

    async def _feed(
        self, segments: AsyncIterable[str | Utterance | Pause], slots: asyncio.Semaphore, ring: asyncio.Queue[object]
    ) -> None:
        try:
            async for item in segments:
                if isinstance(item, Pause):
                    ring.put_nowait(item)
                    continue
                utterance = as_utterance(item)
                await slots.acquire()
                if self.count_tokens is not None:
                    self.tally.num_input_tokens += self.count_tokens(utterance.text)
                request_id = f"{self.request_id}.{next(self._ids)}"
                voice = utterance.voice
                source = self.source if voice is None else self.voice_sources[voice]
                caption = self._caption(utterance.text)
                ring.put_nowait(_Segment(source, utterance, caption, request_id, voice or self.default_voice))
                self._count_in_flight(+1)
            ring.put_nowait(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the text source failed: the consumer raises it
            ring.put_nowait(exc)
