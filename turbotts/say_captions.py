"""``turbotts say --captions`` and SSML: the text cut into segments as the server cuts it, and their captions.

Plain text without ``--captions`` is synthesized as one request. With
``--captions``, or for SSML (text starting with ``<speak>``), the text is cut by the
server's segmenter (:func:`~turbotts.text.segmenter.split_input`: sanitized and
segmented, or read as SSML: pauses and rates), the segments are synthesized in one
batch, and the audio is joined by the server's
:func:`~turbotts.server.speech.assembler.assemble_whole`, so the file's captions are
placed by the same sample counts as the server's events.

SSML ``<voice name>`` works as on the server for what ``say`` can resolve without the
server's voices database: OpenAI's built-in names (``nova``: the server's seed voice),
official voice strings, and mixes of those (``alloy*0.7+nova*0.3``). Each voice's
segments are synthesized with the command's options in that voice; a saved name is refused.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from turbotts.api import TTS
from turbotts.errors import InvalidInputError
from turbotts.params import SynthesisParams
from turbotts.server.audio.subtitles import write_captions
from turbotts.server.audio.timeline import caption_text
from turbotts.server.speech.assembler import assemble_whole
from turbotts.server.voices.store import BUILTIN_VOICE_SEEDS
from turbotts.text.utterances import Pause, SpeechItem, Utterance


def say_with_captions(tts: TTS, items: list[SpeechItem], params: SynthesisParams, captions: Path | None) -> np.ndarray:
    """Synthesize ``items``, write their captions to ``captions`` (.vtt or .srt) if given; returns the audio.

    Raises:
        InvalidInputError: a segment cannot be synthesized, or the caption file type is unknown.
    """
    utterances = [item for item in items if isinstance(item, Utterance)]
    waves: dict[str | None, list[np.ndarray]] = {}
    for voice in dict.fromkeys(u.voice for u in utterances):  # each voice's segments in one batch
        voice_params = params if voice is None else say_voice_params(tts, voice, params)
        waves[voice] = tts.synthesize([u.text for u in utterances if u.voice == voice], voice_params)[::-1]
    pieces: list[tuple[str, Utterance, np.ndarray] | Pause] = []
    for item in items:
        if isinstance(item, Pause):
            pieces.append(item)
        else:
            spoken = tts.engine.spoken_text(item.text, normalize_text=params.normalize_text)
            pieces.append((caption_text(spoken), item, waves[item.voice].pop()))
    audio, timeline = assemble_whole(pieces, tts.sample_rate_hz)
    if captions is not None:
        write_captions(captions, timeline)
    return audio


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a voice name, as the server's voices have


def say_voice_params(tts: TTS, voice: str, params: SynthesisParams) -> SynthesisParams:
    """``params`` in the voice an SSML ``<voice name>`` names: a built-in name, a voice string or a mix of those.

    Raises:
        InvalidInputError: a name that is not built in (saved voices live in the server).
        VoiceError, VoiceMixError: not a voice string of this checkpoint, a bad mix.
    """
    if voice in BUILTIN_VOICE_SEEDS:
        return replace(params, voice=None, voice_seed=BUILTIN_VOICE_SEEDS[voice], reference=None)
    for part in voice.replace("+", "*").split("*"):  # the names in a mix, too
        if _NAME_RE.match(part.strip()) and part.strip() not in BUILTIN_VOICE_SEEDS and not _is_number(part):
            raise InvalidInputError(
                f"<voice name={voice[:64]!r}>: say knows the built-in voices ({', '.join(BUILTIN_VOICE_SEEDS)}), "
                "voice strings and mixes of those; a saved voice is the server's: use the HTTP API"
            )
    return replace(params, voice=tts.voice_string(voice, BUILTIN_VOICE_SEEDS), voice_seed=None, reference=None)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
