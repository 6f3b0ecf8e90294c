"""Voices as the API sees them: resolve a request's voice, and list, save or delete named voices.

No FastAPI here; the store itself is :mod:`turbotts.server.voices` (SQLite) or
:mod:`turbotts.server.redis_voices` (shared by replicas).
"""

from __future__ import annotations

import re

from turbotts.model.speaker import decode_voice
from turbotts.server.redis_voices import RedisVoiceStore
from turbotts.server.schemas import VOICE_NAME_PATTERN, VoiceCreate, VoiceRef
from turbotts.server.voices import Voice, VoiceStore

_VOICE_NAME_RE = re.compile(VOICE_NAME_PATTERN)


class VoiceService:
    """Named voices and voice strings, checked against one checkpoint's speaker width."""

    def __init__(self, store: VoiceStore | RedisVoiceStore, hidden_size: int) -> None:
        self.store = store
        self._hidden_size = hidden_size

    def resolve(self, voice: str | VoiceRef) -> tuple[str | None, int | None]:
        """``(voice string, voice seed)``: a name is looked up, anything else must be a voice string.

        Raises:
            VoiceNotFoundError: an unknown name.
            VoiceError: not a name and not a valid voice string for this checkpoint.
        """
        name = voice.id if isinstance(voice, VoiceRef) else voice
        if _VOICE_NAME_RE.match(name):
            found = self.store.get(name)
            return found.voice, found.seed
        decode_voice(name, self._hidden_size)
        return name, None

    def list(self) -> list[Voice]:
        return self.store.list()

    def create(self, body: VoiceCreate) -> Voice:
        """Raises: VoiceExistsError, VoiceError (a voice string this checkpoint cannot use)."""
        if body.voice is not None:
            decode_voice(body.voice, self._hidden_size)
        return self.store.add(body.name, seed=body.seed, voice=body.voice)

    def delete(self, name: str) -> None:
        self.store.delete(name)
