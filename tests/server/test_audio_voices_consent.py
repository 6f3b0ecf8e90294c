"""``GET /v1/audio/voices`` (Kokoro-FastAPI and vLLM-Omni's listing) and the ``consent`` of a voice upload,
through a real server on loopback: stored in SQLite (an older file is migrated) and in Redis, required
when ``require_voice_consent`` is set, never logged or listed in clear."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest_redis import RedisServer
from tests.server.clips import RATE_HZ, speech_24k, wav_bytes
from tests.server.conftest import running_server
from turbotts.redaction import describe_text
from turbotts.server.voices.redis_store import DEFAULT_KEY
from turbotts.server.voices.store import OPENAI_VOICES

CONSENT = "Recorded with the written consent of Qzorblat Vennix on 2026-01-05"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("consent")
    with running_server(tmp, require_voice_consent=True) as (url, _):
        yield url, tmp / "voices.sqlite3"


@pytest.fixture()
def http(server: tuple[str, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server[0], timeout=120) as client:
        yield client


def _clip() -> bytes:
    return wav_bytes(speech_24k()[: 2 * RATE_HZ], RATE_HZ)


def test_a_saved_voice_is_listed_in_kokoro_and_vllm_omni_shape(http: httpx.Client) -> None:
    assert http.post("/v1/voices", json={"name": "listed-seed", "seed": 5, "consent": CONSENT}).status_code == 201
    response = http.get("/v1/audio/voices")
    assert response.status_code == 200, response.text
    listing = response.json()
    # Kokoro-FastAPI's and vLLM-Omni's clients read plain names from "voices"
    assert listing["voices"][: len(OPENAI_VOICES)] == list(OPENAI_VOICES)
    assert "listed-seed" in listing["voices"]
    assert all(isinstance(name, str) for name in listing["voices"])
    # vLLM-Omni's "uploaded_voices": the saved ones only, as objects
    uploaded = {entry["name"]: entry for entry in listing["uploaded_voices"]}
    assert "alloy" not in uploaded
    assert uploaded["listed-seed"]["has_consent"] is True and uploaded["listed-seed"]["kind"] == "seed"
    assert CONSENT not in response.text  # the statement is stored, never shown
    # the same objects as /v1/voices, beside it
    assert listing["data"] == http.get("/v1/voices").json()["data"]
    assert http.delete("/v1/voices/listed-seed").status_code == 204
    assert "listed-seed" not in http.get("/v1/audio/voices").json()["voices"]


def test_without_consent_a_json_save_is_refused_naming_consent(http: httpx.Client) -> None:
    response = http.post("/v1/voices", json={"name": "no-consent", "seed": 5})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "consent"
    assert "consent" in response.json()["error"]["message"]
    assert "no-consent" not in http.get("/v1/audio/voices").json()["voices"]
    empty = http.post("/v1/voices", json={"name": "empty-consent", "seed": 5, "consent": ""})
    assert empty.status_code == 422 and empty.json()["error"]["param"] == "consent"


def test_without_consent_an_upload_is_refused_naming_consent(http: httpx.Client) -> None:
    files = {"audio": ("clip.wav", _clip(), "audio/wav")}
    response = http.post("/v1/voices", data={"name": "no-consent-clip", "transcript": "Hello."}, files=files)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "consent"


def test_consent_is_stored_with_the_voice_and_logged_only_as_a_digest(
    http: httpx.Client, server: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    files = {"audio": ("clip.wav", _clip(), "audio/wav")}
    data = {"name": "consented-clip", "transcript": "Hello there.", "consent": CONSENT}
    with caplog.at_level(logging.DEBUG):
        uploaded = http.post("/v1/voices", data=data, files=files)
        saved = http.post("/v1/voices", json={"name": "consented-seed", "seed": 9, "consent": CONSENT})
    assert uploaded.status_code == 201, uploaded.text
    assert saved.status_code == 201, saved.text
    assert uploaded.json()["has_consent"] is True and CONSENT not in uploaded.text
    joined = "\n".join(record.getMessage() for record in caplog.records)
    assert "Qzorblat" not in joined and "Vennix" not in joined
    assert joined.count(describe_text(CONSENT)) == 2  # one line per save, with the digest
    with sqlite3.connect(server[1]) as db:
        rows = dict(db.execute("SELECT name, consent FROM voices WHERE name LIKE 'consented-%'").fetchall())
    assert rows == {"consented-clip": CONSENT, "consented-seed": CONSENT}


def test_an_older_voices_file_gains_the_consent_column(tmp_path: Path) -> None:
    path = tmp_path / "voices.sqlite3"
    with sqlite3.connect(path) as db:  # the first release's schema, with one voice in it
        db.execute("CREATE TABLE voices (name TEXT PRIMARY KEY, seed INTEGER, voice TEXT, created_at REAL NOT NULL)")
        db.execute("INSERT INTO voices VALUES ('old-voice', 12, NULL, 1.0)")
    with running_server(tmp_path) as (url, _):  # consent not required: the default
        voices = {v["name"]: v for v in httpx.get(f"{url}/v1/voices", timeout=30).json()["data"]}
        assert voices["old-voice"]["has_consent"] is False and voices["old-voice"]["seed"] == 12
        new = httpx.post(f"{url}/v1/voices", json={"name": "new-voice", "seed": 1, "consent": CONSENT}, timeout=30)
        assert new.status_code == 201 and new.json()["has_consent"] is True
        assert httpx.post(f"{url}/v1/voices", json={"name": "bare", "seed": 1}, timeout=30).status_code == 201
    with sqlite3.connect(path) as db:
        assert dict(db.execute("SELECT name, consent FROM voices").fetchall()) == {
            "old-voice": None, "new-voice": CONSENT, "bare": None,
        }  # fmt: skip


def test_consent_is_stored_in_redis_and_required_there_too(tmp_path: Path, redis_server: RedisServer) -> None:
    settings = {"redis_url": redis_server.url, "voice_store": "redis", "require_voice_consent": True}
    with running_server(tmp_path, **settings) as (url, _):
        refused = httpx.post(f"{url}/v1/voices", json={"name": "redis-voice", "seed": 3}, timeout=30)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "consent"
        saved = httpx.post(f"{url}/v1/voices", json={"name": "redis-voice", "seed": 3, "consent": CONSENT}, timeout=30)
        assert saved.status_code == 201, saved.text
        listing = httpx.get(f"{url}/v1/audio/voices", timeout=30)
        assert "redis-voice" in listing.json()["voices"] and CONSENT not in listing.text
    record = json.loads(redis.Redis.from_url(redis_server.url).hget(DEFAULT_KEY, "redis-voice") or b"{}")
    assert record["consent"] == CONSENT
