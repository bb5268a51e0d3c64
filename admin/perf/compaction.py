"""``magnetar perf compaction``: entry-log compaction throughput and its effect on concurrent publishing.

One bookie storage engine on disk (``--data-dir``, default a temporary directory), one process. For each
compaction setting in ``--runs`` (``unlimited``, or a rate such as ``bytes:20000000`` / ``entries:20000``):

1. **fill** - ``--fill-mb`` of entries (``--payload-bytes``) round-robin over ``--ledgers`` ledgers, with a
   checkpoint every ``--checkpoint-mb`` so every entry log interleaves all ledgers; then the ledgers beyond
   the ``--live-fraction`` are deleted, leaving each sealed log mostly garbage.
2. **publish + compact** - adds at a fixed ``--rate`` to a separate ledger (the publish load; latency from
   each add's scheduled time to its durability callback, so queueing behind a stalled event loop counts),
   while one forced major compaction of the garbage collector runs with that setting. Publishing goes on
   for ``--tail-s`` after the compaction ends.

A **baseline** run first publishes for ``--baseline-s`` with no compaction. Reported per run: live MB copied,
compaction seconds and MB/s (live data copied per second), bytes reclaimed, time spent waiting on the rate
limiter, and the publish latency p50/p99/p99.9/max during the compaction.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.admin.perf.common import format_ms, latency_summary_ms

MIB = 1024 * 1024
PUBLISH_LEDGER = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="where the engine lives; unset: a temporary directory")
    parser.add_argument("--fill-mb", type=int, default=256, help="entry bytes written before each compaction")
    parser.add_argument("--payload-bytes", type=int, default=1024, help="payload of every entry")
    parser.add_argument("--ledgers", type=int, default=10, help="ledgers the fill is spread over")
    parser.add_argument("--live-fraction", type=float, default=0.3, help="share of the fill that stays live")
    parser.add_argument("--checkpoint-mb", type=int, default=4, help="fill bytes between two checkpoints")
    parser.add_argument("--entry-log-mb", type=int, default=16, help="entry_log_bytes_max")
    parser.add_argument("--rate", type=int, default=2_000, help="publish adds/s during the measurements")
    parser.add_argument("--baseline-s", type=float, default=10.0, help="publishing without compaction")
    parser.add_argument("--tail-s", type=float, default=1.0, help="publishing after the compaction ends")
    parser.add_argument("--sync-mb", type=int, default=4, help="compaction_sync_bytes in MiB (0: at the end)")
    parser.add_argument(
        "--runs",
        default="unlimited,bytes:20000000",
        help="comma-separated compaction settings: unlimited, bytes:<B/s>, entries:<entries/s>",
    )


@dataclass
class RunFigures:
    label: str
    copied_mb: float = 0.0
    compaction_s: float = 0.0
    reclaimed_mb: float = 0.0
    limiter_wait_s: float = 0.0
    logs_compacted: int = 0
    latency: dict[str, float | None] = field(default_factory=dict)
    publishes: int = 0
    journal_sync_ms: tuple[float, float] = (0.0, 0.0)
    """Journal fdatasync mean and max during the run."""

    def line(self) -> str:
        lat = self.latency
        head = f"{self.label:>22}: "
        if self.compaction_s:
            head += (
                f"{self.copied_mb:7.1f} MB live copied in {self.compaction_s:6.2f} s = "
                f"{self.copied_mb / self.compaction_s:6.1f} MB/s, {self.logs_compacted} logs, "
                f"{self.reclaimed_mb:.1f} MB reclaimed, limiter wait {self.limiter_wait_s:.1f} s; "
            )
        return (
            head + f"publish p50 {format_ms(lat['p50_ms'], '.2f')} p99 {format_ms(lat['p99_ms'], '.2f')} "
            f"p99.9 {format_ms(lat['p999_ms'], '.2f')} "
            f"max {format_ms(lat['max_ms'], '.2f')} ms ({self.publishes} adds); journal fdatasync mean "
            f"{self.journal_sync_ms[0]:.2f} max {self.journal_sync_ms[1]:.1f} ms"
        )


def sync_figures(stats: Any) -> tuple[float, float]:
    mean = stats.sync_seconds / stats.syncs if stats.syncs else 0.0
    return mean * 1000, stats.sync_seconds_max * 1000


def gc_settings_for(run: str) -> dict[str, Any]:
    base: dict[str, Any] = {"compaction_rate_entries_per_s": 0, "compaction_rate_bytes_per_s": 0}
    if run == "unlimited":
        return base
    kind, _, value = run.partition(":")
    if kind == "bytes":
        return {**base, "compaction_throttle_by_bytes": True, "compaction_rate_bytes_per_s": float(value)}
    if kind == "entries":
        return {**base, "compaction_rate_entries_per_s": float(value)}
    raise SystemExit(f"unknown compaction setting {run!r}")


class Publisher:
    """Adds at a fixed rate to one ledger; latency from each add's scheduled time to its durability."""

    def __init__(self, store: Any, payload_bytes: int, rate: int) -> None:
        from magnetar.bookkeeper.protocol import Digester, DigestType  # noqa: PLC0415

        self._store = store
        self._digester = Digester(DigestType.CRC32C)
        self._payload = os.urandom(payload_bytes)
        self._interval = 1.0 / rate
        self._entry_id = 0
        self.latencies: list[float] = []
        self.recording = False

    async def run(self) -> None:
        import trio  # noqa: PLC0415

        scheduled: deque[tuple[float, bool]] = deque()

        def on_durable(error: BaseException | None) -> None:
            due, record = scheduled.popleft()
            if record and error is None:
                self.latencies.append(time.perf_counter() - due)

        start = time.perf_counter()
        i = 0
        while True:
            due = start + i * self._interval
            now = time.perf_counter()
            if now < due:
                await trio.sleep(due - now)
                continue
            while start + i * self._interval <= now:
                body = self._digester.package(
                    PUBLISH_LEDGER, self._entry_id, self._entry_id - 1, 0, self._payload
                )
                scheduled.append((start + i * self._interval, self.recording))
                self._store.add_entry(PUBLISH_LEDGER, self._entry_id, body, on_durable)
                self._entry_id += 1
                i += 1

    def take(self) -> list[float]:
        taken, self.latencies = self.latencies, []
        return taken


async def fill(store: Any, args: argparse.Namespace, first_ledger: int) -> list[int]:
    """Write the fill; return the ledgers to delete."""
    from magnetar.bookkeeper.protocol import Digester, DigestType  # noqa: PLC0415

    digester = Digester(DigestType.CRC32C)
    payload = os.urandom(args.payload_bytes)
    ledgers = list(range(first_ledger, first_ledger + args.ledgers))
    for ledger_id in ledgers:
        store.create_ledger(ledger_id, b"perf-compaction-key!", lambda _: None)
    body_bytes = len(digester.package(1, 0, -1, 0, payload))
    rounds = args.fill_mb * MIB // (body_bytes * len(ledgers))
    per_checkpoint = max(1, args.checkpoint_mb * MIB // (body_bytes * len(ledgers)))
    for entry_id in range(rounds):
        for ledger_id in ledgers:
            body = digester.package(ledger_id, entry_id, entry_id - 1, 0, payload)
            await store.wait_writable(len(body))
            store.add_entry(ledger_id, entry_id, body, lambda _: None)
        if entry_id % per_checkpoint == per_checkpoint - 1:
            await store.checkpoint()
    await store.journal.drain()
    await store.checkpoint()
    keep = max(1, round(len(ledgers) * args.live_fraction))
    return ledgers[keep:]


async def main(args: argparse.Namespace, root: Path) -> list[RunFigures]:
    import trio  # noqa: PLC0415

    from magnetar.bookkeeper.bookie.storage import (  # noqa: PLC0415
        BookieStorageSettings,
        JournalStats,
        open_ledger_store,
    )
    from magnetar.gc import BookieGarbageCollector, GcSettings  # noqa: PLC0415

    settings = BookieStorageSettings(
        data_dir=root / "bookie",
        entry_log_bytes_max=args.entry_log_mb * MIB,
        disk_free_bytes_min=0,
        journal_max_backups=0,
        journal_file_bytes_max=256 * MIB,
    )
    figures: list[RunFigures] = []
    async with open_ledger_store(settings) as store, trio.open_nursery() as nursery:
        store.create_ledger(PUBLISH_LEDGER, b"perf-compaction-key!", lambda _: None)
        publisher = Publisher(store, args.payload_bytes, args.rate)
        nursery.start_soon(publisher.run)
        publisher.recording = True
        store.journal.stats = JournalStats()
        await trio.sleep(args.baseline_s)
        publisher.recording = False
        latencies = publisher.take()
        baseline = RunFigures("baseline", latency=latency_summary_ms(latencies), publishes=len(latencies))
        baseline.journal_sync_ms = sync_figures(store.journal.stats)
        figures.append(baseline)
        print(baseline.line(), flush=True)
        for index, run in enumerate(args.runs.split(",")):
            doomed = await fill(store, args, first_ledger=100 * (index + 1))
            for ledger_id in doomed:
                store.delete_ledger(ledger_id)
            await store.checkpoint()
            gc_settings = GcSettings(
                gc_wait_time_s=3600, compaction_sync_bytes=args.sync_mb * MIB, **gc_settings_for(run)
            )
            collector = BookieGarbageCollector(store, None, gc_settings, name=run)
            await collector.tracker.refresh()  # usage is read before the measured part
            publisher.take()
            publisher.recording = True
            store.journal.stats = JournalStats()
            result = await collector.run_once(force_major=True)
            await trio.sleep(args.tail_s)
            publisher.recording = False
            assert result is not None, collector.last_error
            assert result.compaction is not None
            compaction = result.compaction
            latencies = publisher.take()
            figures.append(
                RunFigures(
                    f"compaction {run}",
                    copied_mb=compaction.copied_bytes / MIB,
                    compaction_s=compaction.seconds,
                    reclaimed_mb=result.reclaimed_bytes / MIB,
                    limiter_wait_s=collector.compactor.limiter.waited_s,
                    logs_compacted=compaction.logs_compacted,
                    latency=latency_summary_ms(latencies),
                    publishes=len(latencies),
                    journal_sync_ms=sync_figures(store.journal.stats),
                )
            )
            print(figures[-1].line(), flush=True)
        nursery.cancel_scope.cancel()
    return figures


def run(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415

    root = args.data_dir
    temporary = root is None
    if temporary:
        root = Path(tempfile.mkdtemp(prefix="magnetar-perf-compaction-"))
    else:
        root.mkdir(parents=True, exist_ok=True)
    try:
        print(
            f"compaction benchmark in {root}: fill {args.fill_mb} MB x {args.live_fraction:.0%} live, "
            f"publish {args.rate} adds/s of {args.payload_bytes} B",
            flush=True,
        )
        figures = trio.run(main, args, root)
        print("\nsummary:")
        for figure in figures:
            print(f"  {figure.line()}")
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    return 0
