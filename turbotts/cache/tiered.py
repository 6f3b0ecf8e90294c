"""Two cache levels behind one lookup: in-process L1, then shared L2.

A lookup tries L1, then L2; an L2 hit is copied into L1 so the next request on
this replica skips the network. The level that answered comes back with the
value, for the ``X-Cache: l1|l2|miss`` response header. Writes go to both
levels. L2 is optional (no Redis configured) and, being a
:class:`~turbotts.cache.redis.RedisCache`, never raises: an outage only turns
L2 lookups into misses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from turbotts.cache.lru import LRUCache

CacheLevel = Literal["l1", "l2", "miss"]


class L2Cache(Protocol):
    """What the tiered cache needs of its second level (a fake will do in tests)."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool: ...

    @property
    def num_failures(self) -> int:
        """Calls that failed (or were skipped) because the backend was down."""
        ...


@dataclass(frozen=True)
class CacheLookup:
    """A lookup's outcome: the value (None on a miss) and the level that answered."""

    value: bytes | None
    level: CacheLevel

    @property
    def is_hit(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class TieredCacheStats:
    """Counters as plain ints, ready to export (e.g. as Prometheus counters by level)."""

    num_l1_hits: int
    num_l1_misses: int
    num_l2_hits: int
    num_l2_misses: int
    num_l2_failures: int  # L2 calls that failed or were skipped during an outage
    num_l1_bytes: int
    num_l1_entries: int


class TieredCache:
    """L1 (:class:`LRUCache`) in front of an optional L2 (:class:`L2Cache`)."""

    def __init__(self, l1: LRUCache, l2: L2Cache | None = None) -> None:
        self.l1 = l1
        self.l2 = l2
        self._num_l1_hits = 0
        self._num_l1_misses = 0
        self._num_l2_hits = 0
        self._num_l2_misses = 0

    async def get(self, key: str) -> CacheLookup:
        """Look ``key`` up in L1, then L2 (copying an L2 hit into L1)."""
        value = self.l1.get(key)
        if value is not None:
            self._num_l1_hits += 1
            return CacheLookup(value, "l1")
        self._num_l1_misses += 1
        if self.l2 is None:
            return CacheLookup(None, "miss")
        value = await self.l2.get(key)
        if value is None:
            self._num_l2_misses += 1
            return CacheLookup(None, "miss")
        self._num_l2_hits += 1
        self.l1.set(key, value)
        return CacheLookup(value, "l2")

    async def set(self, key: str, value: bytes) -> None:
        """Store ``value`` in both levels, each with its own TTL (L2's is jittered)."""
        self.l1.set(key, value)
        if self.l2 is not None:
            await self.l2.set(key, value)

    def stats(self) -> TieredCacheStats:
        """A snapshot of the per-level counters."""
        return TieredCacheStats(
            num_l1_hits=self._num_l1_hits,
            num_l1_misses=self._num_l1_misses,
            num_l2_hits=self._num_l2_hits,
            num_l2_misses=self._num_l2_misses,
            num_l2_failures=self.l2.num_failures if self.l2 is not None else 0,
            num_l1_bytes=self.l1.num_bytes,
            num_l1_entries=len(self.l1),
        )
