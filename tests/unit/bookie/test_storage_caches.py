"""Write cache (double-buffered, bounded) and read cache (bounded FIFO), and the journal mark file."""

from __future__ import annotations

from pathlib import Path

from magnetar.bookkeeper.bookie.storage.log_mark import LogMark, MarkFile, decode_mark, encode_mark
from magnetar.bookkeeper.bookie.storage.read_cache import ReadCache
from magnetar.bookkeeper.bookie.storage.write_cache import ENTRY_OVERHEAD_BYTES, DoubleWriteCache, WriteCache


def test_write_cache_counts_bytes_and_replaces_entries() -> None:
    cache = WriteCache()
    cache.put(1, 5, b"a" * 10)
    cache.put(1, 3, b"b" * 10)
    cache.put(1, 5, b"c" * 20)
    assert cache.get(1, 5) == b"c" * 20
    assert cache.count == 2
    assert cache.bytes == 30 + 2 * ENTRY_OVERHEAD_BYTES
    assert cache.last_entry[1] == 5
    assert list(cache.sorted_entries(1)) == [(3, b"b" * 10), (5, b"c" * 20)]
    cache.drop_ledger(1)
    assert (cache.bytes, cache.count, cache.get(1, 5)) == (0, 0, None)


def test_double_write_cache_swaps_halves_and_reads_both() -> None:
    caches = DoubleWriteCache(2 * (100 + ENTRY_OVERHEAD_BYTES) * 2)
    assert caches.has_room(100)
    caches.active.put(1, 0, b"x" * 100)
    caches.active.put(1, 1, b"x" * 100)
    assert not caches.has_room(100)
    flushing = caches.swap()
    caches.active.put(1, 2, b"y" * 100)
    assert caches.get(1, 0) == b"x" * 100
    assert caches.get(1, 2) == b"y" * 100
    assert caches.last_entry(1) == 2
    assert flushing.count == 2
    caches.flushed()
    assert caches.get(1, 0) is None
    assert caches.last_entry(1) == 2


def test_read_cache_is_bounded_and_evicts_oldest_first() -> None:
    cache = ReadCache(3 * (10 + ENTRY_OVERHEAD_BYTES))
    for entry_id in range(5):
        cache.put(1, entry_id, b"e" * 10)
    assert len(cache) == 3
    assert cache.bytes <= cache.bytes_max
    assert cache.get(1, 0) is None
    assert cache.get(1, 4) == b"e" * 10
    cache.discard(1, 4)
    assert cache.get(1, 4) is None
    cache.put(1, 9, b"z" * 10_000)  # larger than the whole cache: not cached
    assert cache.get(1, 9) is None
    cache.clear()
    assert (len(cache), cache.bytes) == (0, 0)


def test_a_disabled_read_cache_holds_nothing() -> None:
    cache = ReadCache(0)
    cache.put(1, 1, b"x")
    assert cache.get(1, 1) is None


def test_mark_file_is_monotonic_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "lastMark"
    marks = MarkFile(path)
    assert marks.persisted is None
    assert marks.persist(LogMark(2, 700))
    assert not marks.persist(LogMark(2, 600))  # an older mark never replaces a newer one
    assert not marks.persist(LogMark(1, 9000))
    assert marks.persist(LogMark(3, 512))
    assert MarkFile(path).persisted == LogMark(3, 512)
    assert not path.with_name("lastMark.tmp").exists()


def test_a_damaged_mark_reads_as_none(tmp_path: Path) -> None:
    data = bytearray(encode_mark(LogMark(5, 1234)))
    assert decode_mark(bytes(data)) == LogMark(5, 1234)
    data[9] ^= 1
    assert decode_mark(bytes(data)) is None
    assert decode_mark(b"short") is None
    path = tmp_path / "lastMark"
    path.write_bytes(bytes(data))
    assert MarkFile(path).persisted is None
