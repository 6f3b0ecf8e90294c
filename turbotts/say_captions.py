"""``turbotts say --captions`` and SSML: the text cut into segments as the server cuts it, and their captions.

Plain text without ``--captions`` is synthesized as one request. With
``--captions``, or for SSML (text starting with ``<speak>``), the text is cut by the
server's segmenter (:func:`~turbotts.text.segmenter.split_input`: sanitized and
segmented, or read as SSML: pauses and rates), the segments are synthesized in one
batch, and the audio is joined by the server's
:func:`~turbotts.server.speech.assembler.assemble_whole`, so the file's captions are
placed by the same sample counts as the server's events.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from turbotts.api import TTS
from turbotts.params import SynthesisParams
from turbotts.server.audio.subtitles import write_captions
from turbotts.server.audio.timeline import caption_text
from turbotts.server.speech.assembler import assemble_whole
from turbotts.text.utterances import Pause, SpeechItem, Utterance


def say_with_captions(tts: TTS, items: list[SpeechItem], params: SynthesisParams, captions: Path | None) -> np.ndarray:
    """Synthesize ``items``, write their captions to ``captions`` (.vtt or .srt) if given; returns the audio.

    Raises:
        InvalidInputError: a segment cannot be synthesized, or the caption file type is unknown.
    """
    utterances = [item for item in items if isinstance(item, Utterance)]
    waves = iter(tts.synthesize([u.text for u in utterances], params))
    pieces: list[tuple[str, Utterance, np.ndarray] | Pause] = []
    for item in items:
        if isinstance(item, Pause):
            pieces.append(item)
        else:
            spoken = tts.engine.spoken_text(item.text, normalize_text=params.normalize_text)
            pieces.append((caption_text(spoken), item, next(waves)))
    audio, timeline = assemble_whole(pieces, tts.sample_rate_hz)
    if captions is not None:
        write_captions(captions, timeline)
    return audio
