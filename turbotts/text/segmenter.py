"""The one segmenter: input text as the utterances and pauses the model is given one at a time.

The server (``/v1/audio/speech``), ``turbotts say`` and :meth:`turbotts.api.TTS.synthesize_long`
all cut their input here, so the same text gives the same segments, and the same
captions, everywhere:

1. SSML is read by :func:`~turbotts.text.ssml.parse_ssml` into utterances at their rates
   (and voices) and exact pauses; plain text is one utterance at rate 1.
2. Each utterance is sanitized (:func:`~turbotts.text.sanitize.sanitize`) and cut by
   :func:`~turbotts.text.segment.split_text` into segments of at most ``max_segment_chars``.
3. Segments with nothing to say (only punctuation or control tokens) are dropped.

Text that arrives in pieces (the WebSocket) is cut at sentence ends by
:class:`~turbotts.text.segment.SentenceBuffer` first, then each sentence by :func:`split_plain`.
Pure: no torch, no I/O.
"""

from __future__ import annotations

from turbotts.errors import InvalidInputError
from turbotts.text import ssml
from turbotts.text.sanitize import sanitize
from turbotts.text.segment import DEFAULT_MAX_SEGMENT_CHARS, is_speakable, split_text
from turbotts.text.utterances import Pause, SpeechItem, Utterance


def split_input(
    text: str, *, is_ssml: bool | None = None, max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS
) -> list[SpeechItem]:
    """The segments a request says, in order: utterances (text and rate) and exact pauses.

    Args:
        text: the input, plain text or an SSML document.
        is_ssml: whether ``text`` is SSML; None reads it as SSML when it starts with ``<?xml`` or ``<speak``.
        max_segment_chars: the longest segment, in characters (a control token counts as one).

    Returns:
        Utterances (sanitized segment text, at most ``max_segment_chars`` long, with its rate)
        and pauses; at least one utterance.

    Raises:
        InvalidInputError: nothing speakable is left once markup, emoji and symbols are removed.
        SSMLError: SSML that is not well-formed or outside the subset (names the element and position).
        ValueError: ``max_segment_chars`` is smaller than 1.
    """
    is_markup = ssml.is_ssml(text) if is_ssml is None else is_ssml
    items: list[SpeechItem] = []
    for item in ssml.parse_ssml(text) if is_markup else [Utterance(text)]:
        if isinstance(item, Pause):
            items.append(item)
        else:
            items.extend(split_plain(item.text, max_segment_chars, rate=item.rate, voice=item.voice))
    if not any(isinstance(item, Utterance) for item in items):
        if is_markup:
            raise InvalidInputError("the SSML has nothing to say once its markup is read; add some text")
        raise InvalidInputError(
            "the input has nothing to say once markup, emoji and symbols are removed; give at least one speakable word"
        )
    return items


def split_plain(
    text: str, max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS, *, rate: float = 1.0, voice: str | None = None
) -> list[Utterance]:
    """Plain text as sanitized segments of at most ``max_segment_chars``; empty when nothing is speakable.

    Raises:
        ValueError: ``max_segment_chars`` is smaller than 1.
    """
    return [Utterance(s, rate, voice) for s in split_text(sanitize(text), max_segment_chars) if is_speakable(s)]
