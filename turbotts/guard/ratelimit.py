"""Token-bucket rate limits per API key or client IP.

Each key owns a bucket of ``burst`` tokens that refills at ``rate_rps`` tokens
per second; a request takes one token (or ``cost``) or is refused with the
seconds until enough tokens are back, for a ``Retry-After`` header.
``rate_rps=0`` disables limiting.

Two implementations share one interface (:class:`RateLimiter`):

- :class:`LocalRateLimiter` keeps buckets in this process: exact, no I/O, but
  each replica limits on its own.
- :class:`RedisRateLimiter` keeps them in Redis and updates a bucket with one
  Lua script, run atomically by the server with the server's clock, so the
  limit holds across replicas whatever their clocks say. The script is called
  by SHA (EVALSHA) and sent in full only when Redis does not know it (after a
  restart or SCRIPT FLUSH). If Redis is down it falls back to a local limiter
  (per replica, starting with full buckets) and logs the outage once.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from turbotts.cache.redis import OutageTracker, RedisConfig, redact_url
from turbotts.errors import InvalidInputError, RateLimitedError


@dataclass(frozen=True)
class RateLimitConfig:
    """Bucket size and refill rate, the same for every key.

    Args:
        rate_rps: tokens added per second; 0 disables limiting.
        burst: bucket capacity (the most requests allowed at once); at least 1 when enabled.
        key_prefix: Redis keys are ``{key_prefix}:{key}``.
        max_num_keys: the local limiter drops full buckets (they equal no bucket) beyond this many.
    """

    rate_rps: float = 0.0
    burst: int = 0
    key_prefix: str = "ratelimit"
    max_num_keys: int = 100_000

    def __post_init__(self) -> None:
        if self.rate_rps < 0 or not math.isfinite(self.rate_rps):
            raise InvalidInputError(f"rate_rps={self.rate_rps} must be a finite number >= 0; pass 0 to disable")
        if self.rate_rps > 0 and self.burst < 1:
            raise InvalidInputError(f"burst={self.burst} must be at least 1 when rate_rps > 0")
        if self.max_num_keys < 1:
            raise InvalidInputError(f"max_num_keys={self.max_num_keys} must be at least 1")

    @property
    def is_enabled(self) -> bool:
        return self.rate_rps > 0


@dataclass(frozen=True)
class RateDecision:
    """Whether one request may go ahead, and if not, when to retry."""

    is_allowed: bool
    retry_after_s: float  # 0.0 when allowed
    num_tokens_left: float

    def retry_after_header(self) -> str:
        """The ``Retry-After`` value: whole seconds, rounded up, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


ALLOW_UNLIMITED = RateDecision(is_allowed=True, retry_after_s=0.0, num_tokens_left=math.inf)


class RateLimiter(Protocol):
    """What the server needs of a limiter."""

    async def acquire(self, key: str, cost: float = 1.0) -> RateDecision: ...


def _check_cost(config: RateLimitConfig, cost: float) -> None:
    if not 0 < cost <= config.burst:
        raise InvalidInputError(f"cost={cost} must lie in (0, burst={config.burst}]; a larger cost could never pass")


class LocalRateLimiter:
    """Token buckets in this process; thread-safe."""

    def __init__(self, config: RateLimitConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, updated_at)
        self._lock = threading.Lock()
        self._prune_above = config.max_num_keys
        self.num_allowed = 0
        self.num_denied = 0

    @property
    def num_keys(self) -> int:
        return len(self._buckets)

    def try_acquire(self, key: str, cost: float = 1.0) -> RateDecision:
        """Take ``cost`` tokens from ``key``'s bucket if it holds them.

        Raises:
            InvalidInputError: ``cost`` is not in ``(0, burst]``.
        """
        if not self.config.is_enabled:
            return ALLOW_UNLIMITED
        _check_cost(self.config, cost)
        rate, burst = self.config.rate_rps, float(self.config.burst)
        with self._lock:
            now = self._clock()
            tokens, updated_at = self._buckets.get(key, (burst, now))
            tokens = min(burst, tokens + max(0.0, now - updated_at) * rate)
            is_allowed = tokens >= cost
            if is_allowed:
                tokens -= cost
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > self._prune_above:
                self._prune(now)
            if is_allowed:
                self.num_allowed += 1
            else:
                self.num_denied += 1
        if is_allowed:
            return RateDecision(True, 0.0, tokens)
        return RateDecision(False, (cost - tokens) / rate, tokens)

    async def acquire(self, key: str, cost: float = 1.0) -> RateDecision:
        return self.try_acquire(key, cost)

    def _prune(self, now: float) -> None:
        """Drop buckets that have refilled (a full bucket equals no bucket); called with the lock held."""
        rate, burst = self.config.rate_rps, self.config.burst
        self._buckets = {k: (t, u) for k, (t, u) in self._buckets.items() if t + (now - u) * rate < burst}
        # Every remaining bucket is in use: let the map grow rather than rescan it on each call.
        self._prune_above = max(self.config.max_num_keys, 2 * len(self._buckets))


# KEYS[1] bucket; ARGV: rate_rps, burst, cost. Returns {allowed 0|1, retry_after_s, tokens_left}
# (floats as strings: Redis truncates Lua numbers to integers). The server's clock is used so
# replicas with skewed clocks agree; Redis >= 5 replicates script effects, which allows TIME.
TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
local retry_after = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry_after = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.17g', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, string.format('%.17g', retry_after), string.format('%.17g', tokens)}
"""
TOKEN_BUCKET_SHA = hashlib.sha1(TOKEN_BUCKET_LUA.encode()).hexdigest()


class RedisRateLimiter:
    """Token buckets in Redis, shared by every replica; falls back to local buckets on an outage."""

    def __init__(
        self,
        client: aioredis.Redis,
        config: RateLimitConfig,
        redis_config: RedisConfig,
        *,
        fallback: LocalRateLimiter | None = None,
        tracker: OutageTracker | None = None,
    ) -> None:
        """Wrap a client (see :func:`turbotts.cache.redis.connect`); the caller owns and closes it.

        Args:
            client: a redis-py asyncio client.
            config: the limit.
            redis_config: timeouts, backoff (``key_prefix`` is not used: ``config.key_prefix`` is).
            fallback: the limiter used while Redis is down; by default a local one with ``config``.
            tracker: outage policy; by default one built from ``redis_config``.
        """
        self._client = client
        self.config = config
        self.redis_config = redis_config
        self.fallback = fallback or LocalRateLimiter(config)
        self.tracker = tracker or OutageTracker(
            f"Redis rate limiter at {redact_url(redis_config.url)}",
            redis_config.backoff_s,
            fallback="limiting per replica instead",
        )
        self.num_allowed = 0
        self.num_denied = 0
        self.num_script_loads = 0  # EVALSHA misses answered with a full EVAL
        self.num_fallbacks = 0  # decisions taken locally because Redis was down

    async def acquire(self, key: str, cost: float = 1.0) -> RateDecision:
        """Take ``cost`` tokens from ``key``'s shared bucket.

        Raises:
            InvalidInputError: ``cost`` is not in ``(0, burst]``.
        """
        if not self.config.is_enabled:
            return ALLOW_UNLIMITED
        _check_cost(self.config, cost)
        name = f"{self.config.key_prefix}:{key}"
        is_ok, reply = await self.tracker.call(lambda: self._run_script(name, cost), self.redis_config.op_timeout_s)
        if not is_ok or reply is None:
            self.num_fallbacks += 1
            return self.fallback.try_acquire(key, cost)
        allowed, retry_after_s, tokens = reply
        decision = RateDecision(bool(int(allowed)), float(retry_after_s), float(tokens))
        if decision.is_allowed:
            self.num_allowed += 1
        else:
            self.num_denied += 1
        return decision

    async def _run_script(self, name: str, cost: float) -> list[bytes | int]:
        args = (repr(float(self.config.rate_rps)), str(self.config.burst), repr(float(cost)))
        try:
            reply = await self._client.evalsha(TOKEN_BUCKET_SHA, 1, name, *args)
        except NoScriptError:
            self.num_script_loads += 1
            reply = await self._client.eval(TOKEN_BUCKET_LUA, 1, name, *args)
        return list(reply)


class RateLimits:
    """One bucket per client IP and, when the caller authenticated, one per API key."""

    def __init__(self, limiter: RateLimiter, on_limited: Callable[[str], None] = lambda scope: None) -> None:
        self.limiter = limiter
        self.on_limited = on_limited  # called with the scope ("key" or "ip") of each refusal: the metrics count it

    async def check(self, client_ip: str | None, key_id: str | None) -> None:
        """Raises: RateLimitedError (429) when either bucket is empty."""
        scopes = [("key", key_id)] if key_id is not None else []
        scopes.append(("ip", client_ip or "unknown"))
        for scope, name in scopes:
            decision = await self.limiter.acquire(f"{scope}:{name}")
            if not decision.is_allowed:
                self.on_limited(scope)
                raise RateLimitedError(
                    f"rate limit exceeded for this {'API key' if scope == 'key' else 'client address'}; "
                    f"retry after {math.ceil(decision.retry_after_s)} s or slow down",
                    decision.retry_after_s,
                )
