from __future__ import annotations

import asyncio
import logging
import math
import socket

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
    for rate_rps in (-1.0, math.inf, math.nan):
        with pytest.raises(InvalidInputError, match="rate_rps"):
            RateLimitConfig(rate_rps=rate_rps, burst=1)
    with pytest.raises(InvalidInputError, match="max_num_keys"):
        RateLimitConfig(max_num_keys=0)
    assert RateLimitConfig(rate_rps=1.0, burst=1, max_num_keys=1).max_num_keys == 1  # the smallest allowed
    disabled = LocalRateLimiter(RateLimitConfig(rate_rps=0.0))
    assert all(disabled.try_acquire("ip").is_allowed for _ in range(1000))
    assert disabled.num_keys == 0


def test_local_decisions_say_how_many_tokens_are_left_and_when_to_retry() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=2.0, burst=3), clock=clock)
    allowed = limiter.try_acquire("a")
    assert (allowed.is_allowed, allowed.retry_after_s, allowed.num_tokens_left) == (True, 0.0, 2.0)
    limiter.try_acquire("a", cost=2)
    clock.now_s += 0.25  # half a token back
    denied = limiter.try_acquire("a")
    assert not denied.is_allowed and denied.num_tokens_left == pytest.approx(0.5)
    assert denied.retry_after_s == pytest.approx(0.25)  # the missing half token at 2 tokens/s


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
    for cost in (3.0, 0.0, -1.0):
        with pytest.raises(InvalidInputError, match="cost"):
            limiter.try_acquire("a", cost=cost)


def test_the_async_acquire_takes_from_the_same_buckets() -> None:
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=1.0, burst=3), clock=FakeClock())
    assert asyncio.run(limiter.acquire("a")).num_tokens_left == pytest.approx(2.0)  # one token by default
    assert asyncio.run(limiter.acquire("a", cost=2)).num_tokens_left == pytest.approx(0.0)
    assert not limiter.try_acquire("a").is_allowed
    assert limiter.try_acquire("b").is_allowed  # keys are independent


def test_local_limiter_drops_full_buckets_beyond_max_num_keys() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=1.0, burst=1, max_num_keys=10), clock=clock)
    for i in range(10):
        limiter.try_acquire(f"ip{i}")
    clock.now_s += 5.0  # every bucket has refilled
    limiter.try_acquire("new")
    assert limiter.num_keys == 1
    assert not limiter.try_acquire("new").is_allowed  # the live bucket was kept


def test_a_bucket_is_dropped_once_it_has_just_refilled() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(RateLimitConfig(rate_rps=4.0, burst=2, max_num_keys=3), clock=clock)
    for i in range(3):
        limiter.try_acquire(f"ip{i}", cost=2)
    clock.now_s += 0.5  # 0.5 s x 4 tokens/s: exactly full again (binary-exact numbers)
    limiter.try_acquire("new")
    assert limiter.num_keys == 1


def test_many_live_keys_are_not_rescanned_on_every_request() -> None:
    """Past max_num_keys with every bucket in use, the map grows instead of being scanned per call (O(keys))."""

    class CountingScans(LocalRateLimiter):
        num_scans = 0

        def _prune(self, now: float) -> None:
            self.num_scans += 1
            super()._prune(now)

    limiter = CountingScans(RateLimitConfig(rate_rps=1e-6, burst=1, max_num_keys=10), clock=FakeClock())
    for i in range(10_000):
        limiter.try_acquire(f"ip{i}")
    assert limiter.num_keys == 10_000  # every bucket is in use: none may be dropped
    assert limiter.num_scans <= 12  # the threshold doubles after each scan: log2(10_000 / 10) scans, not 9_990


def test_retry_after_header_rounds_up() -> None:
    assert RateDecision(False, 0.01, 0.0).retry_after_header() == "1"
    assert RateDecision(False, 2.2, 0.0).retry_after_header() == "3"


def test_two_replicas_share_one_redis_bucket(redis_server: RedisServer) -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=redis_server.url)
        config = RateLimitConfig(rate_rps=0.5, burst=3)
        clients = [connect(redis_config), connect(redis_config)]
        replicas = [RedisRateLimiter(c, config, redis_config) for c in clients]
        decisions = [await replicas[i % 2].acquire("key_abc") for i in range(6)]
        assert [d.is_allowed for d in decisions] == [True, True, True, False, False, False]
        assert 0 < decisions[-1].retry_after_s <= 2.0
        assert decisions[2].num_tokens_left == pytest.approx(0.0, abs=0.1)
        assert (await replicas[0].acquire("other")).is_allowed  # keys are independent
        ttl_ms = await clients[0].pttl("ratelimit:key_abc")
        assert 0 < ttl_ms <= math.ceil(3 / 0.5 * 1000) + 1000  # idle buckets expire by themselves
        assert all(r.num_fallbacks == 0 for r in replicas)
        assert [(r.num_allowed, r.num_denied) for r in replicas] == [(3, 1), (1, 2)]
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
    port = free_port()

    async def main() -> None:
        redis_config = RedisConfig(url=f"redis://:s3cret@127.0.0.1:{port}/0", backoff_s=60.0)
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(rate_rps=1.0, burst=2), redis_config)
        assert [(await limiter.acquire("k")).is_allowed for _ in range(3)] == [True, True, False]
        assert limiter.num_fallbacks == 3 and limiter.tracker.num_failures == 1
        assert limiter.fallback.num_denied == 1
        other = await limiter.acquire("other", cost=2)  # keys stay independent in the fallback, costs whole
        assert other.is_allowed and other.num_tokens_left == pytest.approx(0.0, abs=0.01)
        await client.aclose()

    with caplog.at_level(logging.WARNING, logger="turbotts.cache.redis"):
        asyncio.run(main())
    assert len(caplog.records) == 1 and "per replica" in caplog.text
    assert f"rate limiter at redis://:***@127.0.0.1:{port}/0" in caplog.text and "s3cret" not in caplog.text


def test_a_redis_that_hangs_costs_a_request_at_most_op_timeout_s() -> None:
    async def main() -> None:
        with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
            port = silent.getsockname()[1]
            redis_config = RedisConfig(url=f"redis://127.0.0.1:{port}/0", socket_timeout_s=120.0, op_timeout_s=0.1)
            client = connect(redis_config)
            limiter = RedisRateLimiter(client, RateLimitConfig(rate_rps=1.0, burst=2), redis_config)
            # op_timeout_s must end the wait: the socket timeout (120 s) would outlast this 60 s guard
            assert (await asyncio.wait_for(limiter.acquire("k"), timeout=60)).is_allowed
            assert limiter.num_fallbacks == 1
            await client.aclose()

    asyncio.run(main())


def test_disabled_redis_limiter_never_touches_redis() -> None:
    async def main() -> None:
        redis_config = RedisConfig(url=f"redis://127.0.0.1:{free_port()}/0")
        client = connect(redis_config)
        limiter = RedisRateLimiter(client, RateLimitConfig(), redis_config)
        assert (await limiter.acquire("k")).is_allowed
        assert limiter.tracker.num_failures == 0
        await client.aclose()

    asyncio.run(main())
