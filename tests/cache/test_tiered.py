from __future__ import annotations

import asyncio
import logging

import pytest

from tests.conftest_redis import RedisServer
from turbotts.cache.lru import LRUCache, LRUCacheConfig
from turbotts.cache.redis import OutageTracker, RedisCache, RedisConfig, connect
from turbotts.cache.tiered import TieredCache


class DictL2:
    """A minimal L2 for the level logic; the Redis-backed tests below use the real server."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.num_failures = 0

    async def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        self.data[key] = value
        return True


def test_levels_and_counters() -> None:
    async def main() -> None:
        l2 = DictL2()
        cache = TieredCache(LRUCache(LRUCacheConfig(max_bytes=10_000)), l2)
        assert (await cache.get("k")).level == "miss"
        l2.data["k"] = b"from-l2"
        first = await cache.get("k")
        assert (first.level, first.value, first.is_hit) == ("l2", b"from-l2", True)
        second = await cache.get("k")  # copied into L1 by the L2 hit
        assert (second.level, second.value) == ("l1", b"from-l2")
        await cache.set("n", b"new")
        assert l2.data["n"] == b"new" and (await cache.get("n")).level == "l1"
        stats = cache.stats()
        assert (stats.num_l1_hits, stats.num_l1_misses, stats.num_l2_hits, stats.num_l2_misses) == (2, 2, 1, 1)
        assert stats.num_l1_entries == 2 and stats.num_l1_bytes > 0

    asyncio.run(main())


def test_without_l2_a_l1_miss_is_a_miss() -> None:
    async def main() -> None:
        cache = TieredCache(LRUCache(LRUCacheConfig(max_bytes=100)))
        assert (await cache.get("k")).level == "miss"
        await cache.set("k", b"v")
        assert (await cache.get("k")).level == "l1"
        assert cache.stats().num_l2_misses == 0 and cache.stats().num_l2_failures == 0

    asyncio.run(main())


def test_redis_outage_mid_test_then_recovery(redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    now_s = [0.0]
    config = RedisConfig(url=redis_server.url, backoff_s=5.0)

    async def main() -> None:
        client = connect(config)
        tracker = OutageTracker("Redis cache", config.backoff_s, clock=lambda: now_s[0])
        l2 = RedisCache(client, config, tracker=tracker)
        cache = TieredCache(LRUCache(LRUCacheConfig(max_bytes=10_000)), l2)
        await cache.set("before", b"A")
        assert await l2.get("before") == b"A"

        redis_server.stop()
        during_outage = await cache.get("before")
        assert (during_outage.level, during_outage.value) == ("l1", b"A")  # served from L1
        await cache.set("during", b"B")  # L2 write fails quietly, L1 keeps it
        assert (await cache.get("during")).level == "l1"
        assert (await cache.get("absent")).level == "miss"
        assert tracker.is_down and tracker.num_failures == 1 and cache.stats().num_l2_failures >= 2
        now_s[0] += config.backoff_s
        assert (await cache.get("absent")).level == "miss"  # a probe that fails again: counted, not logged
        assert tracker.num_failures == 2

        redis_server.start()  # same port
        assert (await cache.get("absent")).level == "miss"  # still inside the backoff window: not tried
        now_s[0] += config.backoff_s
        await cache.set("after", b"C")  # the probe: reconnects by itself
        assert not tracker.is_down
        assert await client.get("tts:af:after") == b"C"
        cache.l1.clear()
        assert (await cache.get("after")).level == "l2"
        assert tracker.num_outages == 1
        await client.aclose()

    with caplog.at_level(logging.WARNING, logger="turbotts.cache.redis"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "unreachable" in messages[0] and "reachable again" in messages[1]
