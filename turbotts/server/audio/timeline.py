"""Where each segment lands in the emitted audio: captions exact by construction, from sample counts.

No clock and no estimate: every position is a count of samples that left the
pipeline. The output is a series of *runs*, each one stream of segments joined
with crossfades and time-stretched at one rate, separated by exact silences (SSML
breaks) or by a change of rate. Inside a run, a segment starts where its first
sample lands after joining (``SegmentJoiner.segment_start``), mapped through the
run's stretch rate (``round(position / rate)``, the stretcher's own length rule)
and offset by the run's first output sample. It ends where the next segment of
the run starts (the crossfade belongs to the next segment) or, for the last one,
at the run's actual output count. So the captions of a run tile it exactly, and
the silence of a break lies between two captions, in none.

Word-level timing is deliberately absent: it cannot be measured without real
weights, and spreading characters evenly would be a guess presented as a fact.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from turbotts.text.sanitize import split_control_tokens

SEGMENT_EVENT = "speech.audio.segment"
_SPACES = re.compile(r"\s+")


def caption_text(spoken: str) -> str:
    """What a caption shows of the text a segment speaks: control tokens dropped, spaces collapsed."""
    plain = "".join(piece if not is_token else " " for piece, is_token in split_control_tokens(spoken))
    return _SPACES.sub(" ", plain).strip()


@dataclass(frozen=True)
class Caption:
    """One segment's span in the emitted audio, in samples (``end_sample`` exclusive).

    ``voice`` names the segment's voice in a document with SSML ``<voice>`` elements (None otherwise).
    """

    index: int
    text: str
    start_sample: int
    end_sample: int
    sample_rate_hz: int
    voice: str | None = None

    @property
    def start_s(self) -> float:
        return self.start_sample / self.sample_rate_hz

    @property
    def end_s(self) -> float:
        return self.end_sample / self.sample_rate_hz

    def as_dict(self) -> dict[str, Any]:
        """``{"index", "text", "start", "end"}`` (seconds), and ``"voice"`` when named (captioned JSON)."""
        named = {} if self.voice is None else {"voice": self.voice}
        return {"index": self.index, "text": self.text, "start": self.start_s, "end": self.end_s, **named}

    def event(self) -> dict[str, Any]:
        """The ``speech.audio.segment`` SSE / NDJSON event."""
        return {"type": SEGMENT_EVENT, **self.as_dict()}


class Timeline:
    """Segment spans of one request, released once all of a segment's audio has been emitted.

    The assembler calls :meth:`start_run`, :meth:`add_segment` for each segment as its
    first sample is placed, and :meth:`end_run` with the output count when a run is
    complete; the consumer calls :meth:`release` with the samples emitted so far.
    """

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.captions: list[Caption] = []  # every complete caption, in order
        self._num_released = 0
        self._run_start = 0  # output sample where the current run begins
        self._rate = 1.0
        self._open: deque[tuple[str, int, str | None]] = deque()  # (text, output start, voice), end not known yet

    def start_run(self, out_sample: int, rate: float) -> None:
        """A run (one joiner and one stretch rate) begins at output sample ``out_sample``."""
        self._run_start = out_sample
        self._rate = rate

    def add_segment(self, text: str, joined_start: int, voice: str | None = None) -> None:
        """A segment's first sample landed at ``joined_start`` of the current run's joined stream."""
        start = self._run_start + round(joined_start / self._rate)
        if self._open:
            self._close(start)
        self._open.append((text, start, voice))

    def end_run(self, out_end: int) -> None:
        """The current run's audio ended at output sample ``out_end``: its last segment ends there."""
        if self._open:
            self._close(out_end)

    def release(self, num_emitted: int) -> list[Caption]:
        """Captions not released before whose audio ends within the first ``num_emitted`` samples."""
        out: list[Caption] = []
        while self._num_released < len(self.captions) and self.captions[self._num_released].end_sample <= num_emitted:
            out.append(self.captions[self._num_released])
            self._num_released += 1
        return out

    def _close(self, end: int) -> None:
        text, start, voice = self._open.popleft()
        self.captions.append(Caption(len(self.captions), text, start, max(end, start), self.sample_rate_hz, voice))
