"""Named voices in Redis, so every replica behind one endpoint sees the same voices at once.

Why not the SQLite file of :mod:`turbotts.server.voices.store`: each replica (each
machine) would have its own file, and a voice saved through one replica would
be unknown to the next. The record is the same :class:`Voice` dataclass, kept as
JSON in one Redis hash (``<prefix>voices``, field = name), so fields added to the
dataclass travel without a schema change. ``HSETNX`` makes "create" atomic
across replicas. A synchronous client: a lookup is one loopback/LAN round trip,
and the store keeps the SQLite store's synchronous interface.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import redis
from redis.exceptions import RedisError

from turbotts.errors import InvalidInputError, ServiceUnavailableError, VoiceExistsError, VoiceNotFoundError
from turbotts.server.voices.store import BUILTIN_VOICE_SEEDS, MAX_NAME_CHARS, Voice

DEFAULT_KEY = "turbotts:voices"
_TIMEOUT_S = 2.0


def _builtin(name: str) -> Voice:
    return Voice(name=name, seed=BUILTIN_VOICE_SEEDS[name], voice=None, is_builtin=True, created_at=0.0)


class RedisVoiceStore:
    """Built-in voices plus saved ones in a Redis hash; the interface of :class:`VoiceStore`."""

    def __init__(self, url: str, key: str = DEFAULT_KEY) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=_TIMEOUT_S, socket_connect_timeout=_TIMEOUT_S)
        self._key = key
        self._audio_key = f"{key}:audio"  # kept clips apart, so listing voices never moves them

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, call: Any) -> Any:
        try:
            return call()
        except RedisError as exc:
            raise ServiceUnavailableError(f"the voice store (Redis) did not answer {what}; retry shortly") from exc

    def list(self) -> list[Voice]:
        rows: dict[bytes, bytes] = self._call("a listing", lambda: self._client.hgetall(self._key))
        saved = sorted((_decode(value) for value in rows.values()), key=lambda voice: voice.name)
        return [_builtin(name) for name in BUILTIN_VOICE_SEEDS] + saved

    def get(self, name: str) -> Voice:
        """Raises: VoiceNotFoundError."""
        if name in BUILTIN_VOICE_SEEDS:
            return _builtin(name)
        value = self._call("a lookup", lambda: self._client.hget(self._key, name))
        if value is None:
            raise VoiceNotFoundError(
                f"voice {name[:MAX_NAME_CHARS]!r} does not exist; list voices with GET /v1/voices "
                "or create one with POST /v1/voices"
            )
        return _decode(value)

    def audio(self, name: str) -> bytes | None:
        """The kept reference clip of ``name`` (``keep_audio=true``), else None."""
        value: bytes | None = self._call("a clip lookup", lambda: self._client.hget(self._audio_key, name))
        return value

    def ensure_free(self, name: str) -> None:
        """Raises: VoiceExistsError when ``name`` is built in or saved (checked before costly work)."""
        if name in BUILTIN_VOICE_SEEDS:
            raise VoiceExistsError(f"{name!r} is a built-in voice name; pick another name")
        if self._call("a lookup", lambda: self._client.hexists(self._key, name)):
            raise VoiceExistsError(f"voice {name!r} already exists; delete it first or pick another name")

    def add(
        self, name: str, *, seed: int | None = None, voice: str | None = None, spk_smp: str | None = None,
        transcript: str | None = None, audio: bytes | None = None, mix: str | None = None,
        consent: str | None = None,
    ) -> Voice:  # fmt: skip
        """Save a voice (the caller validated it). Raises: VoiceExistsError."""
        if name in BUILTIN_VOICE_SEEDS:
            raise VoiceExistsError(f"{name!r} is a built-in voice name; pick another name")
        record = Voice(
            name=name, seed=seed, voice=voice, is_builtin=False, created_at=time.time(), spk_smp=spk_smp,
            transcript=transcript, has_audio=audio is not None, mix=mix, consent=consent,
        )  # fmt: skip
        payload = json.dumps(dataclasses.asdict(record))
        if not self._call("a save", lambda: self._client.hsetnx(self._key, name, payload)):
            raise VoiceExistsError(f"voice {name!r} already exists; delete it first or pick another name")
        if audio is not None:
            self._call("a clip save", lambda: self._client.hset(self._audio_key, name, audio))
        return record

    def delete(self, name: str) -> None:
        """Raises: VoiceNotFoundError (built-in voices cannot be deleted either)."""
        if name in BUILTIN_VOICE_SEEDS:
            raise InvalidInputError(f"{name!r} is a built-in voice and cannot be deleted")
        self._call("a clip delete", lambda: self._client.hdel(self._audio_key, name))
        if not self._call("a delete", lambda: self._client.hdel(self._key, name)):
            raise VoiceNotFoundError(f"voice {name[:MAX_NAME_CHARS]!r} does not exist; nothing was deleted")


def _decode(value: bytes) -> Voice:
    """A stored record; fields this version does not know are dropped (a newer replica wrote them)."""
    data = json.loads(value)
    known = {field.name for field in dataclasses.fields(Voice)}
    return Voice(**{k: v for k, v in data.items() if k in known})
