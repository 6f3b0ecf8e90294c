"""Segment audio in, final audio out: crossfade joins, time-stretch, exact pauses, and the timeline.

Synchronous and without I/O, so the server's pipeline (chunk by chunk, as the
engine streams) and ``turbotts say --captions`` (whole segments) assemble audio
and captions the same way. Every sample that leaves is counted in the tally, and
the :class:`~turbotts.server.audio.timeline.Timeline` is fed from the same counts.

A *run* is one joiner and one stretcher at one rate, in one voice. A pause (SSML ``<break>``),
a change of rate (``<prosody rate>``) or of voice (``<voice>``: a turn in a dialogue is a cut,
two speakers are never blended) ends the run: the joiner's tail and the
stretcher's lag are flushed, so the silence that follows is exactly
``round(duration_ms * rate_hz / 1000)`` zero samples, never crossfaded or stretched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from turbotts.errors import InvalidInputError
from turbotts.server.audio.effects import MAX_SPEED, MIN_SPEED, SegmentJoiner, StreamTimeStretcher
from turbotts.server.audio.timeline import Caption, Timeline
from turbotts.text.utterances import Pause, Utterance


class Tally(Protocol):
    """Where the assembler counts the samples it sends (the pipeline's tally also counts frames and tokens)."""

    num_samples: int


def check_rate(stretch_rate: float, utterance_rate: float) -> float:
    """The stretch of an utterance: the request's residual rate times its own.

    Raises:
        InvalidInputError: the product is outside the stretcher's 0.25..4.0.
    """
    rate = stretch_rate * utterance_rate
    if not (MIN_SPEED <= rate <= MAX_SPEED):
        raise InvalidInputError(
            f"speed times prosody rate is {rate:.3g}, outside {MIN_SPEED}..{MAX_SPEED}; use a milder rate or speed"
        )
    return rate


class AudioAssembler:
    """Joins segments (crossfade), time-stretches, inserts pauses, and places every segment on the timeline.

    Usage: ``begin_segment(text, rate)``, ``add(chunk)`` for each chunk, ``end_segment()``;
    ``pause(ms)`` between segments; ``finish()`` at the end. Each returns the samples now final.
    """

    def __init__(self, stretch_rate: float, sample_rate_hz: int, tally: Tally, timeline: Timeline) -> None:
        self.stretch_rate = stretch_rate
        self.sample_rate_hz = sample_rate_hz
        self.tally = tally
        self.timeline = timeline
        self._utterance_rate = 1.0
        self._voice: str | None = None
        self._text = ""
        self._num_placed = 0
        self._start_run()

    def _start_run(self) -> None:
        rate = self.stretch_rate * self._utterance_rate
        self.joiner = SegmentJoiner(sample_rate_hz=self.sample_rate_hz)
        self.stretcher = StreamTimeStretcher(rate, self.sample_rate_hz) if rate != 1.0 else None
        self._num_placed = 0
        self.timeline.start_run(self.tally.num_samples, rate)

    def _end_run(self) -> np.ndarray:
        tail = self._out(self.joiner.finish())
        if self.stretcher is not None:
            flushed = self.stretcher.flush()
            self.tally.num_samples += flushed.size
            tail = np.concatenate([tail, flushed])
        self.timeline.end_run(self.tally.num_samples)
        return tail

    def _out(self, pcm: np.ndarray) -> np.ndarray:
        if self.joiner.num_started > self._num_placed:  # this segment's first sample was just placed
            self._num_placed = self.joiner.num_started
            self.timeline.add_segment(self._text, self.joiner.segment_start, self._voice)
        out = self.stretcher.process(pcm) if self.stretcher is not None and pcm.size else pcm
        self.tally.num_samples += out.size
        return out

    def begin_segment(self, caption: str, utterance_rate: float = 1.0, voice: str | None = None) -> np.ndarray:
        """Start a segment whose caption is ``caption`` (its voice named ``voice``, None: unnamed).

        A new rate or voice first ends the run (no crossfade).
        """
        out = np.zeros(0, dtype=np.float32)
        if utterance_rate != self._utterance_rate or voice != self._voice:
            check_rate(self.stretch_rate, utterance_rate)
            out = self._end_run()
            self._utterance_rate, self._voice = utterance_rate, voice
            self._start_run()
        self._text = caption
        return out

    def add(self, chunk: np.ndarray) -> np.ndarray:
        return self._out(self.joiner.add(chunk))

    def end_segment(self) -> np.ndarray:
        return self._out(self.joiner.end_segment())

    def pause(self, duration_ms: float) -> np.ndarray:
        """End the run and return it followed by exactly ``round(duration_ms * rate / 1000)`` zeros."""
        if not (0 <= duration_ms <= 3_600_000):
            raise InvalidInputError(f"a pause must last 0 ms to 1 h, not {duration_ms} ms")
        tail = self._end_run()
        silence = np.zeros(round(duration_ms * self.sample_rate_hz / 1000), dtype=np.float32)
        self.tally.num_samples += silence.size
        self._start_run()
        return np.concatenate([tail, silence])

    def finish(self) -> np.ndarray:
        return self._end_run()


def assemble_whole(
    pieces: Sequence[tuple[str, Utterance, np.ndarray] | Pause], sample_rate_hz: int, stretch_rate: float = 1.0
) -> tuple[np.ndarray, list[Caption]]:
    """Audio and captions of whole synthesized segments (``turbotts say``), assembled as the server does.

    Args:
        pieces: ``(caption text, utterance, its audio)`` per segment, and pauses, in order; the
            utterance's ``voice`` (SSML ``<voice>``) names its caption.
    """

    class _Count:
        num_samples = 0

    timeline = Timeline(sample_rate_hz)
    assembler = AudioAssembler(stretch_rate, sample_rate_hz, _Count(), timeline)
    parts: list[np.ndarray] = []
    for piece in pieces:
        if isinstance(piece, Pause):
            parts.append(assembler.pause(piece.duration_ms))
            continue
        caption, utterance, audio = piece
        begun = assembler.begin_segment(caption, utterance.rate, utterance.voice)
        parts += [begun, assembler.add(audio), assembler.end_segment()]
    parts.append(assembler.finish())
    return np.concatenate(parts).astype(np.float32, copy=False), timeline.captions
