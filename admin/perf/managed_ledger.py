"""``magnetar perf managed-ledger``: a managed ledger on real bookie processes (its benchmark).

Starts ``--bookies`` ``magnetar bookie`` processes (disk storage in a temporary directory), registers them in
this process's in-memory metadata store, opens one managed ledger (E/W/A from the flags) and measures:

1. appends/s, pipelined (``wait_for_capacity`` back-pressure), ``--entry-bytes`` entries;
2. cursor reads/s from the earliest entry: once with the entry cache (tailing readers), once with it
   disabled (catch-up readers served by the bookies);
3. the cost of a rollover: appends at a fixed ``--rate`` with ``--rollover-entries`` per ledger; every
   add's latency is recorded and the ones that arrived while a rollover was in progress are reported apart,
   with the longest gap between two acknowledgements (the pause a writer sees).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import trio

from magnetar.admin.perf.common import Progress, bookie_processes, latency_summary_ms
from magnetar.bookkeeper.client import (
    ClientSettings,
    TcpTransportSettings,
    open_bookkeeper,
    open_tcp_transport,
)
from magnetar.bookkeeper.metadata import MemoryMetadataStore, writable_path
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.ledger_state import State
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bookies", type=int, default=3, help="bookie processes to start")
    parser.add_argument("--ensemble-size", type=int, default=3, help="bookies per ledger")
    parser.add_argument("--write-quorum", type=int, default=3, help="copies of each entry")
    parser.add_argument("--ack-quorum", type=int, default=2, help="acks that complete an add")
    parser.add_argument("--entry-bytes", type=int, default=100, help="payload bytes of every append")
    parser.add_argument("--entries", type=int, default=100_000, help="entries appended in phase 1")
    parser.add_argument("--rate", type=int, default=2000, help="adds/s of the rollover phase")
    parser.add_argument("--rollover-entries", type=int, default=5000, help="ledger size in phase 3")
    parser.add_argument(
        "--rollover-duration-s", type=float, default=10.0, help="length of the rollover phase"
    )


def _ml_settings(args: argparse.Namespace, **overrides: object) -> ManagedLedgerSettings:
    base = ManagedLedgerSettings(
        ensemble_size=args.ensemble_size,
        write_quorum=args.write_quorum,
        ack_quorum=args.ack_quorum,
        min_ledger_rollover_time_min=0,
    )
    return base.model_copy(update=overrides)


async def _appends(ml: ManagedLedger, payload: bytes, count: int) -> dict[str, float]:
    progress = Progress("appends")
    done = trio.Event()
    acked = 0

    def on_add(result: object) -> None:
        nonlocal acked
        acked += 1
        if acked == count:
            done.set()

    start = time.perf_counter()
    for _ in range(count):
        if ml.pending_adds >= ml.settings.pending_adds_max:
            await ml.wait_for_capacity()
            progress.tick(f"{acked:,} acknowledged")
        ml.add_entry_nowait(payload, on_add)
    await done.wait()
    elapsed = time.perf_counter() - start
    return {"entries": count, "appends_per_s": round(count / elapsed)}


async def _cursor_reads(factory: ManagedLedgerFactory, name: str, label: str) -> dict[str, float]:
    ml = await factory.open(name)
    cursor = await ml.open_cursor(f"reader-{label}", start_at_earliest=True)
    start = time.perf_counter()
    read = 0
    while cursor.has_more_entries():
        entries = await cursor.read_entries(1000)
        read += len(entries)
        cursor.ack_cumulative(entries[-1].position)
    elapsed = time.perf_counter() - start
    return {"entries": read, "reads_per_s": round(read / elapsed)}


async def _rollover_cost(ml: ManagedLedger, payload: bytes, args: argparse.Namespace) -> dict[str, object]:
    latencies: list[float] = []
    during: list[float] = []
    last_ack = trio.current_time()
    longest_gap = 0.0
    start = trio.current_time()
    sent = 0
    ledgers_before = len(ml.ledgers)

    def callback_for(scheduled: float, rolling: bool) -> Callable[[object], None]:
        def on_add(result: object) -> None:
            nonlocal last_ack, longest_gap
            now = trio.current_time()
            if isinstance(result, Position):
                (during if rolling else latencies).append(now - scheduled)
                longest_gap = max(longest_gap, now - last_ack)
                last_ack = now

        return on_add

    while (now := trio.current_time()) < start + args.rollover_duration_s:
        due = int((now - start) * args.rate)
        while sent < due:
            rolling = ml.state is not State.LEDGER_OPENED
            ml.add_entry_nowait(payload, callback_for(start + sent / args.rate, rolling))
            sent += 1
        await trio.sleep(0.0005)
    await ml.add_entry(payload)
    return {
        "rate": args.rate,
        "rollovers": len(ml.ledgers) - ledgers_before,
        "steady": latency_summary_ms(latencies),
        "during_rollover": latency_summary_ms(during) | {"adds": len(during)},
        "longest_ack_gap_ms": round(longest_gap * 1000, 1),
    }


async def _bench(args: argparse.Namespace, bookies: list[str]) -> dict[str, object]:
    metadata = MemoryMetadataStore()
    for bookie in bookies:
        await metadata.put(writable_path(bookie), b"{}", None)
    payload = b"x" * args.entry_bytes
    client = ClientSettings(
        ensemble_size=args.ensemble_size, write_quorum=args.write_quorum, ack_quorum=args.ack_quorum
    )
    figures: dict[str, object] = {}
    async with (
        open_tcp_transport(TcpTransportSettings(inflight_requests_max=100_000)) as transport,
        open_bookkeeper(metadata, transport, client) as bk,
    ):
        async with open_managed_ledger_factory(bk, metadata, _ml_settings(args)) as factory:
            ml = await factory.open("perf/ns/persistent/appends")
            print(f"phase 1: {args.entries:,} appends", flush=True)
            figures["appends"] = await _appends(ml, payload, args.entries)
            print("phase 2: cursor reads (entry cache)", flush=True)
            figures["cursor_reads_cached"] = await _cursor_reads(factory, ml.name, "cached")
        uncached = _ml_settings(args, entry_cache_bytes_max=0)
        async with open_managed_ledger_factory(bk, metadata, uncached) as factory:
            print("phase 2: cursor reads (from the bookies)", flush=True)
            figures["cursor_reads_bookies"] = await _cursor_reads(factory, "perf/ns/persistent/appends", "bk")
        rolling = _ml_settings(args, max_entries_per_ledger=args.rollover_entries)
        async with open_managed_ledger_factory(bk, metadata, rolling) as factory:
            print(
                f"phase 3: rollover every {args.rollover_entries} entries at {args.rate} adds/s", flush=True
            )
            ml = await factory.open("perf/ns/persistent/rollover")
            figures["rollover"] = await _rollover_cost(ml, payload, args)
    return figures


def run(args: argparse.Namespace) -> int:
    with bookie_processes(args.bookies, "disk") as bookie_ids:
        figures = trio.run(_bench, args, bookie_ids)
    quorum = f"E={args.ensemble_size} W={args.write_quorum} A={args.ack_quorum}"
    print(f"perf managed-ledger: {args.bookies} bookie processes (disk), {quorum}, {args.entry_bytes} B")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    print(json.dumps({"command": "managed-ledger", **figures}, allow_nan=False))
    return 0
