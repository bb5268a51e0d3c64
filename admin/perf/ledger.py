"""``magnetar perf ledger``: the replication client against real bookie processes (the client's benchmark).

Starts ``--bookies`` ``magnetar bookie`` processes (disk storage in a temporary directory unless
``--storage memory``), registers them in this process's in-memory metadata store (the bookies serve the
protocol without needing the metadata), and measures with E/W/A from the flags:

1. durable adds/s, one ledger, pipelined (``--inflight`` adds outstanding);
2. add latency at a fixed ``--rate`` (open loop: measured from each add's scheduled time);
3. sequential read throughput of the ledger written in phase 1 (pipelined batch reads);
4. recovery time of a ``--recovery-entries`` ledger whose writer vanished (a steady writer with
   ``--recovery-inflight`` adds outstanding): (a) after every entry was acknowledged, (b) as soon as half
   were (the entries written but not yet acknowledged are recovered and re-replicated).

Prints progress lines, a summary, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import trio
import trio.lowlevel

from magnetar.admin.perf.common import Progress, bookie_processes, latency_summary_ms
from magnetar.bookkeeper.client import (
    BookKeeper,
    ClientSettings,
    LedgerHandle,
    TcpTransportSettings,
    open_bookkeeper,
    open_tcp_transport,
)
from magnetar.bookkeeper.metadata import MemoryMetadataStore, writable_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bookies", type=int, default=3, help="bookie processes to start")
    parser.add_argument("--ensemble-size", type=int, default=3, help="bookies per ledger")
    parser.add_argument("--write-quorum", type=int, default=3, help="copies of each entry")
    parser.add_argument("--ack-quorum", type=int, default=2, help="acks that complete an add")
    parser.add_argument("--storage", choices=["disk", "memory"], default="disk", help="the bookies' storage")
    parser.add_argument("--entry-bytes", type=int, default=100, help="payload bytes of every add")
    parser.add_argument("--duration-s", type=float, default=10.0, help="length of phases 1 and 2")
    parser.add_argument("--inflight", type=int, default=5000, help="adds outstanding in phase 1")
    parser.add_argument("--rate", type=int, default=2000, help="adds/s of the latency phase")
    parser.add_argument(
        "--recovery-entries", type=int, default=10_000, help="entries of the recovered ledger"
    )
    parser.add_argument(
        "--recovery-inflight", type=int, default=1000, help="adds the vanishing writer keeps outstanding"
    )


def _settings(args: argparse.Namespace) -> ClientSettings:
    return ClientSettings(
        ensemble_size=args.ensemble_size,
        write_quorum=args.write_quorum,
        ack_quorum=args.ack_quorum,
        pending_adds_max=max(args.inflight, args.recovery_entries) + 1,
    )


async def _throughput(lh: LedgerHandle, payload: bytes, args: argparse.Namespace) -> dict[str, float]:
    progress = Progress("adds")
    acked = 0
    deadline = trio.current_time() + args.duration_s
    start = trio.current_time()
    done = trio.Event()
    outstanding = 0

    def on_add(result: object) -> None:
        nonlocal acked, outstanding
        outstanding -= 1
        if isinstance(result, int):
            acked += 1
        if outstanding == 0 and trio.current_time() >= deadline:
            done.set()

    while trio.current_time() < deadline:
        while outstanding < args.inflight:
            outstanding += 1
            lh.add_entry_nowait(payload, on_add)
        await trio.lowlevel.checkpoint()
        progress.tick(f"{acked / max(trio.current_time() - start, 1e-9):,.0f} adds/s so far")
    await done.wait()
    elapsed = trio.current_time() - start
    return {"adds_per_s": round(acked / elapsed), "adds": acked}


async def _latency(lh: LedgerHandle, payload: bytes, args: argparse.Namespace) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    start = trio.current_time()
    sent = 0
    pending = 0
    progress = Progress("latency")
    drained = trio.Event()
    sending = True

    def callback_for(scheduled: float) -> Callable[[object], None]:
        def on_add(result: object) -> None:
            nonlocal pending, errors
            pending -= 1
            if isinstance(result, int):
                latencies.append(trio.current_time() - scheduled)
            else:
                errors += 1
            if pending == 0 and not sending:
                drained.set()

        return on_add

    while (now := trio.current_time()) < start + args.duration_s:
        due = int((now - start) * args.rate)
        while sent < due:
            pending += 1
            lh.add_entry_nowait(payload, callback_for(start + sent / args.rate))
            sent += 1
        progress.tick(f"{len(latencies)} adds measured")
        await trio.sleep(0.0005)
    sending = False
    if pending:
        await drained.wait()
    return {"rate": args.rate, "errors": errors, **latency_summary_ms(latencies)}


async def _reads(bk: BookKeeper, ledger_id: int, last: int) -> dict[str, float]:
    handle = await bk.open_ledger(ledger_id, recovery=False)
    start = time.perf_counter()
    read = 0
    chunk = 10_000
    for first in range(0, last + 1, chunk):
        entries = await handle.read_entries(first, min(last, first + chunk - 1))
        read += len(entries)
    elapsed = time.perf_counter() - start
    return {"entries": read, "reads_per_s": round(read / elapsed)}


async def _recovery(
    metadata: MemoryMetadataStore,
    transport_settings: TcpTransportSettings,
    args: argparse.Namespace,
    payload: bytes,
    acked_fraction: float,
) -> dict[str, float]:
    """A writer pushes the entries and vanishes (no close) once ``acked_fraction`` of them are acked."""
    total = args.recovery_entries
    target = int(total * acked_fraction)
    reached = trio.Event()

    def on_add(result: object) -> None:
        if isinstance(result, int) and result + 1 >= target:
            reached.set()

    async with (
        open_tcp_transport(transport_settings) as transport,
        open_bookkeeper(metadata, transport, _settings(args)) as writer_bk,
    ):
        lh = await writer_bk.create_ledger()
        # A steady pipelined writer, as a managed ledger under load: at most --recovery-inflight adds
        # outstanding, so the LAC piggybacked on each entry trails its id by about that much.
        for _ in range(total):
            while lh.last_add_pushed - lh.last_add_confirmed >= args.recovery_inflight:
                await trio.lowlevel.checkpoint()  # an ack callback frees room; nothing else to wait on
            lh.add_entry_nowait(payload, on_add)
        await reached.wait()
        acked = lh.last_add_confirmed + 1
        ledger_id = lh.ledger_id
        # leaving the block drops the writer's connections without closing the ledger: it "died"
    async with (
        open_tcp_transport(transport_settings) as transport,
        open_bookkeeper(metadata, transport, _settings(args)) as bk,
    ):
        start = time.perf_counter()
        recovered = await bk.open_ledger(ledger_id, recovery=True)
        elapsed = time.perf_counter() - start
    return {
        "acked_when_writer_vanished": acked,
        "recovered_entries": recovered.last_add_confirmed + 1,
        "recovery_ms": round(elapsed * 1000, 1),
    }


async def _bench(args: argparse.Namespace, bookies: list[str]) -> dict[str, object]:
    metadata = MemoryMetadataStore()
    for bookie in bookies:
        await metadata.put(writable_path(bookie), b"{}", None)
    payload = b"x" * args.entry_bytes
    transport_settings = TcpTransportSettings(inflight_requests_max=4 * _settings(args).pending_adds_max)
    figures: dict[str, object] = {}
    async with (
        open_tcp_transport(transport_settings) as transport,
        open_bookkeeper(metadata, transport, _settings(args)) as bk,
    ):
        lh = await bk.create_ledger()
        print("phase 1: durable adds/s, pipelined", flush=True)
        figures["throughput"] = await _throughput(lh, payload, args)
        print(f"phase 2: latency at {args.rate} adds/s", flush=True)
        figures["latency"] = await _latency(lh, payload, args)
        await lh.close()
        print("phase 3: sequential reads", flush=True)
        figures["reads"] = await _reads(bk, lh.ledger_id, lh.last_add_confirmed)
    print(f"phase 4: recovery of a {args.recovery_entries}-entry ledger whose writer vanished", flush=True)
    figures["recovery_all_acked"] = await _recovery(metadata, transport_settings, args, payload, 1.0)
    figures["recovery_half_in_flight"] = await _recovery(metadata, transport_settings, args, payload, 0.5)
    return figures


def run(args: argparse.Namespace) -> int:
    with bookie_processes(args.bookies, args.storage) as bookie_ids:
        figures = trio.run(_bench, args, bookie_ids)
    quorum = f"E={args.ensemble_size} W={args.write_quorum} A={args.ack_quorum}"
    print(f"perf ledger: {args.bookies} bookie processes ({args.storage}), {quorum}, {args.entry_bytes} B")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    print(
        json.dumps(
            {"command": "ledger", "args": vars(args) | {"func": None}, **figures},
            default=str,
            allow_nan=False,
        )
    )
    return 0
