"""Journal bytes on disk with ``journal_max_backups`` 0 and 5: what a dedicated journal volume must hold.

Run: ``.venv/bin/python tests/bench/bench_journal_backups.py [--mib 256] [--file-mib 16]``. Writes ``--mib``
MiB of 4 KiB entries through the real storage engine (fsynced journal, a checkpoint every 250 ms), sampling
the journal directory's size after every MiB; prints the peak and final bytes for each setting. Disk bytes are
reliable on a shared machine (timings are not, and none are reported). Figures go to RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import trio

from magnetar.bookkeeper.bookie.storage.engine import open_ledger_store
from magnetar.bookkeeper.bookie.storage.settings import MIB, BookieStorageSettings
from magnetar.bookkeeper.protocol.digest import Digester, DigestType

ENTRY_BYTES = 4096
DIGESTER = Digester(DigestType.CRC32C)


def journal_bytes(path: Path) -> int:
    return sum(os.stat(path / name).st_blocks * 512 for name in os.listdir(path))


async def run(backups: int, total_mib: int, file_mib: int) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory(prefix="magnetar-journal-") as tmp:
        settings = BookieStorageSettings(
            data_dir=Path(tmp) / "data",
            journal_dir=Path(tmp) / "journal",
            journal_file_bytes_max=file_mib * MIB,
            journal_max_backups=backups,
            checkpoint_interval_ms=250,
            disk_free_bytes_min=0,
        )
        peak = 0
        payload = b"x" * (ENTRY_BYTES - 64)
        async with open_ledger_store(settings) as store:
            store.create_ledger(1, b"k" * 20, lambda _: None)
            per_mib = MIB // ENTRY_BYTES
            for entry_id in range(total_mib * per_mib):
                body = DIGESTER.package(1, entry_id, entry_id - 1, 0, payload)
                await store.wait_writable(len(body))
                store.add_entry(1, entry_id, body, lambda _: None)
                if entry_id % per_mib == per_mib - 1:
                    await store.journal.drain()
                    await trio.sleep(0.05)  # lets the checkpoints run as they would under steady load
                    peak = max(peak, journal_bytes(settings.journal_path))
            await store.journal.drain()
            await store.checkpoint()
            final = journal_bytes(settings.journal_path)
            files = len(list(settings.journal_path.glob("*.txn")))
        return peak, final, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB of entries to write")
    parser.add_argument("--file-mib", type=int, default=16, help="journal_file_bytes_max in MiB")
    args = parser.parse_args()
    for backups in (0, 5):
        peak, final, files = trio.run(run, backups, args.mib, args.file_mib)
        print(
            f"journal_max_backups={backups}: peak {peak / MIB:.1f} MiB, after the last checkpoint "
            f"{final / MIB:.1f} MiB in {files} files ({args.mib} MiB written, {args.file_mib} MiB files)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
