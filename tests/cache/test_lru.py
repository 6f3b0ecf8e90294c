from __future__ import annotations

import threading

import pytest

from turbotts.cache.lru import LRUCache, LRUCacheConfig, entry_size
from turbotts.errors import InvalidInputError


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def make(max_bytes: int, ttl_s: float | None = None) -> tuple[LRUCache, FakeClock]:
    clock = FakeClock()
    return LRUCache(LRUCacheConfig(max_bytes=max_bytes, ttl_s=ttl_s), clock=clock), clock


def test_get_set_and_counters() -> None:
    cache, _ = make(1000)
    assert cache.get("a") is None
    assert cache.set("a", b"xyz")
    assert cache.get("a") == b"xyz"
    assert (cache.num_hits, cache.num_misses) == (1, 1)
    assert cache.num_bytes == entry_size("a", b"xyz") == 4


def test_evicts_least_recently_used_by_bytes() -> None:
    cache, _ = make(3 * entry_size("k0", b"x" * 10))  # room for exactly three 10-byte values
    for i in range(3):
        cache.set(f"k{i}", b"x" * 10)
    cache.get("k0")  # k0 becomes most recent, so k1 is now the oldest
    cache.set("k3", b"y" * 10)
    assert cache.get("k1") is None
    assert cache.get("k0") is not None and cache.get("k2") is not None and cache.get("k3") is not None
    assert cache.num_evictions == 1
    assert cache.num_bytes <= cache.config.max_bytes


def test_a_large_value_evicts_several_small_ones() -> None:
    cache, _ = make(100)
    for i in range(5):
        cache.set(f"s{i}", b"x" * 10)  # 12 bytes each
    cache.set("big", b"z" * 80)  # 83 bytes: only one small entry can stay
    assert len(cache) == 2 and cache.get("s4") is not None and cache.get("big") is not None
    assert cache.num_bytes == 83 + 12


def test_overwrite_replaces_size() -> None:
    cache, _ = make(1000)
    cache.set("a", b"x" * 100)
    cache.set("a", b"x" * 10)
    assert cache.num_bytes == 11 and len(cache) == 1


def test_value_larger_than_budget_is_not_stored_and_drops_stale_value() -> None:
    cache, _ = make(50)
    cache.set("a", b"old")
    assert not cache.can_set("a", b"x" * 60)
    assert cache.set("a", b"x" * 60) is False
    assert cache.get("a") is None
    assert cache.num_bytes == 0


def test_default_and_per_entry_ttl_expire_on_the_injected_clock() -> None:
    cache, clock = make(1000, ttl_s=10.0)
    cache.set("default", b"1")
    cache.set("short", b"2", ttl_s=2.0)
    clock.now_s += 1.9
    assert cache.get("short") == b"2"
    clock.now_s += 0.2
    assert cache.get("short") is None
    assert cache.get("default") == b"1"
    clock.now_s += 8.0
    assert cache.get("default") is None
    assert cache.num_expirations == 2 and cache.num_bytes == 0


def test_no_ttl_means_no_expiry() -> None:
    cache, clock = make(1000, ttl_s=None)
    cache.set("a", b"1")
    clock.now_s += 1e9
    assert cache.get("a") == b"1"


def test_zero_budget_disables_the_cache() -> None:
    cache, _ = make(0)
    assert cache.set("a", b"1") is False
    assert cache.get("a") is None


def test_bad_config_and_ttl_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        LRUCacheConfig(max_bytes=-1)
    with pytest.raises(InvalidInputError):
        LRUCacheConfig(ttl_s=0)
    cache, _ = make(10)
    with pytest.raises(InvalidInputError):
        cache.set("a", b"1", ttl_s=-1)


def test_delete_and_clear() -> None:
    cache, _ = make(1000)
    cache.set("a", b"1")
    cache.set("b", b"2")
    assert cache.delete("a") and not cache.delete("a")
    cache.clear()
    assert len(cache) == 0 and cache.num_bytes == 0


def test_threads_keep_the_byte_budget_and_accounting() -> None:
    cache, _ = make(2000)
    num_threads, num_ops = 4, 2000

    def work(seed: int) -> None:
        for i in range(num_ops):
            key = f"k{(i * 7 + seed) % 97}"
            if i % 3:
                cache.set(key, bytes(10 + (i + seed) % 50))
            else:
                cache.get(key)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(num_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with cache._lock:
        held = sum(e.num_bytes for e in cache._entries.values())
    assert cache.num_bytes == held <= 2000
    assert cache.num_hits + cache.num_misses == num_threads * len(range(0, num_ops, 3))
