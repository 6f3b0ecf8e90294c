"""The Redis voice store against a real redis-server: two stores (two replicas) see one set of voices."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis

from tests.conftest_redis import RedisServer
from turbotts.errors import InvalidInputError, ServiceUnavailableError, VoiceExistsError, VoiceNotFoundError
from turbotts.server.settings import ServerSettings
from turbotts.server.voices.redis_store import DEFAULT_KEY, RedisVoiceStore
from turbotts.server.voices.store import BUILTIN_VOICE_SEEDS, Voice


def test_a_voice_saved_through_one_store_is_seen_by_another_at_once(redis_server: RedisServer) -> None:
    first, second = RedisVoiceStore(redis_server.url), RedisVoiceStore(redis_server.url)
    saved = first.add("narrator", seed=77)
    assert second.get("narrator") == saved
    assert [v.name for v in second.list()] == [*BUILTIN_VOICE_SEEDS, "narrator"]
    with pytest.raises(VoiceExistsError):
        second.add("narrator", voice="anything")  # HSETNX: one winner across replicas
    second.delete("narrator")
    with pytest.raises(VoiceNotFoundError):
        first.get("narrator")
    with pytest.raises(VoiceNotFoundError):
        first.delete("narrator")


def test_a_cloned_voice_and_its_kept_clip_are_shared_like_any_other(redis_server: RedisServer) -> None:
    first, second = RedisVoiceStore(redis_server.url), RedisVoiceStore(redis_server.url)
    saved = first.add("clone", spk_smp="codes", transcript="what the clip says", audio=b"RIFF-clip")
    assert saved.kind == "reference" and saved.has_audio
    assert second.get("clone") == saved and second.audio("clone") == b"RIFF-clip"
    with pytest.raises(VoiceExistsError):
        second.ensure_free("clone")  # checked before the encoder runs on another replica
    second.ensure_free("free-name")
    first.delete("clone")
    assert second.audio("clone") is None


def test_built_in_voices_cannot_be_saved_over_or_deleted(redis_server: RedisServer) -> None:
    store = RedisVoiceStore(redis_server.url)
    assert store.get("alloy").is_builtin
    with pytest.raises(VoiceExistsError):
        store.add("alloy", seed=1)
    with pytest.raises(InvalidInputError):
        store.delete("alloy")


def test_the_record_is_the_dataclass_as_json_and_unknown_fields_are_dropped(redis_server: RedisServer) -> None:
    store = RedisVoiceStore(redis_server.url)
    saved = store.add("json-voice", seed=5)
    raw = redis.Redis.from_url(redis_server.url).hget(DEFAULT_KEY, "json-voice")
    assert raw is not None and json.loads(raw) == dataclasses.asdict(saved)
    newer = {**dataclasses.asdict(saved), "name": "newer", "field_of_a_newer_version": [1, 2]}
    redis.Redis.from_url(redis_server.url).hset(DEFAULT_KEY, "newer", json.dumps(newer))
    assert store.get("newer") == Voice(**{**dataclasses.asdict(saved), "name": "newer"})


def test_an_unreachable_store_is_a_503_error_that_names_it(redis_server: RedisServer) -> None:
    store = RedisVoiceStore(redis_server.url)
    redis_server.stop()
    with pytest.raises(ServiceUnavailableError, match="voice store"):
        store.get("someone")


def test_voice_store_setting() -> None:
    url = "redis://127.0.0.1:1/0"
    assert not ServerSettings(load_format="dummy", redis_url=url).uses_redis_voices()  # one process: SQLite
    assert ServerSettings(load_format="dummy", redis_url=url, backend="ray").uses_redis_voices()
    assert not ServerSettings(load_format="dummy", backend="ray").uses_redis_voices()
    assert ServerSettings(load_format="dummy", redis_url=url, voice_store="redis").uses_redis_voices()
    with pytest.raises(ValueError, match="voice_store=redis needs redis_url"):
        ServerSettings(load_format="dummy", voice_store="redis")
