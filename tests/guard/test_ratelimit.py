from __future__ import annotations

import asyncio
import logging
import math

import pytest

from tests.conftest_redis import RedisServer, free_port
from turbotts.cache.redis import RedisConfig, connect
from turbotts.errors import InvalidInputError
from turbotts.guard.ratelimit import LocalRateLimiter, RateDecision, RateLimitConfig, RedisRateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 50.0

    def __call__(self) -> float:
        return self.now_s


def test_config_validation_and_disabled_limit() -> None:
    with pytest.raises(InvalidInputError, match="burst"):
        RateLimitConfig(rate_rps=1.0, burst=0)
    with pytest.raises(InvalidInputError):
        RateLimitConfig(rate_rps=-1.0, burst=1)
    disabled = LocalRateLimiter(RateLimitConfig(rate_rps=0.0))
    assert all(disabled.try_acquire("ip").is_allowed for _ in range(1000))
    assert disabled.num_keys == 0


def test_local_bucket_burst_refill_and_retry_after() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=2.0, burst=3), clock=clock)
    assert [limiter.try_acquire("a").is_allowed for _ in range(4)] == [True, True, True, False]
    denied = limiter.try_acquire("a")
    assert not denied.is_allowed and denied.retry_after_s == pytest.approx(0.5)
    assert denied.retry_after_header() == "1"
    assert limiter.try_acquire("b").is_allowed  # keys are independent
    clock.now_s += 0.5
    assert limiter.try_acquire("a").is_allowed
    assert not limiter.try_acquire("a").is_allowed
    clock.now_s += 100.0  # refills up to burst, not beyond
    assert [limiter.try_acquire("a").is_allowed for _ in range(4)] == [True, True, True, False]
    assert (limiter.num_allowed, limiter.num_denied) == (8, 4)


def test_cost_must_fit_the_bucket() -> None:
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=1.0, burst=2))
    assert limiter.try_acquire("a", cost=2).is_allowed
    with pytest.raises(InvalidInputError, match="cost"):
        limiter.try_acquire("a", cost=3)


def test_local_limiter_drops_full_buckets_beyond_max_num_keys() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=1.0, burst=1, max_num_keys=10), clock=clock)
    for i in range(10):
        limiter.try_acquire(f"ip{i}")
    clock.now_s += 5.0  # every bucket has refilled
    limiter.try_acquire("new")
    assert limiter.num_keys == 1
    assert not limiter.try_acquire("new").is_allowed  # the live bucket was kept


def test_retry_after_header_rounds_up() -> None:
    assert RateDecision(False, 0.01, 0.0).retry_after_header() == "1"
    assert RateDecision(False, 2.2, 0.0).retry_after_header() == "3"


def test_two_replicas_share_one_redis_bucket(redis_server: RedisServer) -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=redis_server.url)
        config = RateLimitConfig(rate_rps=0.5, burst=3)
        clients = [connect(redis_config), connect(redis_config)]
        replicas = [RedisRateLimiter(c, config, redis_config) for c in clients]
        decisions = [await replicas[i % 2].acquire("key_abc") for i in range(5)]
        assert [d.is_allowed for d in decisions] == [True, True, True, False, False]
        assert 0 < decisions[-1].retry_after_s <= 2.0
        assert decisions[2].num_tokens_left == pytest.approx(0.0, abs=0.1)
        assert (await replicas[0].acquire("other")).is_allowed  # keys are independent
        ttl_ms = await clients[0].pttl("ratelimit:key_abc")
        assert 0 < ttl_ms <= math.ceil(3 / 0.5 * 1000) + 1000  # idle buckets expire by themselves
        assert all(r.num_fallbacks == 0 for r in replicas)
        for c in clients:
            await c.aclose()

    asyncio.run(main())


def test_redis_bucket_refills_on_the_server_clock(redis_server: RedisServer) -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=redis_server.url)
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(rate_rps=5.0, burst=1), redis_config)
        assert (await limiter.acquire("k")).is_allowed
        denied = await limiter.acquire("k")
        assert not denied.is_allowed and 0 < denied.retry_after_s <= 0.2
        await asyncio.sleep(denied.retry_after_s + 0.02)
        assert (await limiter.acquire("k")).is_allowed
        await client.aclose()

    asyncio.run(main())


def test_evalsha_falls_back_when_the_script_is_unknown(redis_server: RedisServer) -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=redis_server.url)
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(rate_rps=1.0, burst=5), redis_config)
        await limiter.acquire("k")  # a fresh server does not know the script yet
        assert limiter.num_script_loads == 1
        await limiter.acquire("k")
        assert limiter.num_script_loads == 1  # EVALSHA hit
        await client.script_flush()
        decision = await limiter.acquire("k")
        assert limiter.num_script_loads == 2 and decision.is_allowed
        assert decision.num_tokens_left == pytest.approx(2.0, abs=0.1)  # the bucket state survived
        await client.aclose()

    asyncio.run(main())


def test_redis_down_falls_back_to_local_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=f"redis://127.0.0.1:{free_port()}/0", backoff_s=60.0)
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(rate_rps=1.0, burst=2), redis_config)
        assert [(await limiter.acquire("k")).is_allowed for _ in range(3)] == [True, True, False]
        assert limiter.num_fallbacks == 3 and limiter.tracker.num_failures == 1
        assert limiter.fallback.num_denied == 1
        await client.aclose()

    with caplog.at_level(logging.WARNING, logger="turbotts.cache.redis"):
        asyncio.run(main())
    assert len(caplog.records) == 1 and "per replica" in caplog.text


def test_disabled_redis_limiter_never_touches_redis() -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=f"redis://127.0.0.1:{free_port()}/0")
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(), redis_config)
        assert (await limiter.acquire("k")).is_allowed
        assert limiter.tracker.num_failures == 0
        await client.aclose()

    asyncio.run(main())
