"""What a request asks to be said, in order: utterances (text at a rate) and exact pauses.

:func:`turbotts.text.segmenter.split_input` turns input text into this list: plain text
becomes utterances only; SSML (:mod:`turbotts.text.ssml`) adds pauses (``<break>``) and
rates (``<prosody rate>``) and voices (``<voice name>``). The server's pipeline synthesizes each utterance and inserts
each pause as silence, sample-exact. Pure data: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Utterance:
    """Text to synthesize; ``rate`` multiplies the request's speed (2.0: twice as fast).

    ``voice`` is the voice SSML's ``<voice name>`` asked for, as written (a saved or built-in
    name, a mix or a voice string); None speaks in the request's own voice.
    """

    text: str
    rate: float = 1.0
    voice: str | None = None


@dataclass(frozen=True)
class Pause:
    """Silence of exactly ``duration_ms`` (rounded to the nearest sample), not crossfaded."""

    duration_ms: float


#: One item of what a request says: an utterance or a pause.
SpeechItem = Utterance | Pause


def as_utterance(item: str | Utterance) -> Utterance:
    """Plain segment text as an utterance at the request's own rate."""
    return item if isinstance(item, Utterance) else Utterance(item)
