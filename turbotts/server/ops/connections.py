"""Connections the server shares between its parts (today: one Redis client for the L2 cache and rate limits).

Why apart from the guards: a connection is opened once in ``lifespan``, handed to
every part that needs it, watched for outages in one place, and closed last.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from turbotts.cache.redis import OutageTracker, RedisConfig, connect, redact_url
from turbotts.server.settings import ServerSettings


@dataclass
class Connections:
    """The shared Redis client and its outage tracker, both None without ``redis_url``."""

    redis_config: RedisConfig | None = None
    redis: aioredis.Redis | None = None
    redis_tracker: OutageTracker | None = None

    @property
    def num_redis_outages(self) -> int:
        return self.redis_tracker.num_outages if self.redis_tracker is not None else 0

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()


def open_connections(settings: ServerSettings) -> Connections:
    """Clients for ``settings``; opens no socket yet (redis-py connects on first use)."""
    if settings.redis_url is None:
        return Connections()
    config = RedisConfig(url=settings.redis_url.get_secret_value())
    tracker = OutageTracker(
        f"Redis at {redact_url(config.url)}",
        config.backoff_s,
        fallback="serving the cache from L1 and limiting rates per replica",
    )
    return Connections(config, connect(config), tracker)
