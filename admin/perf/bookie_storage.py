"""``magnetar perf bookie-storage``: the bookie storage engine's figures, measured in one process.

Phases (each on the real engine, in a temporary directory unless ``--data-dir`` is given):

1. **throughput** - durable adds/s: 100-byte payloads (136-byte packaged entries) across 10 ledgers, with
   up to ``--in-flight`` adds outstanding; an add counts once its journal fdatasync returned (group commit).
2. **latency** - add latency p50/p99 at a fixed ``--rate`` (5,000 adds/s), measured from each add's
   scheduled time to its durability callback (so pacing delays count against us, not for us).
3. **reads** - catch-up reads/s: the engine is reopened (its caches cold) and every entry of phase 1 is read
   ledger by ledger from the entry logs (read-ahead on); once with the OS page cache warm and once after
   ``posix_fadvise(DONTNEED)`` on the entry logs.
4. **replay** - journal replay time for ``--replay-entries`` entries written without any checkpoint.
5. **disk** - the disk's own group-commit limit: a plain pwrite + fdatasync loop with the batch size the
   journal actually used in phase 1, and the ratio of the journal's rate to it.

Entry bodies are packaged before each timed phase, so the figures are the engine's, not the packager's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import struct
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.bookkeeper.bookie.storage import BookieStorageSettings, DbLedgerStorage

KEY = b"perf-bookie-storage!"
_python_gc = importlib.import_module("gc")  # Python's collector: a bare ``import gc`` names our gc/ package
_HEADER = struct.Struct(">qqqq")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="where to write; unset: a temporary directory"
    )
    parser.add_argument("--adds", type=int, default=1_000_000, help="adds in the throughput phase")
    parser.add_argument("--ledgers", type=int, default=10, help="ledgers the adds are spread over")
    parser.add_argument("--payload-bytes", type=int, default=100, help="payload bytes of every add")
    parser.add_argument("--in-flight", type=int, default=20_000, help="outstanding adds in phase 1")
    parser.add_argument("--yield-every", type=int, default=256, help="adds between event-loop turns")
    parser.add_argument("--rate", type=int, default=5_000, help="adds/s in the latency phase")
    parser.add_argument("--latency-duration-s", type=float, default=12.0, help="spans a 10 s checkpoint")
    parser.add_argument(
        "--replay-entries", type=int, default=1_000_000, help="journal entries replayed on restart"
    )
    parser.add_argument("--disk-duration-s", type=float, default=3.0, help="length of the disk-limit phase")
    parser.add_argument(
        "--progress-interval-s", type=float, default=2.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--phases", default="throughput,latency,reads,replay,disk", help="comma-separated subset to run"
    )


@dataclass
class Figures:
    lines: list[str]

    def add(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)


def make_bodies(
    ledgers: int, count: int, payload_bytes: int, first_entry: int = 0
) -> list[tuple[int, int, bytes]]:
    """``count`` packaged entries (CRC32C digests) round-robin over the ledgers."""
    import crc32c  # noqa: PLC0415

    payload = bytes(range(256)) * (payload_bytes // 256 + 1)
    payload = payload[:payload_bytes]
    out = []
    for i in range(count):
        ledger_id = i % ledgers
        entry_id = first_entry + i // ledgers
        header = _HEADER.pack(ledger_id, entry_id, entry_id - 1, (entry_id + 1) * payload_bytes)
        digest = crc32c.crc32c(payload, crc32c.crc32c(header)).to_bytes(4, "big")
        out.append((ledger_id, entry_id, header + digest + payload))
    return out


def base_settings(data_dir: Path, **overrides: object) -> BookieStorageSettings:
    from magnetar.bookkeeper.bookie.storage import BookieStorageSettings  # noqa: PLC0415

    values: dict[str, object] = {"data_dir": data_dir, "disk_free_bytes_min": 0}
    values.update(overrides)
    return BookieStorageSettings.model_validate(values)


class Progress:
    def __init__(self, label: str, interval_s: float) -> None:
        self.label = label
        self.interval_s = interval_s
        self.done = 0

    async def run(self) -> None:
        import trio  # noqa: PLC0415

        started = last_t = trio.current_time()
        last_done = 0
        while True:
            await trio.sleep(self.interval_s)
            now = trio.current_time()
            rate = (self.done - last_done) / (now - last_t)
            print(
                f"  [{self.label}] {now - started:6.1f} s  {self.done:>10,d} done  {rate:>10,.0f}/s",
                flush=True,
            )
            last_t, last_done = now, self.done


async def phase_throughput(
    store: DbLedgerStorage, bodies: list[tuple[int, int, bytes]], args: argparse.Namespace
) -> float:
    import trio  # noqa: PLC0415

    from magnetar.bookkeeper.bookie.storage import StorageBusyError  # noqa: PLC0415

    progress = Progress("throughput", args.progress_interval_s)
    state = {"in_flight": 0, "errors": 0}
    room = [trio.Event()]
    window = args.in_flight

    def on_durable(error: BaseException | None) -> None:
        state["in_flight"] -= 1
        progress.done += 1
        if error is not None:
            state["errors"] += 1
        if state["in_flight"] < window:
            room[0].set()

    add = store.add_entry
    yield_every = args.yield_every
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.run)
        started = time.perf_counter()
        for i, (ledger_id, entry_id, body) in enumerate(bodies):
            while state["in_flight"] >= window:
                room[0] = trio.Event()
                await room[0].wait()
            try:
                add(ledger_id, entry_id, body, on_durable)
            except StorageBusyError:
                await store.wait_writable(len(body))
                add(ledger_id, entry_id, body, on_durable)
            state["in_flight"] += 1
            if i % yield_every == 0:
                await trio.lowlevel.checkpoint()
        await store.journal.drain()
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    if state["errors"]:
        raise RuntimeError(f"{state['errors']} adds failed")
    return len(bodies) / elapsed


async def phase_latency(
    store: DbLedgerStorage, bodies: list[tuple[int, int, bytes]], args: argparse.Namespace
) -> list[float]:
    import trio  # noqa: PLC0415

    progress = Progress("latency", args.progress_interval_s)
    scheduled: deque[float] = deque()
    latencies: list[float] = []

    def on_durable(error: BaseException | None) -> None:  # callbacks fire in append order
        latencies.append(time.perf_counter() - scheduled.popleft())
        progress.done += 1

    interval = 1.0 / args.rate
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.run)
        start = time.perf_counter()
        i = 0
        while i < len(bodies):
            due = start + i * interval
            now = time.perf_counter()
            if now < due:
                await trio.sleep(due - now)
                continue
            while i < len(bodies) and start + i * interval <= now:
                ledger_id, entry_id, body = bodies[i]
                scheduled.append(start + i * interval)
                store.add_entry(ledger_id, entry_id, body, on_durable)
                i += 1
        await store.journal.drain()
        nursery.cancel_scope.cancel()
    return latencies


async def phase_reads(store: DbLedgerStorage, ledgers: int, per_ledger: int, progress: Progress) -> float:
    """Read every entry, ledger by ledger, on the trio thread (as the bookie serves reads)."""
    import trio  # noqa: PLC0415

    read = store.read_entry
    started = time.perf_counter()
    for ledger_id in range(ledgers):
        for first in range(0, per_ledger, 10_000):
            for entry_id in range(first, min(per_ledger, first + 10_000)):
                read(ledger_id, entry_id)
            progress.done += min(per_ledger, first + 10_000) - first
            await trio.lowlevel.checkpoint()
    return ledgers * per_ledger / (time.perf_counter() - started)


def drop_page_cache(directory: Path) -> None:
    for path in directory.glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_group_commit_limit(
    directory: Path, batch_bytes: int, duration_s: float
) -> tuple[float, list[float]]:
    """syncs/s of a plain pwrite + fdatasync loop with ``batch_bytes`` per sync (file preallocated like the
    journal's), and the sync latencies."""
    path = directory / "disk-limit.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    data = b"\x5a" * batch_bytes
    chunk = 16 * 1024 * 1024
    allocated = offset = 0
    latencies = []
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < duration_s:
            if offset + batch_bytes > allocated:
                os.posix_fallocate(fd, allocated, chunk)
                allocated += chunk
            t = time.perf_counter()
            os.pwrite(fd, data, offset)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t)
            offset += batch_bytes
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return len(latencies) / elapsed, latencies


class GcPauses:
    """Collects the durations of the cyclic garbage collector's runs (pauses of the event loop)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)

    def __enter__(self) -> GcPauses:
        _python_gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        _python_gc.callbacks.remove(self._callback)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace, root: Path) -> Figures:
    import trio  # noqa: PLC0415

    from magnetar.bookkeeper.bookie.storage import open_ledger_store  # noqa: PLC0415

    def noop(_: BaseException | None) -> None:
        return None

    figures = Figures([])
    phases = set(args.phases.split(","))
    settings = base_settings(root / "bench")
    per_ledger = args.adds // args.ledgers
    stats: dict[str, float] = {}
    if phases & {"throughput", "latency", "reads", "disk"}:
        async with open_ledger_store(settings) as store:
            for ledger_id in range(args.ledgers):
                store.create_ledger(ledger_id, KEY, noop)
            await store.journal.drain()
            if phases & {"throughput", "reads", "disk"}:
                bodies = make_bodies(args.ledgers, per_ledger * args.ledgers, args.payload_bytes)
                before = (store.journal.stats.syncs, store.journal.stats.records, store.journal.stats.bytes)
                rate = await phase_throughput(store, bodies, args)
                del bodies
                journal = store.journal.stats
                syncs = journal.syncs - before[0]
                stats["adds_per_s"] = rate
                stats["batch_records"] = (journal.records - before[1]) / max(1, syncs)
                stats["batch_bytes"] = (journal.bytes - before[2]) / max(1, syncs)
                figures.add(
                    f"throughput: {rate:,.0f} durable adds/s ({per_ledger * args.ledgers:,} adds of "
                    f"{args.payload_bytes}-byte payloads over {args.ledgers} ledgers, "
                    f"{args.in_flight:,} in flight); {syncs:,} fdatasyncs, {stats['batch_records']:,.0f} "
                    f"records / {stats['batch_bytes'] / 1024:,.1f} KiB per sync"
                )
            if "latency" in phases:
                await store.checkpoint()  # the throughput phase's data is not flushed during this phase
                store.journal.stats.sync_seconds_max = 0.0
                latency_bodies = make_bodies(
                    args.ledgers, int(args.rate * args.latency_duration_s), args.payload_bytes, per_ledger
                )
                journal = store.journal.stats
                syncs_before, sync_s_before, checkpoints_before = (
                    journal.syncs,
                    journal.sync_seconds,
                    store.checkpoints,
                )
                with GcPauses() as gc_pauses:
                    latencies = await phase_latency(store, latency_bodies, args)
                syncs = journal.syncs - syncs_before
                figures.add(
                    f"latency at {args.rate:,} adds/s: p50 {pct(latencies, 0.5) * 1e3:.2f} ms, "
                    f"p99 {pct(latencies, 0.99) * 1e3:.2f} ms, p99.9 {pct(latencies, 0.999) * 1e3:.2f} ms, "
                    f"max {max(latencies) * 1e3:.2f} ms ({len(latencies):,} adds in {syncs:,} fdatasyncs "
                    f"of {(journal.sync_seconds - sync_s_before) / max(1, syncs) * 1e3:.2f} ms mean "
                    f"(max {journal.sync_seconds_max * 1e3:.0f} ms), "
                    f"{store.checkpoints - checkpoints_before} checkpoints and {len(gc_pauses.pauses)} GC "
                    f"pauses of up to {max(gc_pauses.pauses, default=0) * 1e3:.0f} ms during the phase)"
                )
        if "reads" in phases:
            for label, cold_os in (("OS page cache warm", False), ("after fadvise(DONTNEED)", True)):
                if cold_os:
                    drop_page_cache(settings.entry_log_path)
                async with open_ledger_store(settings) as store:
                    progress = Progress("reads", args.progress_interval_s)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(progress.run)
                        reads = await phase_reads(store, args.ledgers, per_ledger, progress)
                        nursery.cancel_scope.cancel()
                figures.add(f"catch-up reads ({label}, engine caches cold): {reads:,.0f} reads/s")
        if "disk" in phases and "batch_bytes" in stats:
            batch = max(1, int(stats["batch_bytes"]))
            syncs_per_s, sync_latencies = disk_group_commit_limit(root, batch, args.disk_duration_s)
            limit = syncs_per_s * stats["batch_records"]
            figures.add(
                f"disk group-commit limit: {syncs_per_s:,.0f} pwrite+fdatasync/s of {batch:,} bytes "
                f"(p50 {statistics.median(sync_latencies) * 1e3:.2f} ms) = {limit:,.0f} entries/s at "
                f"{stats['batch_records']:,.0f} entries per sync; "
                f"journal/disk ratio {stats['adds_per_s'] / limit:.2f}"
            )
    if "replay" in phases:
        await phase_replay(root, args, figures)
    return figures


async def phase_replay(root: Path, args: argparse.Namespace, figures: Figures) -> None:
    from magnetar.bookkeeper.bookie.storage import open_ledger_store  # noqa: PLC0415

    def noop(_: BaseException | None) -> None:
        return None

    count = args.replay_entries
    write_settings = base_settings(
        root / "replay", write_cache_bytes_max=1024 * 1024 * 1024, checkpoint_interval_ms=3_600_000
    )
    bodies = make_bodies(args.ledgers, count, args.payload_bytes)
    async with open_ledger_store(write_settings, final_checkpoint=False) as store:
        for ledger_id in range(args.ledgers):
            store.create_ledger(ledger_id, KEY, noop)
        await phase_throughput(store, bodies, args)
        assert store.checkpoints == 1, "the replay phase needs every entry to stay in the journal"
    del bodies
    settings = base_settings(root / "replay")
    started = time.perf_counter()
    async with open_ledger_store(settings) as store:
        opened = time.perf_counter() - started
        replay = store.replay_stats
        assert replay is not None
        assert replay.entries == count, f"replayed {replay.entries} of {count} entries"
        figures.add(
            f"journal replay of {count:,} entries: {replay.seconds:.2f} s replay "
            f"({count / replay.seconds:,.0f} entries/s, including checkpoints a full write cache forces), "
            f"{opened:.2f} s until the store was open (replay + final checkpoint)"
        )


def run(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415

    root = args.data_dir
    temporary = root is None
    if temporary:
        root = Path(tempfile.mkdtemp(prefix="magnetar-perf-storage-"))
    else:
        root.mkdir(parents=True, exist_ok=True)
    try:
        print(f"bookie-storage benchmark in {root} (pid {os.getpid()})", flush=True)
        figures = trio.run(main, args, root)
        print("\nsummary:")
        for line in figures.lines:
            print(f"  {line}")
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    return 0
