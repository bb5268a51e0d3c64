"""End to end: space that retention frees comes back on the bookies' disks.

Several topics are written concurrently through managed ledgers (the broker's storage layer; written directly
rather than over the WebSocket API so that hundreds of megabytes fit in the test's time budget) to three
in-process disk bookies with E/W/A = 3/2/2, so every byte is stored twice and every entry log interleaves all
topics. Every subscription consumes everything, except a second, lagging subscription on topic 0 that has
read half of it - so what stays is spread thinly over all the logs, and only compaction gets the rest back.
Retention is set to 0/0 and the managed ledgers trim; then one garbage-collection pass per bookie (ledger GC
against the metadata store, dead entry logs, compaction). Afterwards each bookie's entry logs hold no more
than the live data (the records the index points at) plus 10 % and one entry log (the log being written is
never collected), and every message still retained reads back byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
import trio
from fixtures.gc import directory_bytes, entry_log_bytes, live_bytes, open_gc_cluster

from magnetar.bookkeeper.client import ClientSettings, LedgerHandle, open_bookkeeper
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.gc.ledger_gc import find_deleted_ledgers
from magnetar.gc.rate_limiter import RateLimiter
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings
from magnetar.managed_ledger.trim import RetentionPolicy

TOPICS = 5
PAYLOAD_BYTES = 64 * 1024
TOTAL_PAYLOAD_BYTES = int(os.environ.get("MAGNETAR_GC_E2E_MB", "250")) * 1024 * 1024
"""Payload produced; stored twice (W=2), so the bookies' logs receive twice this (about 500 MB)."""
ENTRIES_PER_LEDGER = 40
ENTRY_LOG_BYTES = 8 * 1024 * 1024
ENGINE = {
    "entry_log_bytes_max": ENTRY_LOG_BYTES,
    "entry_bytes_max": 256 * 1024,
    "write_cache_bytes_max": 256 * 1024 * 1024,
    "journal_file_bytes_max": 16 * 1024 * 1024,
    "journal_preallocate_bytes": 1024 * 1024,
    "journal_queue_bytes_max": 32 * 1024 * 1024,
    "journal_max_backups": 0,
    "checkpoint_interval_ms": 1000,
}


def payload(topic: int, seq: int) -> bytes:
    head = topic.to_bytes(4, "big") + seq.to_bytes(8, "big")
    block = hashlib.blake2b(head, digest_size=64).digest()
    return head + (block * (PAYLOAD_BYTES // len(block) + 1))[: PAYLOAD_BYTES - len(head)]


async def produce(ml: ManagedLedger, topic: int, count: int) -> None:
    done = trio.Event()
    outstanding = 0
    failures: list[object] = []

    def on_added(result: object) -> None:
        nonlocal outstanding
        outstanding -= 1
        if not isinstance(result, Position):
            failures.append(result)
        if outstanding == 0:
            done.set()

    for seq in range(count):
        await ml.wait_for_capacity()
        outstanding += 1
        ml.add_entry_nowait(payload(topic, seq), on_added)
    if outstanding:
        await done.wait()
    assert not failures, failures[:3]


async def consume(ml: ManagedLedger, topic: int, count: int, subscription: str = "sub") -> None:
    cursor = ml.cursors[subscription]
    seen = 0
    while seen < count:
        entries = await cursor.read_entries(min(200, count - seen))
        assert entries, f"topic {topic}: only {seen} of {count} entries readable"
        for e in entries:
            assert e.data == payload(topic, seen)
            seen += 1
        cursor.ack_cumulative(entries[-1].position)
    await cursor.flush()


async def add_pipelined(adds: list[tuple[LedgerHandle, bytes]]) -> None:
    done = trio.Event()
    results: list[object] = []

    def on_add(result: object) -> None:
        results.append(result)
        if len(results) == len(adds):
            done.set()

    for handle, data in adds:
        await handle.wait_for_room()
        handle.add_entry_nowait(data, on_add)
    await done.wait()
    assert all(isinstance(r, int) for r in results), [r for r in results if not isinstance(r, int)][:3]


@pytest.mark.slow
async def test_retention_and_one_gc_cycle_give_the_disk_back(tmp_path: Path) -> None:
    per_topic = (
        TOTAL_PAYLOAD_BYTES // PAYLOAD_BYTES // TOPICS + ENTRIES_PER_LEDGER // 4
    )  # current ledgers hold some
    metadata = MemoryMetadataStore()
    ml_settings = ManagedLedgerSettings(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        max_entries_per_ledger=ENTRIES_PER_LEDGER,
        min_ledger_rollover_time_min=0,
        mark_delete_rate_per_s=100.0,
        pending_adds_max=16,
        entry_cache_bytes_max=0,
    )
    client = ClientSettings(ensemble_size=3, write_quorum=2, ack_quorum=2)
    async with (
        open_gc_cluster(metadata, tmp_path, 3, engine=ENGINE) as cluster,
        open_bookkeeper(metadata, cluster.transport, client) as bk,
        open_managed_ledger_factory(bk, metadata, ml_settings) as factory,
    ):
        mls = [await factory.open(f"public/default/persistent/topic-{t}") for t in range(TOPICS)]
        for ml in mls:
            await ml.open_cursor("sub")
        await mls[0].open_cursor("audit")
        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            for topic, ml in enumerate(mls):
                nursery.start_soon(produce, ml, topic, per_topic)
        produced_s = time.monotonic() - began
        await cluster.checkpoint()
        written = [entry_log_bytes(b.store.settings) for b in cluster.bookies]
        async with trio.open_nursery() as nursery:
            for topic, ml in enumerate(mls):
                nursery.start_soon(consume, ml, topic, per_topic)
            nursery.start_soon(consume, mls[0], 0, per_topic // 2, "audit")
        trimmed = [await ml.trim(RetentionPolicy(time_minutes=0, size_mb=0)) for ml in mls]
        assert all(len(t) == per_topic // ENTRIES_PER_LEDGER for t in trimmed[1:])
        assert len(trimmed[0]) == per_topic // 2 // ENTRIES_PER_LEDGER

        began = time.monotonic()
        results = await cluster.gc_cycle()
        gc_s = time.monotonic() - began

        for b, result, before in zip(cluster.bookies, results, written, strict=True):
            store = b.store
            live = live_bytes(store)
            logs = entry_log_bytes(store.settings)
            index = directory_bytes(store.settings.index_path)
            compaction = result.compaction.to_json() if result.compaction else result.compaction_skipped
            print(
                f"{b.bookie_id}: entry logs {before / 2**20:.1f} -> {logs / 2**20:.1f} MiB "
                f"(live {live / 2**20:.1f} MiB, index {index / 2**20:.1f} MiB, "
                f"data dir {directory_bytes(store.settings.data_dir) / 2**20:.1f} MiB, "
                f"journal {directory_bytes(store.settings.journal_path) / 2**20:.1f} MiB); "
                f"{len(result.deleted_ledgers)} ledgers and {len(result.deleted_logs)} logs deleted, "
                f"compaction {compaction}"
            )
            data_dir = directory_bytes(store.settings.data_dir)  # entry logs, index, journal mark
            assert data_dir <= 1.1 * live + ENTRY_LOG_BYTES, f"{b.bookie_id} kept {data_dir} bytes for {live}"
            journal = directory_bytes(store.settings.journal_path)
            assert journal <= ENGINE["journal_file_bytes_max"] + ENGINE["journal_preallocate_bytes"]
            assert result.deleted_ledgers
            assert not set(store.ledgers()) & (set(result.deleted_ledgers))
            data_ledgers = set(store.ledgers()) & {lid for t in trimmed for lid in t}
            assert not data_ledgers, f"trimmed ledgers {data_ledgers} are still on {b.bookie_id}"
            gone = await find_deleted_ledgers(store.ledgers(), metadata, RateLimiter(0))
            assert gone == [], f"ledgers {gone} were deleted in metadata but are still on {b.bookie_id}"
        print(f"produced {TOTAL_PAYLOAD_BYTES / 2**20:.0f} MiB in {produced_s:.1f} s; GC cycle {gc_s:.1f} s")

        for topic, ml in enumerate(mls):
            first = ml.ledgers.first_position()
            assert first is not None
            reader = ml.open_non_durable_cursor(first)
            retained = []
            while entries := await reader.read_entries(100):
                retained.extend(entries)
            assert retained, f"topic {topic} retains its current ledger"
            start = per_topic - len(retained)
            for offset, e in enumerate(retained):
                assert e.data == payload(topic, start + offset)
            ml.close_non_durable_cursor(reader)
    await metadata.aclose()


async def test_mixed_lifetimes_short_lived_ledgers_are_compacted_away(tmp_path: Path) -> None:
    """Long-lived and short-lived ledgers interleaved in the same entry logs (through the replication client,
    E/W/A 3/3/2); the short-lived ones are deleted; a minor compaction reclaims their space and every entry
    of the long-lived ones still reads back."""
    metadata = MemoryMetadataStore()
    client = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    long_entries: dict[int, list[bytes]] = {}
    short_ids: list[int] = []
    engine = {"entry_log_bytes_max": 128 * 1024}
    async with (
        open_gc_cluster(metadata, tmp_path, 3, engine=engine) as cluster,
        open_bookkeeper(metadata, cluster.transport, client) as bk,
    ):
        longs = [await bk.create_ledger(password=b"long") for _ in range(2)]
        for handle in longs:
            long_entries[handle.ledger_id] = []
        for round_ in range(20):
            short = await bk.create_ledger(password=b"short")
            short_ids.append(short.ledger_id)
            adds: list[tuple[LedgerHandle, bytes]] = []
            for i in range(45):
                adds.append((short, f"short {round_}/{i} ".encode() * 60))
                if i % 9 == 0:
                    for handle in longs:
                        data = f"long {handle.ledger_id}/{len(long_entries[handle.ledger_id])} ".encode() * 60
                        adds.append((handle, data))
                        long_entries[handle.ledger_id].append(data)
            await add_pipelined(adds)
            await short.close()
            await cluster.checkpoint()  # every entry log holds runs of both kinds
        for handle in longs:
            await handle.close()
        for ledger_id in short_ids:
            await bk.delete_ledger(ledger_id)
        before = [entry_log_bytes(b.store.settings) for b in cluster.bookies]
        results = await cluster.gc_cycle(force_major=False, force_minor=True)
        for b, result, size in zip(cluster.bookies, results, before, strict=True):
            assert sorted(result.deleted_ledgers) == sorted(short_ids)
            assert result.compaction is not None
            assert result.compaction.kind == "minor"
            assert result.compaction.logs_compacted > 0
            after = entry_log_bytes(b.store.settings)
            live = live_bytes(b.store)
            print(f"{b.bookie_id}: {size} -> {after} bytes ({live} live): {result.compaction.to_json()}")
            assert after <= 1.1 * live + engine["entry_log_bytes_max"]
        for ledger_id, expected in long_entries.items():
            reader = await bk.open_ledger(ledger_id, b"long")
            assert [e.payload for e in await reader.read_entries(0, len(expected) - 1)] == expected
            await reader.close()
    await metadata.aclose()
