"""Crash-test worker: runs the storage engine under a write load and reports every acknowledgement.

Run as ``python storage_crash_worker.py DATA_DIR SEED``. It opens the store with settings that make it
checkpoint, roll journal files and entry logs and swap write caches often, creates the ledgers, prints
``READY``, and then adds entries to random ledgers (sizes from a few bytes to tens of KiB) with up to
``WINDOW`` adds in flight, fencing a ledger now and then. Each acknowledgement is written to stdout *after*
the engine reported it durable, as one ``os.write`` of one short line (atomic on a pipe):
``A <ledger> <entry>`` for an entry, ``F <ledger>`` for a fence. The test kills this process with SIGKILL
at a random moment; it runs until then. The entry bytes are a function of (seed, ledger, entry) so that
the test can check what it reads back.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

import trio

from magnetar.bookkeeper.bookie.storage.engine import open_ledger_store
from magnetar.bookkeeper.bookie.storage.ledger_store import DurableCallback
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.bookkeeper.protocol.digest import Digester, DigestType

LEDGERS = 6
WINDOW = 300
KEY = b"crash-test-master-k!"
DIGESTER = Digester(DigestType.CRC32C)


def worker_settings(data_dir: Path) -> BookieStorageSettings:
    return BookieStorageSettings(
        data_dir=data_dir,
        journal_file_bytes_max=512 * 1024,
        journal_preallocate_bytes=128 * 1024,
        journal_max_backups=1,
        entry_log_bytes_max=1024 * 1024,
        entry_bytes_max=64 * 1024,
        write_cache_bytes_max=2 * 1024 * 1024,
        checkpoint_interval_ms=150,
        checkpoint_slice_entries=256,
        disk_free_bytes_min=0,
    )


def expected_entry(seed: int, ledger_id: int, entry_id: int) -> bytes:
    digest = hashlib.blake2b(f"{seed}:{ledger_id}:{entry_id}".encode()).digest()
    size = 1 + digest[0] * (40 if digest[1] < 16 else 1)  # mostly small, sometimes up to ~10 KiB
    payload = (digest * (size // len(digest) + 1))[:size]
    return DIGESTER.package(ledger_id, entry_id, entry_id - 1, 0, payload)


def report(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def run(data_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    async with open_ledger_store(worker_settings(data_dir)) as store:
        for ledger_id in range(LEDGERS):
            store.create_ledger(ledger_id, KEY, lambda _: None)
        await store.journal.drain()
        report("READY")
        next_entry = [0] * LEDGERS
        open_ledgers = list(range(LEDGERS))
        in_flight = 0
        room = trio.Event()

        def acked(ledger_id: int, entry_id: int) -> DurableCallback:
            def on_durable(error: BaseException | None) -> None:
                nonlocal in_flight, room
                in_flight -= 1
                room.set()
                room = trio.Event()
                if error is None:
                    report(f"A {ledger_id} {entry_id}")

            return on_durable

        def fenced(ledger_id: int) -> DurableCallback:
            def on_durable(error: BaseException | None) -> None:
                if error is None:
                    report(f"F {ledger_id}")

            return on_durable

        while open_ledgers:
            while in_flight >= WINDOW:
                await room.wait()
            ledger_id = rng.choice(open_ledgers)
            if rng.random() < 0.0005 and len(open_ledgers) > 2:
                open_ledgers.remove(ledger_id)
                store.fence(ledger_id, fenced(ledger_id))
                continue
            entry_id = next_entry[ledger_id]
            body = expected_entry(seed, ledger_id, entry_id)
            await store.wait_writable(len(body))
            store.add_entry(ledger_id, entry_id, body, acked(ledger_id, entry_id))
            next_entry[ledger_id] += 1
            in_flight += 1
            if entry_id % 16 == 0:
                await trio.lowlevel.checkpoint()


if __name__ == "__main__":
    trio.run(run, Path(sys.argv[1]), int(sys.argv[2]))
