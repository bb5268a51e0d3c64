"""Crash-test worker: a bookie storage engine compacting its entry logs while it keeps taking writes.

``python gc_crash_worker.py DATA_DIR prepare 0`` prepares ``DATA_DIR``: long-lived ledgers 1, 3, 5 and
short-lived ledgers 2, 4, 6 interleaved in every entry log, the short-lived ones deleted.

``python gc_crash_worker.py DATA_DIR KILL_STEP KILL_AT`` opens the engine (which recovers whatever an earlier
crash left), prints ``READY``, then runs garbage-collection passes with forced major compaction,
rate-limited so that a compaction takes a while, while a writer adds entries to ledger 7 and reports each
one *after* the engine made it durable (``A 7 <entry>``, one ``os.write`` per line). Every compaction step
is reported (``S <step>``); with ``KILL_STEP`` set (``copy``, ``manifest``, ``relocated`` ...), the worker
SIGKILLs itself at the ``KILL_AT``-th occurrence of that step - the crash lands exactly between two steps of
the transactional compaction. With ``KILL_STEP`` ``-`` it runs until the test kills it at a random moment.
Entry bytes are a function of (ledger, entry) so the test can check every byte it reads back.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.bookkeeper.protocol.digest import Digester, DigestType
from magnetar.gc.collector import BookieGarbageCollector
from magnetar.gc.settings import GcSettings

LONG = (1, 3, 5)
SHORT = (2, 4, 6)
WRITER_LEDGER = 7
ENTRIES = 1500
KEY = b"gc-crash-master-key!"
DIGESTER = Digester(DigestType.CRC32C)


def worker_settings(data_dir: Path) -> BookieStorageSettings:
    return BookieStorageSettings(
        data_dir=data_dir,
        journal_file_bytes_max=256 * 1024,
        journal_preallocate_bytes=64 * 1024,
        journal_max_backups=0,
        entry_log_bytes_max=192 * 1024,
        entry_bytes_max=16 * 1024,
        write_cache_bytes_max=1024 * 1024,
        read_cache_bytes_max=0,
        checkpoint_interval_ms=200,
        disk_free_bytes_min=0,
    )


def gc_settings() -> GcSettings:
    return GcSettings(
        gc_wait_time_s=3600,
        minor_compaction_interval_s=3600,
        major_compaction_interval_s=3600,
        compaction_throttle_by_bytes=True,
        compaction_rate_bytes_per_s=1_000_000,
        compaction_batch_bytes=64 * 1024,
        compaction_relocate_batch_entries=64,
        compaction_free_bytes_reserve=0,
    )


def expected_entry(ledger_id: int, entry_id: int) -> bytes:
    size = 100 + (ledger_id * 7919 + entry_id * 104729) % 400
    payload = bytes((ledger_id + entry_id + i) % 251 for i in range(size))
    return DIGESTER.package(ledger_id, entry_id, entry_id - 1, 0, payload)


def noop(_: BaseException | None) -> None:
    return None


async def prepare(data_dir: Path) -> None:
    """Ledgers 1-6 interleaved in every entry log (a checkpoint every 20 rounds), then 2, 4, 6 deleted."""
    async with open_ledger_store(worker_settings(data_dir)) as store:
        for ledger_id in (*LONG, *SHORT):
            store.create_ledger(ledger_id, KEY, noop)
        for entry_id in range(ENTRIES):
            for ledger_id in (*LONG, *SHORT):
                body = expected_entry(ledger_id, entry_id)
                await store.wait_writable(len(body))
                store.add_entry(ledger_id, entry_id, body, noop)
            if entry_id % 20 == 19:
                await store.journal.drain()
                await store.checkpoint()
        await store.journal.drain()
        for ledger_id in SHORT:
            store.delete_ledger(ledger_id)
        store.create_ledger(WRITER_LEDGER, KEY, noop)
        await store.journal.drain()


def report(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def write_forever(store: DbLedgerStorage) -> None:
    entry_id = 0
    while True:
        body = expected_entry(WRITER_LEDGER, entry_id)
        await store.wait_writable(len(body))

        def acked(error: BaseException | None, entry_id: int = entry_id) -> None:
            if error is None:
                report(f"A {WRITER_LEDGER} {entry_id}")

        store.add_entry(WRITER_LEDGER, entry_id, body, acked)
        entry_id += 1
        await trio.sleep(0.002)


async def run(data_dir: Path, kill_step: str, kill_at: int) -> None:
    seen: dict[str, int] = {}

    def on_step(step: str) -> None:
        seen[step] = seen.get(step, 0) + 1
        report(f"S {step}")
        if step == kill_step and seen[step] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    async with open_ledger_store(worker_settings(data_dir)) as store:
        collector = BookieGarbageCollector(store, None, gc_settings(), on_step=on_step, name="crash-worker")
        report("READY")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_forever, store)
            while True:
                await store.checkpoint()
                result = await collector.run_once(force_major=True)
                report(f"P {'ok' if result is not None else 'failed'}")
                await trio.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[2] == "prepare":
        trio.run(prepare, Path(sys.argv[1]))
    else:
        trio.run(run, Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
