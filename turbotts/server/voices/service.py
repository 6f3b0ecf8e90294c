"""Voices as the API sees them: resolve a request's voice (names, strings, mixes, clips),
and list, save, clone or delete named voices.

No FastAPI here; the store itself is :mod:`turbotts.server.voices.store` (SQLite) or
:mod:`turbotts.server.voices.redis_store` (shared by replicas). Cloning runs the DVAE
encoder, so routes call :meth:`VoiceService.clone` off the event loop. A clip is
named in logs by its SHA-256 only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from turbotts.audio import ReferenceLimits, clip_digest, load_reference_clip
from turbotts.errors import VoiceMixError
from turbotts.model.speaker import decode_audio_prompt, decode_voice, encode_voice
from turbotts.model.voice_mix import is_voice_mix, mix_voices, parse_voice_mix
from turbotts.params import VoiceReference
from turbotts.redaction import describe_text
from turbotts.server.schemas import VOICE_NAME_PATTERN, VoiceCreate, VoiceRef
from turbotts.server.voices.redis_store import RedisVoiceStore
from turbotts.server.voices.store import Voice, VoiceStore

_VOICE_NAME_RE = re.compile(VOICE_NAME_PATTERN)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedVoice:
    """What a request's ``voice`` means for :class:`~turbotts.params.SynthesisParams`."""

    voice: str | None = None
    voice_seed: int | None = None
    reference: VoiceReference | None = None


@dataclass(frozen=True)
class VoiceModel:
    """What the service needs of the loaded checkpoint."""

    hidden_size: int
    sample_rate_hz: int
    random_voice: Callable[[int], str]  # seed -> official voice string
    encode_clip: Callable[[np.ndarray], str]  # 24 kHz mono -> official spk_smp string


class VoiceService:
    """Named voices, voice strings, mixes and reference clips, checked against one checkpoint."""

    def __init__(
        self, store: VoiceStore | RedisVoiceStore, model: VoiceModel, limits: ReferenceLimits | None = None
    ) -> None:
        self.store = store
        self.model = model
        self.limits = limits or ReferenceLimits()

    def resolve(self, voice: str | VoiceRef) -> ResolvedVoice:
        """A name is looked up, a mix is mixed, anything else must be a voice string.

        Raises:
            VoiceNotFoundError: an unknown name.
            VoiceMixError: a malformed mix, or one with a reference-clip voice.
            VoiceError: not a name and not a valid voice string for this checkpoint.
        """
        name = voice.id if isinstance(voice, VoiceRef) else voice
        if is_voice_mix(name):
            return ResolvedVoice(voice=self._mix(name))
        if not _VOICE_NAME_RE.match(name):
            decode_voice(name, self.model.hidden_size)
            return ResolvedVoice(voice=name)
        found = self.store.get(name)
        if found.spk_smp is not None:
            return ResolvedVoice(reference=VoiceReference(found.spk_smp, found.transcript or ""))
        if found.mix is not None:
            return ResolvedVoice(voice=self._mix(found.mix))
        return ResolvedVoice(voice=found.voice, voice_seed=found.seed)

    def _mix(self, expression: str, *, is_nested: bool = False) -> str:
        parts = parse_voice_mix(expression)
        vectors = [self._vector(part.name, is_nested) for part in parts]
        return encode_voice(mix_voices(vectors, [part.weight for part in parts]))

    def _vector(self, name: str, is_nested: bool) -> torch.Tensor:
        if not _VOICE_NAME_RE.match(name):
            return decode_voice(name, self.model.hidden_size)
        found = self.store.get(name)
        if found.spk_smp is not None:
            raise VoiceMixError(
                f"voice {name!r} is a reference clip (audio codes in the prompt, not a speaker vector) and "
                "cannot be mixed; mix seed, string or mix voices only"
            )
        if found.mix is not None:
            if is_nested:
                raise VoiceMixError(f"voice {name!r} is a mix of mixes; mixes nest one level at most")
            return decode_voice(self._mix(found.mix, is_nested=True), self.model.hidden_size)
        if found.seed is not None:
            return decode_voice(self.model.random_voice(found.seed), self.model.hidden_size)
        return decode_voice(found.voice or "", self.model.hidden_size)

    def list(self) -> list[Voice]:
        return self.store.list()

    def create(self, body: VoiceCreate) -> Voice:
        """Save a seed, voice string, existing ``spk_smp`` string or mix.

        Raises:
            VoiceExistsError, VoiceError (a string this checkpoint cannot use), VoiceMixError.
        """
        if body.voice is not None:
            decode_voice(body.voice, self.model.hidden_size)
        if body.mix is not None:
            self._mix(body.mix)  # every part must resolve now, not at the first request
        if body.spk_smp is not None:
            decode_audio_prompt(body.spk_smp)
            VoiceReference(body.spk_smp, body.transcript or "")  # checks the transcript
        voice = self.store.add(
            body.name, seed=body.seed, voice=body.voice, spk_smp=body.spk_smp, transcript=body.transcript,
            mix=body.mix, consent=body.consent,
        )  # fmt: skip
        logger.info("voice saved kind=%s consent=%s", voice.kind, _consent_digest(body.consent))  # no name: user text
        return voice

    def clone(
        self, name: str, audio: bytes, transcript: str, *, keep_audio: bool = False, consent: str | None = None
    ) -> Voice:
        """A voice from a reference clip: decode, resample to 24 kHz mono (soxr), DVAE-encode, save.

        Blocking (the encoder runs here): call it from a worker thread.

        Raises:
            ReferenceTooLargeError: over the size limit. ReferenceAudioError: empty, undecodable,
            silent, too short or too long. InvalidInputError: a missing or too long transcript.
            VoiceExistsError: the name is taken.
        """
        digest = clip_digest(audio)
        VoiceReference("-", transcript)  # the transcript is checked before any decoding work
        self.store.ensure_free(name)
        samples = load_reference_clip(audio, self.model.sample_rate_hz, self.limits)
        reference = VoiceReference(self.model.encode_clip(samples), transcript)
        voice = self.store.add(
            name,
            spk_smp=reference.spk_smp,
            transcript=transcript,
            audio=audio if keep_audio else None,
            consent=consent,
        )
        logger.info(
            "voice cloned name=%s clip_sha256=%s clip_s=%.2f kept=%s consent=%s",
            name, digest, samples.size / self.model.sample_rate_hz, keep_audio, _consent_digest(consent),
        )  # fmt: skip
        return voice

    def delete(self, name: str) -> None:
        self.store.delete(name)


def _consent_digest(consent: str | None) -> str:
    """A consent statement names a person: logs get its digest and length, never the words."""
    return "none" if consent is None else describe_text(consent)
