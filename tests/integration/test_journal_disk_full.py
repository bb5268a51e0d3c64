"""A full journal volume turns the bookie read-only and not ready; writers go on through ensemble changes, and
the bookie comes back when space returns.

Four in-process bookies on real disk engines; bookie 0's journal has a small volume of its own - a tmpfs of
a few MiB when this machine lets the test mount one, otherwise an injected disk-usage probe that reports the
journal directory's real size plus a "filler" against a pretend capacity (the ledger volumes report a low,
fixed usage either way). A writer adds entries to a ledger whose ensemble holds bookie 0 while something else
fills bookie 0's journal volume. Before the journal volume was watched, bookie 0 stayed writable and ready:
it kept being chosen for new ensembles while its adds failed. Now its disk monitor turns it read-only: it
re-registers under ``available/readonly`` (no new ensemble picks it), answers EREADONLY (the writer replaces
it in its ensemble: not one add fails) and its readiness probe answers 503. With the filler gone it is
writable and ready again, and takes normal adds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from fixtures.disk import add, registered_readonly, small_filesystem
from fixtures.gc import directory_bytes, open_gc_cluster

from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage
from magnetar.bookkeeper.bookie.storage.opening import statvfs_probe
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.status import BookieStatus

JOURNAL_CAPACITY_BYTES = 8 * 1024 * 1024
ROOMY = DiskUsage(total_bytes=100 * 1024**3, free_bytes=90 * 1024**3)
"""What every ledger volume reports (10 % used), whatever the disk of this machine holds."""


class Volumes:
    """The disk-usage probe of one bookie: ledger volume roomy, journal volume real (tmpfs) or pretend."""

    def __init__(self, journal: Path, *, real: bool) -> None:
        self.journal = journal
        self.real = real
        self.filler_bytes = 0
        """Pretend variant: bytes something else holds on the journal volume."""

    def __call__(self, path: Path) -> DiskUsage:
        if path != self.journal:
            return ROOMY
        if self.real:
            return statvfs_probe(path)
        used = directory_bytes(path) + self.filler_bytes
        return DiskUsage(JOURNAL_CAPACITY_BYTES, max(0, JOURNAL_CAPACITY_BYTES - used))

    def fill(self) -> None:
        """Leave less than 5 % of the journal volume free (above disk_usage_threshold)."""
        usage = self(self.journal)
        keep = int(usage.total_bytes * 0.02)
        if self.real:
            with open(self.journal / "filler", "wb") as f:
                f.write(b"\0" * max(0, usage.free_bytes - keep))
        else:
            self.filler_bytes += usage.free_bytes - keep

    def empty(self) -> None:
        if self.real:
            os.unlink(self.journal / "filler")
        else:
            self.filler_bytes = 0


@pytest.mark.parametrize("disk", ["probe", "tmpfs"])
async def test_a_full_journal_volume_makes_the_bookie_read_only_and_writers_go_on(
    tmp_path: Path, disk: str
) -> None:
    metadata = MemoryMetadataStore()
    journal = tmp_path / "journal-0"  # bookie 0's journal directory (open_gc_cluster's layout)
    with small_filesystem(journal, JOURNAL_CAPACITY_BYTES) as mounted:
        real = disk == "tmpfs" and mounted
        if disk == "tmpfs" and not mounted:
            print("cannot mount a tmpfs here: the injected disk-usage probe stands in for it")
        volumes = Volumes(journal, real=real)
        probes = [volumes, *(lambda _: ROOMY for _ in range(3))]
        engine = {
            "journal_file_bytes_max": 256 * 1024,
            "journal_preallocate_bytes": 64 * 1024,
            "checkpoint_interval_ms": 200,
        }
        async with (
            open_gc_cluster(metadata, tmp_path, 4, engine=engine, probes=probes) as cluster,
            open_bookkeeper(
                metadata,
                cluster.transport,
                ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2, bookie_quarantine_ms=600_000),
            ) as bk,
        ):
            first = cluster.bookies[0]
            assert first.store.settings.journal_path == journal
            victim = first.bookie_id
            for _ in range(50):
                lh = await bk.create_ledger(password=b"pw")
                if victim in lh.metadata.last_ensemble[1]:
                    break
                await lh.close()
            assert victim in lh.metadata.last_ensemble[1]
            for i in range(50):
                await lh.add_entry(b"before %d" % i)
            assert first.bookie.is_ready

            volumes.fill()
            await registered_readonly(metadata, victim, True)  # the monitor checks every 100 ms
            assert first.bookie.state.readonly
            assert not first.bookie.is_ready
            assert first.bookie.monitor.full_volumes == ["journal"]
            assert b"magnetar_bookie_journal_disk_usage_ratio 0.98" in first.bookie.render_metrics()
            with trio.fail_after(30):
                for i in range(200):  # not one add fails: the writer replaces the read-only bookie
                    await lh.add_entry(b"after %d" % i)
            assert victim not in lh.metadata.last_ensemble[1]
            fresh = await bk.create_ledger(password=b"pw")
            assert victim not in fresh.metadata.last_ensemble[1]
            assert await add(first.bookie.core, 99, 0, size=200) is BookieStatus.EREADONLY
            assert await add(first.bookie.core, 99, 0, size=200, recovery=True) is BookieStatus.EOK

            volumes.empty()
            await registered_readonly(metadata, victim, False)
            assert first.bookie.is_ready
            assert first.bookie.monitor.full_volumes == []
            assert await add(first.bookie.core, 99, 1, size=200) is BookieStatus.EOK
            await lh.close()
            assert lh.last_add_confirmed == 249
