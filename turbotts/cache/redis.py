"""The shared (L2) audio cache on Redis, built to fail soft.

A cache must never turn a Redis outage into a TTS outage. Every call here
returns a miss (get) or does nothing (set) when Redis fails, counts the
failure, and logs one line when an outage starts and one when it ends, not one
per request. A dead server must not slow requests down either: sockets time out
after a fraction of a second, and after a failure Redis is not tried at all for
a short backoff window; then one call probes it, and redis-py reconnects by
itself once the server is back. :class:`OutageTracker` holds that policy and is
shared with the Redis rate limiter.

Entries live ``ttl_s`` (a day by default) plus or minus a random 5 %, so a burst
of entries written together does not expire together.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from turbotts.cache.keys import DEFAULT_KEY_PREFIX, redis_key
from turbotts.errors import InvalidInputError

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What a Redis call can raise when the server is away or slow. Builtin TimeoutError is an
# OSError on 3.11+, asyncio.TimeoutError is separate on 3.10.
REDIS_FAILURES: tuple[type[BaseException], ...] = (RedisError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is and how impatient to be with it.

    Args:
        url: a redis:// or rediss:// URL.
        socket_timeout_s: per-socket-operation timeout (connect, read, write).
        op_timeout_s: hard bound on one whole call, retries included.
        backoff_s: after a failure, do not try Redis again for this long.
        key_prefix: first component of every key (``tts:ab:abcd...``).
    """

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout_s: float = 0.2
    op_timeout_s: float = 0.5
    backoff_s: float = 1.0
    key_prefix: str = DEFAULT_KEY_PREFIX

    def __post_init__(self) -> None:
        for name in ("socket_timeout_s", "op_timeout_s"):
            if getattr(self, name) <= 0:
                raise InvalidInputError(f"RedisConfig.{name}={getattr(self, name)} must be positive")
        if self.backoff_s < 0:
            raise InvalidInputError(f"RedisConfig.backoff_s={self.backoff_s} is negative; pass 0 to retry every call")


@dataclass(frozen=True)
class RedisCacheConfig:
    """Lifetime of L2 entries: ``ttl_s`` times a random factor in ``[1 - ttl_jitter, 1 + ttl_jitter]``."""

    ttl_s: float = 86400.0
    ttl_jitter: float = 0.05

    def __post_init__(self) -> None:
        if self.ttl_s <= 0:
            raise InvalidInputError(f"RedisCacheConfig.ttl_s={self.ttl_s} must be positive")
        if not 0 <= self.ttl_jitter < 1:
            raise InvalidInputError(f"RedisCacheConfig.ttl_jitter={self.ttl_jitter} must lie in [0, 1)")


def redact_url(url: str) -> str:
    """``url`` without its password, fit for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def connect(config: RedisConfig) -> aioredis.Redis:
    """A redis-py asyncio client with short timeouts and a single immediate retry.

    The retry covers the one stale pooled connection left over after a server
    restart; anything more would multiply the wait on a dead server. Creating
    the client opens no connection, so this never fails on a down server.
    """
    client: aioredis.Redis = aioredis.Redis.from_url(
        config.url,
        socket_timeout=config.socket_timeout_s,
        socket_connect_timeout=config.socket_timeout_s,
        retry=Retry(NoBackoff(), 1),
        health_check_interval=0,
    )
    return client


class OutageTracker:
    """Decides when to try Redis, counts failures, logs each outage once.

    States: up (every call tries), down (calls are skipped until ``backoff_s``
    after the last failure; then one call probes, and the window restarts for
    everyone else while it runs). Not thread-safe: use it from one event loop.
    """

    def __init__(
        self,
        name: str,
        backoff_s: float,
        *,
        fallback: str = "carrying on without it",
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger = logger,
    ) -> None:
        self.name = name
        self.fallback = fallback
        self.backoff_s = backoff_s
        self._clock = clock
        self._log = log
        self.is_down = False
        self._down_since = 0.0
        self._retry_at = 0.0
        self.num_failures = 0  # calls that reached Redis and failed
        self.num_skipped = 0  # calls not tried because of the backoff window
        self.num_outages = 0

    def can_try(self) -> bool:
        """Whether this call should reach Redis (False = act as if it failed, without waiting)."""
        if not self.is_down:
            return True
        now = self._clock()
        if now < self._retry_at:
            self.num_skipped += 1
            return False
        self._retry_at = now + self.backoff_s  # this call probes; the others keep skipping
        return True

    def record_success(self) -> None:
        if self.is_down:
            self.is_down = False
            self._log.warning("%s is reachable again after %.1f s", self.name, self._clock() - self._down_since)

    def record_failure(self, exc: BaseException) -> None:
        self.num_failures += 1
        now = self._clock()
        self._retry_at = now + self.backoff_s
        if not self.is_down:
            self.is_down = True
            self._down_since = now
            self.num_outages += 1
            self._log.warning(
                "%s is unreachable (%s: %s); %s and retrying every %.1f s",
                self.name,
                type(exc).__name__,
                exc,
                self.fallback,
                self.backoff_s,
            )

    async def call(self, make_call: Callable[[], Awaitable[T]], timeout_s: float) -> tuple[bool, T | None]:
        """Run one Redis call under the policy.

        Returns:
            ``(True, result)`` on success; ``(False, None)`` if skipped or failed.
        """
        if not self.can_try():
            return False, None
        try:
            result = await asyncio.wait_for(make_call(), timeout=timeout_s)
        except REDIS_FAILURES as exc:
            self.record_failure(exc)
            return False, None
        self.record_success()
        return True, result


class RedisCache:
    """Audio bytes in Redis under ``tts:{h[:2]}:{h}``; every failure is a miss."""

    def __init__(
        self,
        client: aioredis.Redis,
        redis_config: RedisConfig,
        config: RedisCacheConfig | None = None,
        *,
        rng: random.Random | None = None,
        tracker: OutageTracker | None = None,
    ) -> None:
        """Wrap a client (see :func:`connect`); the caller owns it and closes it.

        Args:
            client: a redis-py asyncio client.
            redis_config: timeouts, backoff, key prefix.
            config: TTL and jitter.
            rng: source of the TTL jitter (seed it in tests).
            tracker: outage policy; by default one built from ``redis_config``.
        """
        self._client = client
        self.redis_config = redis_config
        self.config = config or RedisCacheConfig()
        self._rng = rng or random.Random()
        self.tracker = tracker or OutageTracker(
            f"Redis cache at {redact_url(redis_config.url)}", redis_config.backoff_s, fallback="serving from L1 only"
        )
        self.num_hits = 0
        self.num_misses = 0

    @property
    def num_failures(self) -> int:
        """Calls that failed or were skipped because Redis was down."""
        return self.tracker.num_failures + self.tracker.num_skipped

    def jittered_ttl_s(self) -> float:
        """A fresh TTL: ``ttl_s`` times a factor in ``[1 - ttl_jitter, 1 + ttl_jitter]``."""
        jitter = self.config.ttl_jitter
        return self.config.ttl_s * (1.0 + self._rng.uniform(-jitter, jitter))

    async def get(self, key: str) -> bytes | None:
        """The stored bytes of cache key ``key``; None on a miss or any Redis failure."""
        name = redis_key(key, self.redis_config.key_prefix)
        is_ok, value = await self.tracker.call(lambda: self._client.get(name), self.redis_config.op_timeout_s)
        if is_ok and value is not None:
            self.num_hits += 1
            return value if isinstance(value, bytes) else str(value).encode()  # str only with decode_responses
        self.num_misses += 1
        return None

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        """Store ``value`` for ``ttl_s`` (default: the jittered TTL); False if Redis failed."""
        name = redis_key(key, self.redis_config.key_prefix)
        ttl_ms = max(1, round(1000 * (ttl_s if ttl_s is not None else self.jittered_ttl_s())))
        is_ok, _ = await self.tracker.call(
            lambda: self._client.set(name, value, px=ttl_ms), self.redis_config.op_timeout_s
        )
        return is_ok

    async def ping(self) -> bool:
        """Whether Redis answers now (for a readiness probe; honours the backoff window)."""
        is_ok, _ = await self.tracker.call(self._client.ping, self.redis_config.op_timeout_s)
        return is_ok
