"""Long text and text streams: segments synthesized a bounded number ahead, audio joined in order.

One request becomes a sequence of segments (sentences or packed sentences).
A feeder task starts segment synthesis while at most ``max_in_flight`` segments
are started but not yet fully streamed (a ring of two by default: the one being
sent and the next one). The consumer streams segment after segment through a
:class:`SegmentJoiner` (a short crossfade at each boundary), so however long the
text, memory holds at most ``max_in_flight`` segments of audio. Every segment
uses the same :class:`SynthesisParams` (voice and seed), so the voice stays the
same across the request. No FastAPI here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import InvalidInputError
from turbotts.params import SynthesisParams
from turbotts.server.audio_effects import SegmentJoiner, StreamTimeStretcher
from turbotts.text.sanitize import sanitize
from turbotts.text.segment import is_speakable, split_text

_SENTENCE_ENDS = frozenset(".!?;。！？；…\n")
_CJK_ENDS = frozenset("。！？；…\n")
_END = object()


@dataclass
class SynthesisTally:
    """What a request produced, for usage and metrics."""

    num_segments: int = 0
    num_frames: int = 0
    num_samples: int = 0
    num_input_tokens: int = 0
    first_audio_s: float | None = None


class SentenceBuffer:
    """Cuts incrementally arriving text (an LLM's token stream) at sentence ends.

    ``push`` returns the sentences completed so far; a Latin full stop counts only
    once the next character shows it is no decimal point. Text longer than
    ``max_chars`` with no sentence end is cut at a clause or word boundary.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._buffer = ""

    def push(self, text: str) -> list[str]:
        self._buffer += text
        cut = self._last_sentence_end()
        out: list[str] = []
        if cut:
            out, self._buffer = [self._buffer[:cut]], self._buffer[cut:]
        if len(self._buffer) > self.max_chars:
            pieces = split_text(self._buffer, self.max_chars)
            out.extend(pieces[:-1])
            self._buffer = pieces[-1] if pieces else ""
        return [s for s in out if s.strip()]

    def flush(self) -> list[str]:
        rest, self._buffer = self._buffer, ""
        return [rest] if rest.strip() else []

    def _last_sentence_end(self) -> int:
        """Index just after the last certain sentence end, 0 when none."""
        buf = self._buffer
        for i in range(len(buf) - 1, -1, -1):
            ch = buf[i]
            if ch in _CJK_ENDS:
                return i + 1
            if ch in _SENTENCE_ENDS and i + 1 < len(buf) and buf[i + 1].isspace():
                return i + 1
        return 0


async def sentences_of(pieces: AsyncIterable[str], max_chars: int) -> AsyncIterator[str]:
    """Clean, speakable segments of a text stream, as soon as each sentence is complete."""
    buffer = SentenceBuffer(max_chars)
    async for piece in pieces:
        for sentence in buffer.push(piece):
            for segment in _clean_segments(sentence, max_chars):
                yield segment
    for sentence in buffer.flush():
        for segment in _clean_segments(sentence, max_chars):
            yield segment


def _clean_segments(text: str, max_chars: int) -> list[str]:
    return [s for s in split_text(sanitize(text), max_chars) if is_speakable(s)]


Emit = Callable[[np.ndarray], None]


class SegmentSource(Protocol):
    """Makes the audio of one segment: calls ``emit`` with its chunks in order, returns its code frames."""

    async def run(self, text: str, request_id: str, emit: Emit) -> int: ...


class EngineSource:
    """Every segment straight from the engine, streamed chunk by chunk."""

    def __init__(
        self, engine: AsyncEngine, params: SynthesisParams, on_request: Callable[[], None] | None = None
    ) -> None:
        self.engine = engine
        self.params = params
        self._on_request = on_request  # counts engine requests (a metric)

    async def run(self, text: str, request_id: str, emit: Emit) -> int:
        if self._on_request is not None:
            self._on_request()
        num_frames = 0
        outputs = self.engine.generate(text, self.params, request_id=request_id)
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

    def __init__(self, source: SegmentSource, text: str, request_id: str) -> None:
        self.chunks: asyncio.Queue[np.ndarray | BaseException | None] = asyncio.Queue()
        self.num_frames = 0
        self.task = asyncio.create_task(self._run(source, text, request_id))

    async def _run(self, source: SegmentSource, text: str, request_id: str) -> None:
        try:
            self.num_frames = await source.run(text, request_id, self.chunks.put_nowait)
            self.chunks.put_nowait(None)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self.chunks.put_nowait(exc)


class SegmentPipeline:
    """Synthesizes a stream of segment texts in order with bounded look-ahead."""

    def __init__(
        self,
        engine: AsyncEngine,
        params: SynthesisParams,
        *,
        request_id: str,
        max_in_flight: int = 2,
        stretch_rate: float = 1.0,
        sample_rate_hz: int = 24000,
        count_tokens: Callable[[str], int] | None = None,
        source: SegmentSource | None = None,
        observe_in_flight: Callable[[int, int], None] | None = None,
    ) -> None:
        self.engine = engine
        self.params = params
        self.request_id = request_id
        self.max_in_flight = max_in_flight
        self.stretch_rate = stretch_rate
        self.sample_rate_hz = sample_rate_hz
        self.count_tokens = count_tokens
        self.source = source or EngineSource(engine, params)
        self.tally = SynthesisTally()
        self._ids = itertools.count()
        self._observe_in_flight = observe_in_flight  # (change, segments now in flight): a metric
        self.num_in_flight = 0

    def _count_in_flight(self, change: int) -> None:
        self.num_in_flight += change
        if self._observe_in_flight is not None:
            self._observe_in_flight(change, self.num_in_flight)

    async def audio(self, segments: AsyncIterable[str]) -> AsyncIterator[np.ndarray]:
        """Float32 audio of every segment, in order, crossfaded and time-stretched.

        Raises:
            InvalidInputError: no segment could be synthesized (the last segment's error).
            QueueFullError, EngineError: from the engine.
        """
        slots = asyncio.Semaphore(self.max_in_flight)
        ring: asyncio.Queue[object] = asyncio.Queue()
        feeder = asyncio.create_task(self._feed(segments, slots, ring))
        joiner = SegmentJoiner(sample_rate_hz=self.sample_rate_hz)
        stretcher = StreamTimeStretcher(self.stretch_rate, self.sample_rate_hz) if self.stretch_rate != 1.0 else None
        started: list[_Segment] = []
        last_error: InvalidInputError | None = None
        try:
            while (item := await ring.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, _Segment)
                started.append(item)
                try:
                    while (chunk := await item.chunks.get()) is not None:
                        if isinstance(chunk, InvalidInputError):
                            last_error = chunk  # e.g. nothing speakable once normalized: skip it
                            break
                        if isinstance(chunk, BaseException):
                            raise chunk
                        if (out := self._post(joiner.add(chunk), stretcher)).size:
                            yield out
                    else:
                        self.tally.num_segments += 1
                        self.tally.num_frames += item.num_frames
                    if (out := self._post(joiner.end_segment(), stretcher)).size:
                        yield out
                finally:
                    started.remove(item)
                    slots.release()
                    self._count_in_flight(-1)
            tail = self._post(joiner.finish(), stretcher)
            if stretcher is not None:
                flushed = stretcher.flush()
                self.tally.num_samples += flushed.size
                tail = np.concatenate([tail, flushed])
            if tail.size:
                yield tail
            if self.tally.num_segments == 0 and last_error is not None:
                raise last_error
        finally:
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

    def _post(self, pcm: np.ndarray, stretcher: StreamTimeStretcher | None) -> np.ndarray:
        out = stretcher.process(pcm) if stretcher is not None and pcm.size else pcm
        self.tally.num_samples += out.size
        return out

    async def _feed(self, segments: AsyncIterable[str], slots: asyncio.Semaphore, ring: asyncio.Queue[object]) -> None:
        try:
            async for text in segments:
                await slots.acquire()
                if self.count_tokens is not None:
                    self.tally.num_input_tokens += self.count_tokens(text)
                request_id = f"{self.request_id}.{next(self._ids)}"
                ring.put_nowait(_Segment(self.source, text, request_id))
                self._count_in_flight(+1)
            ring.put_nowait(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the text source failed: the consumer raises it
            ring.put_nowait(exc)
