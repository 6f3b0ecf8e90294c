"""Wiring: the guards of ``turbotts/guard/`` (and the audio cache) built from one server's settings in ``lifespan``.

The guards themselves live in ``guard/``; this module only reads settings and connects them to
the server's metrics and connections.

Audio cache (L1 in process, L2 on Redis when ``redis_url`` is set), rate limits
(per client IP and per API key; in Redis when configured, so they hold across
replicas), the blocklist, admission control and the watermark key. Redis is
optional everywhere: without it everything works in process, and when it fails
mid-traffic the cache serves from L1 and the limiter limits per replica (one
shared :class:`OutageTracker`, so one log line per outage). No FastAPI here.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass

import psutil

from turbotts.cache.lru import LRUCache, LRUCacheConfig
from turbotts.cache.redis import RedisCache, RedisCacheConfig
from turbotts.cache.tiered import TieredCache
from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import InvalidInputError
from turbotts.guard.admission import AdmissionConfig, AdmissionController, PressureSample
from turbotts.guard.content_filter import ContentFilter
from turbotts.guard.keys import parse_secret_key
from turbotts.guard.ratelimit import LocalRateLimiter, RateLimitConfig, RateLimiter, RateLimits, RedisRateLimiter
from turbotts.server.ops.connections import Connections
from turbotts.server.ops.metrics import GuardStats, Metrics
from turbotts.server.settings import ServerSettings
from turbotts.server.speech.audio_cache import AudioCache

logger = logging.getLogger(__name__)
PRESSURE_INTERVAL_S = 0.1


@dataclass
class Guards:
    audio_cache: AudioCache
    rate_limits: RateLimits
    admission: AdmissionController
    content_filter: ContentFilter | None
    watermark_key: bytes | None  # None: --no-watermark
    watermark_key_id: int
    connections: Connections  # shared with the rest of the server; closed by the lifespan, not here

    def stats(self) -> GuardStats:
        return GuardStats(
            cache=self.audio_cache.cache.stats(),
            num_flights_joined=self.audio_cache.flights.num_joined,
            num_redis_outages=self.connections.num_redis_outages,
        )

    def reload_blocklist(self) -> None:
        """Read the blocklist file again (the old list stays on error).

        Raises:
            InvalidInputError: no blocklist is configured.
            TurboTTSError: the file cannot be read.
        """
        if self.content_filter is None:
            raise InvalidInputError("no blocklist is configured; start the server with --blocklist FILE")
        self.content_filter.reload()
        logger.info("blocklist reloaded")


def build_guards(
    settings: ServerSettings, connections: Connections, fingerprint: str, sample_rate_hz: int, metrics: Metrics
) -> Guards:
    """Every guard of one server, over the shared ``connections``."""
    l1 = LRUCache(LRUCacheConfig(max_bytes=settings.cache_max_bytes, ttl_s=settings.cache_ttl_s))
    limit = RateLimitConfig(rate_rps=settings.rate_limit_rps, burst=settings.rate_limit_burst)
    limiter: RateLimiter = LocalRateLimiter(limit)
    l2: RedisCache | None = None
    client, config, tracker = connections.redis, connections.redis_config, connections.redis_tracker
    if client is not None and config is not None:
        l2 = RedisCache(client, config, RedisCacheConfig(ttl_s=settings.redis_cache_ttl_s), tracker=tracker)
        limiter = RedisRateLimiter(client, limit, config, tracker=tracker)
    content_filter = ContentFilter.from_file(settings.blocklist) if settings.blocklist is not None else None
    guards = Guards(
        audio_cache=AudioCache(TieredCache(l1, l2), fingerprint, sample_rate_hz),
        rate_limits=RateLimits(limiter, on_limited=lambda scope: metrics.rate_limited.labels(scope).inc()),
        admission=AdmissionController(admission_config(settings)),
        content_filter=content_filter,
        watermark_key=_watermark_key(settings),
        watermark_key_id=settings.watermark_key_id,
        connections=connections,
    )
    metrics.guards.source = guards.stats
    return guards


def admission_config(settings: ServerSettings) -> AdmissionConfig:
    max_rss = settings.admission_max_rss_bytes
    if max_rss is None:
        max_rss = int(0.9 * psutil.virtual_memory().total)
    max_device = 0
    if settings.device.startswith("cuda") and settings.admission_max_device_fraction > 0:
        import torch  # only on GPU; the engine imported it already

        total = torch.cuda.get_device_properties(torch.device(settings.device)).total_memory
        max_device = int(settings.admission_max_device_fraction * total)
    return AdmissionConfig(
        admission_window_s=settings.admission_window_s,
        admission_max_waiting=settings.admission_max_waiting,
        admission_min_free_slots=settings.admission_min_free_slots,
        admission_max_rss_bytes=max_rss,
        admission_max_device_bytes=max_device,
        admission_retry_after_s=settings.admission_retry_after_s,
        ttfa_slo_s=settings.ttfa_slo_s,
        ttfa_max_slow_ratio=settings.ttfa_max_slow_ratio,
        ttfa_window_s=settings.ttfa_window_s,
        ttfa_min_requests=settings.ttfa_min_requests,
        degrade_mode=settings.degrade_mode,
    )


def _watermark_key(settings: ServerSettings) -> bytes | None:
    if not settings.watermark:
        return None
    if settings.watermark_key is None:
        logger.warning(
            "no watermark key configured: marking with a random per-process key that nobody can detect later; "
            "set TURBOTTS_WATERMARK_KEY (openssl rand -hex 32) to keep marks detectable"
        )
        return secrets.token_bytes(32)
    return parse_secret_key(settings.watermark_key.get_secret_value(), "watermark_key")


_THIS_PROCESS = psutil.Process()


def pressure_sample(engine: AsyncEngine, device: str) -> PressureSample:
    """What admission control looks at, sampled every 100 ms."""
    stats = engine.stats
    device_bytes = 0
    if device.startswith("cuda"):
        import torch

        device_bytes = int(torch.cuda.memory_allocated(torch.device(device)))
    return PressureSample(
        num_waiting=stats.num_waiting,
        num_free_slots=stats.num_free_slots,
        rss_bytes=_THIS_PROCESS.memory_info().rss,
        device_bytes=device_bytes,
    )


async def watch_pressure(admission: AdmissionController, engine: AsyncEngine, device: str) -> None:
    """Feed admission control a load sample every 100 ms until cancelled."""
    while True:
        admission.observe(pressure_sample(engine, device))
        await asyncio.sleep(PRESSURE_INTERVAL_S)
