"""The in-process (L1) audio cache: least-recently-used, bounded in bytes.

Audio clips differ in size by orders of magnitude, so a bound on the number of
entries says nothing about memory; the bound here is on bytes. Each entry has
its own time to live, checked on read against an injectable monotonic clock
(tests move time by hand). One lock guards everything, so the cache can be
shared between the event loop and worker threads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from turbotts.errors import InvalidInputError


@dataclass(frozen=True)
class LRUCacheConfig:
    """Size and lifetime of the L1 cache.

    Args:
        max_bytes: budget for keys plus values; 0 disables the cache (every get misses).
        ttl_s: default time to live of an entry; None = until evicted.
    """

    max_bytes: int = 256 * 1024 * 1024
    ttl_s: float | None = 3600.0

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise InvalidInputError(f"max_bytes={self.max_bytes} is negative; pass 0 to disable the L1 cache")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise InvalidInputError(f"ttl_s={self.ttl_s} must be positive; pass None for no expiry")


@dataclass
class _Entry:
    value: bytes
    num_bytes: int
    expires_at: float | None


def entry_size(key: str, value: bytes) -> int:
    """Bytes an entry counts against the budget: the value plus its key."""
    return len(value) + len(key)


class LRUCache:
    """A thread-safe, byte-bounded LRU map from str keys to bytes values."""

    def __init__(self, config: LRUCacheConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Build an empty cache.

        Args:
            config: budget and default TTL.
            clock: a monotonic clock in seconds; inject a fake one in tests.
        """
        self.config = config
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._num_bytes = 0
        self.num_hits = 0
        self.num_misses = 0
        self.num_evictions = 0  # removed to make room
        self.num_expirations = 0  # removed because their TTL ran out

    @property
    def num_bytes(self) -> int:
        """Bytes currently held (keys plus values)."""
        return self._num_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> bytes | None:
        """The value of ``key`` if present and not expired (it becomes most recent); None on a miss."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires_at is not None and self._clock() >= entry.expires_at:
                self._remove(key)
                self.num_expirations += 1
                entry = None
            if entry is None:
                self.num_misses += 1
                return None
            self._entries.move_to_end(key)
            self.num_hits += 1
            return entry.value

    def can_set(self, key: str, value: bytes) -> bool:
        """Whether ``value`` fits the budget at all (an entry larger than the cache is never stored)."""
        return entry_size(key, value) <= self.config.max_bytes

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        """Store ``value``, evicting least-recently-used entries until it fits.

        Args:
            key: the cache key.
            value: the bytes to store.
            ttl_s: this entry's time to live; None = the configured default.

        Returns:
            True if stored, False if the value alone exceeds the budget (any
            older value under ``key`` is dropped then, so a get never returns stale audio).

        Raises:
            InvalidInputError: ``ttl_s`` is not positive.
        """
        if ttl_s is not None and ttl_s <= 0:
            raise InvalidInputError(f"ttl_s={ttl_s} must be positive")
        ttl = ttl_s if ttl_s is not None else self.config.ttl_s
        num_bytes = entry_size(key, value)
        with self._lock:
            if key in self._entries:
                self._remove(key)
            if num_bytes > self.config.max_bytes:
                return False
            while self._num_bytes + num_bytes > self.config.max_bytes:
                oldest = next(iter(self._entries))
                self._remove(oldest)
                self.num_evictions += 1
            expires_at = None if ttl is None else self._clock() + ttl
            self._entries[key] = _Entry(value, num_bytes, expires_at)
            self._num_bytes += num_bytes
            return True

    def delete(self, key: str) -> bool:
        """Drop ``key``; True if it was there."""
        with self._lock:
            if key not in self._entries:
                return False
            self._remove(key)
            return True

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._num_bytes = 0

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key)
        self._num_bytes -= entry.num_bytes
