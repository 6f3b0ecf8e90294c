from __future__ import annotations

import asyncio
import logging
import random
import time

import pytest

from tests.conftest_redis import RedisServer, free_port
from turbotts.cache.keys import redis_key
from turbotts.cache.redis import OutageTracker, RedisCache, RedisCacheConfig, RedisConfig, connect, redact_url
from turbotts.errors import InvalidInputError

KEY = "ab" + "0" * 62


def test_roundtrip_key_layout_and_jittered_ttl(redis_server: RedisServer) -> None:
    async def main() -> None:
        config = RedisConfig(url=redis_server.url)
        client = connect(config)
        cache = RedisCache(client, config, rng=random.Random(0))
        assert await cache.get(KEY) is None
        assert await cache.set(KEY, b"\x00audio\xff")
        assert await cache.get(KEY) == b"\x00audio\xff"
        assert (cache.num_hits, cache.num_misses, cache.num_failures) == (1, 1, 0)
        assert await client.exists(f"tts:ab:{KEY}") == 1
        ttls_s = []
        for i in range(20):
            key = f"{i:02x}" + "1" * 62
            await cache.set(key, b"x")
            ttls_s.append(await client.pttl(redis_key(key)) / 1000)
        assert all(86400 * 0.95 - 1 <= t <= 86400 * 1.05 for t in ttls_s)
        assert max(ttls_s) - min(ttls_s) > 86400 * 0.02  # jitter really spreads expiries
        await cache.set(KEY, b"short", ttl_s=5.0)
        assert 0 < await client.pttl(redis_key(KEY)) <= 5000
        assert await cache.ping()
        await client.aclose()

    asyncio.run(main())


def test_dead_server_is_a_fast_miss_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        config = RedisConfig(url=f"redis://127.0.0.1:{free_port()}/0", backoff_s=60.0)
        client = connect(config)
        cache = RedisCache(client, config)
        started = time.monotonic()
        for _ in range(50):
            assert await cache.get(KEY) is None
            assert await cache.set(KEY, b"x") is False
        assert time.monotonic() - started < 1.0  # one real attempt, then the backoff window skips Redis
        assert cache.tracker.num_failures == 1
        assert cache.tracker.num_skipped == 99
        assert cache.num_failures == 100 and cache.tracker.is_down
        assert not await cache.ping()
        await client.aclose()

    with caplog.at_level(logging.WARNING, logger="turbotts.cache.redis"):
        asyncio.run(main())
    assert len(caplog.records) == 1
    assert "unreachable" in caplog.text and "L1 only" in caplog.text


def test_tracker_probes_once_per_backoff_window_and_logs_recovery(caplog: pytest.LogCaptureFixture) -> None:
    now_s = [0.0]
    tracker = OutageTracker("thing", backoff_s=1.0, clock=lambda: now_s[0])
    with caplog.at_level(logging.WARNING):
        assert tracker.can_try()
        tracker.record_failure(ConnectionError("refused"))
        assert not tracker.can_try()
        now_s[0] = 1.0
        assert tracker.can_try()  # the probe
        assert not tracker.can_try()  # others skip while it runs
        tracker.record_failure(ConnectionError("refused"))  # still down: no new line
        now_s[0] = 2.5
        assert tracker.can_try()
        tracker.record_success()
        assert tracker.can_try() and tracker.can_try()
    assert [r.getMessage()[:24] for r in caplog.records] == ["thing is unreachable (Co", "thing is reachable again"]
    assert (tracker.num_failures, tracker.num_outages, tracker.num_skipped) == (2, 1, 2)


def test_config_validation_and_url_redaction() -> None:
    with pytest.raises(InvalidInputError):
        RedisConfig(socket_timeout_s=0)
    with pytest.raises(InvalidInputError):
        RedisCacheConfig(ttl_jitter=1.5)
    assert redact_url("redis://user:secret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact_url("redis://:secret@host/0") == "redis://:***@host/0"
    assert redact_url("redis://host/0") == "redis://host/0"


def test_a_quiet_server_restart_is_not_an_outage(redis_server: RedisServer) -> None:
    """The pooled connection goes stale across a restart; the one immediate retry reconnects."""

    async def main() -> None:
        config = RedisConfig(url=redis_server.url)
        client = connect(config)
        cache = RedisCache(client, config)
        assert await cache.set(KEY, b"x")
        redis_server.stop()
        redis_server.start()  # same port, empty (no persistence)
        assert await cache.get(KEY) is None
        assert await cache.set(KEY, b"y") and await cache.get(KEY) == b"y"
        assert cache.tracker.num_failures == 0 and not cache.tracker.is_down
        await client.aclose()

    asyncio.run(main())
