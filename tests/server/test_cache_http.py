"""The two-level audio cache over real HTTP: levels, single flight, per-segment resume, Redis outages."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest_redis import RedisServer
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH, metric, post_concurrently

ENGINE = "turbotts_engine_requests_total"


def _body(text: str, **extra: object) -> dict[str, object]:
    return {"input": text, "response_format": "pcm", "seed": 11, "max_new_tokens": 6, **extra}


def test_levels_single_flight_and_per_segment_resume(tmp_path: Path) -> None:
    with running_server(tmp_path, watermark=False) as (url, _), httpx.Client(base_url=url, timeout=120) as http:
        before = metric(url, ENGINE)
        burst = post_concurrently(url, [_body("One burst of the very same words.")] * 8)
        assert [r.status_code for r in burst] == [200] * 8
        assert len({r.content for r in burst}) == 1  # followers got exactly the leader's audio
        assert metric(url, ENGINE) - before == 1  # eight identical requests, one model run
        assert metric(url, "turbotts_singleflight_joined_total") >= 1
        again = http.post(SPEECH, json=_body("One burst of the very same words."))
        assert again.headers["x-cache"] == "l1" and again.content == burst[0].content
        assert metric(url, ENGINE) - before == 1

        # no seed: never cached, every request runs the model
        for _ in range(2):
            unseeded = http.post(SPEECH, json={"input": "No seed here.", "response_format": "pcm", "max_new_tokens": 4})
            assert unseeded.headers["x-cache"] == "miss"
        assert metric(url, ENGINE) - before == 3

        # a long text is cached per segment: a retry with more text only synthesizes what is new
        sentences = [
            f"This is sentence number {n} of a long text, long enough to be its own segment." for n in range(4)
        ]
        first = http.post(SPEECH, json=_body(" ".join(sentences[:3])))
        assert first.headers["x-cache"] == "miss"
        mid = metric(url, ENGINE)
        extended = http.post(SPEECH, json=_body(" ".join(sentences)))
        assert extended.headers["x-cache"] == "miss" and metric(url, ENGINE) - mid == 1  # only sentence 4 ran
        assert http.post(SPEECH, json=_body(" ".join(sentences))).headers["x-cache"] == "l1"
        assert metric(url, ENGINE) - mid == 1
        # other formats and speeds reuse the cached segments (the cache holds unmarked PCM)
        wav = http.post(SPEECH, json=_body(" ".join(sentences), response_format="wav"))
        assert wav.status_code == 200 and wav.headers["x-cache"] == "l1" and metric(url, ENGINE) - mid == 1
        assert metric(url, "turbotts_cache_lookups_total", 'level="l1",result="hit"') >= 8


def test_l2_is_shared_and_redis_outages_never_fail_a_request(
    tmp_path: Path, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    store = redis.Redis.from_url(redis_server.url)
    with (
        running_server(a_dir, redis_url=redis_server.url) as (url_a, _),
        running_server(b_dir, redis_url=redis_server.url) as (url_b, _),
    ):
        assert httpx.post(f"{url_a}{SPEECH}", json=_body("Shared between replicas.")).headers["x-cache"] == "miss"
        keys = store.keys("tts:*")
        assert len(keys) == 1 and keys[0].decode().split(":")[1] == keys[0].decode().split(":")[2][:2]
        assert 86400 * 0.95 - 5 <= store.ttl(keys[0]) <= 86400 * 1.05  # a day, jittered
        assert httpx.post(f"{url_b}{SPEECH}", json=_body("Shared between replicas.")).headers["x-cache"] == "l2"
        assert httpx.post(f"{url_b}{SPEECH}", json=_body("Shared between replicas.")).headers["x-cache"] == "l1"
        assert metric(url_b, "turbotts_cache_lookups_total", 'level="l2",result="hit"') == 1

        redis_server.stop()  # mid-traffic
        statuses = []
        for n in range(6):
            new = httpx.post(f"{url_a}{SPEECH}", json=_body(f"During the outage, text {n}."), timeout=60)
            old = httpx.post(f"{url_a}{SPEECH}", json=_body("Shared between replicas."), timeout=60)
            statuses += [new.status_code, old.status_code]
            assert old.headers["x-cache"] == "l1" and new.headers["x-cache"] == "miss"
        assert statuses == [200] * 12  # the model and L1 carry on
        assert metric(url_a, "turbotts_cache_l2_failures_total") >= 1
        assert metric(url_a, "turbotts_redis_outages_total") == 1
        outage_lines = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(outage_lines) == 1, [r.getMessage() for r in outage_lines]  # one line per outage, per replica

        redis_server.start()  # same port: the client reconnects by itself
        time.sleep(1.2)  # past the 1 s backoff
        for n in range(3):
            httpx.post(f"{url_a}{SPEECH}", json=_body(f"After the outage, text {n}."))
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert len(store.keys("tts:*")) >= 2  # new entries reach Redis again
        assert httpx.post(f"{url_b}{SPEECH}", json=_body("After the outage, text 2.")).headers["x-cache"] == "l2"


def test_another_seed_or_voice_misses_the_cache(http: httpx.Client) -> None:
    """A seeded request is cached under its seed and voice: changing either runs the model again."""
    text = "The same words, spoken with other settings."
    first = http.post(SPEECH, json=_body(text, voice="alloy"))
    assert first.status_code == 200 and first.headers["x-cache"] == "miss"
    assert http.post(SPEECH, json=_body(text, voice="alloy")).headers["x-cache"] == "l1"
    for changed in ({"voice": "alloy", "seed": 12}, {"voice": "echo"}):
        other = http.post(SPEECH, json=_body(text, **changed))
        assert other.status_code == 200 and other.headers["x-cache"] == "miss", changed
        assert other.content != first.content, changed
