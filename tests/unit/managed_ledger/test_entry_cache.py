from __future__ import annotations

from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.position import Position


def test_evicts_oldest_across_ledgers_within_the_byte_budget() -> None:
    cache = EntryCache(max_bytes=30)
    cache.put("a", Position(1, 0), b"x" * 10)
    cache.put("b", Position(2, 0), b"y" * 10)
    cache.put("a", Position(1, 1), b"z" * 10)
    cache.put("b", Position(2, 1), b"w" * 10)
    assert cache.size_bytes == 30
    assert cache.get("a", Position(1, 0)) is None
    assert cache.get("b", Position(2, 1)) == b"w" * 10
    assert (cache.hits, cache.misses) == (1, 1)


def test_invalidation_and_bounded_order_queue() -> None:
    cache = EntryCache(max_bytes=1 << 20)
    for i in range(10_000):
        cache.put("t", Position(1, i), b"p")
        cache.invalidate_before("t", Position(1, i))
    assert cache.entry_count == 1
    assert len(cache._order) <= 2 * cache.entry_count + 1025
    cache.put("t", Position(2, 0), b"q")
    cache.invalidate_ledger("t", 2)
    cache.clear("t")
    assert (cache.entry_count, cache.size_bytes) == (0, 0)


def test_oversized_entries_are_not_cached() -> None:
    cache = EntryCache(max_bytes=4)
    cache.put("t", Position(1, 0), b"12345")
    assert cache.get("t", Position(1, 0)) is None
    assert cache.size_bytes == 0
