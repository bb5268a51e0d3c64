"""``magnetar perf bookie-rpc``: the ceiling of the bookie wire path (codec + TCP transport + server).

One bookie process over the in-memory ledger store (``magnetar bookie --storage memory``, auto-synced) is
started on 127.0.0.1 port 0 (or ``--bookie host:port`` uses a running one); this process pipelines
``--entry-bytes`` adds to one ledger through the TCP transport, either closed-loop with ``--inflight``
requests outstanding (``--rate 0``, the throughput ceiling) or open-loop at a fixed ``--rate`` (latency at
that load, measured from each add's *scheduled* send time so a stall is not hidden: no coordinated
omission). It prints adds/s and latency percentiles, then one JSON line with the same figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field

import trio

from magnetar.admin.perf.common import latency_summary_ms
from magnetar.bookkeeper.client import (
    TcpTransport,
    TcpTransportSettings,
    TransportFailure,
    open_tcp_transport,
)
from magnetar.bookkeeper.protocol import AddRequest, BookieStatus, Digester, DigestType, Response, master_key

KEY = master_key(b"perf")
DIGEST = Digester(DigestType.CRC32C)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=int, default=0, help="adds/s (open loop); 0: closed loop")
    parser.add_argument("--inflight", type=int, default=1000, help="outstanding adds in closed loop")
    parser.add_argument("--duration-s", type=float, default=10.0, help="measured time, after the warm-up")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="adds before measuring (not counted)")
    parser.add_argument("--entry-bytes", type=int, default=100, help="payload bytes of every add")
    parser.add_argument("--bookie", help="host:port of a running bookie; unset: start one")


@dataclass
class _Run:
    transport: TcpTransport
    bookie: str
    payload: bytes
    measure_from: float
    measure_to: float
    next_entry: int = 0
    request_id: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    outstanding: int = 0
    done: trio.Event = field(default_factory=trio.Event)

    def send(self, scheduled: float, on_done: object = None) -> None:
        entry_id = self.next_entry
        self.next_entry += 1
        self.request_id += 1
        body = DIGEST.package(1, entry_id, entry_id - 1, 0, self.payload)
        request = AddRequest(self.request_id, 1, entry_id, KEY, body)
        self.outstanding += 1

        def callback(result: Response | TransportFailure) -> None:
            now = trio.current_time()
            self.outstanding -= 1
            if isinstance(result, TransportFailure):
                key = result.reason.value
            else:
                key = "ok" if result.status is BookieStatus.EOK else result.status.name
            if key != "ok":
                self.errors[key] = self.errors.get(key, 0) + 1
            elif self.measure_from <= scheduled < self.measure_to:
                self.latencies.append(now - scheduled)
            if callable(on_done):
                on_done()
            if self.outstanding == 0 and now >= self.measure_to:
                self.done.set()

        self.transport.send(self.bookie, request, callback)


async def _closed_loop(run: _Run, inflight: int) -> None:
    def next_one() -> None:
        now = trio.current_time()
        if now < run.measure_to:
            run.send(now, next_one)

    for _ in range(inflight):
        run.send(trio.current_time(), next_one)
    await run.done.wait()


async def _open_loop(run: _Run, rate: int) -> None:
    start = trio.current_time()
    sent = 0
    while True:
        now = trio.current_time()
        if now >= run.measure_to:
            break
        due = int((now - start) * rate)
        while sent < due:
            run.send(start + sent / rate)
            sent += 1
        await trio.sleep(0.0005)
    if run.outstanding:
        await run.done.wait()


async def _bench(args: argparse.Namespace, bookie: str) -> dict[str, object]:
    settings = TcpTransportSettings(inflight_requests_max=max(args.inflight, 1000) * 10)
    async with open_tcp_transport(settings) as transport:
        begin = trio.current_time()
        run = _Run(
            transport,
            bookie,
            b"x" * args.entry_bytes,
            measure_from=begin + args.warmup_s,
            measure_to=begin + args.warmup_s + args.duration_s,
        )
        cpu0 = time.process_time()
        if args.rate > 0:
            await _open_loop(run, args.rate)
        else:
            await _closed_loop(run, args.inflight)
        cpu = time.process_time() - cpu0
    latencies = run.latencies
    return {
        "mode": f"open loop {args.rate}/s" if args.rate > 0 else f"closed loop, {args.inflight} in flight",
        "entry_bytes": args.entry_bytes,
        "duration_s": args.duration_s,
        "adds_per_s": round(len(latencies) / args.duration_s),
        **latency_summary_ms(latencies),
        "errors": run.errors,
        "client_cpu_s": round(cpu, 2),
    }


def _start_bookie() -> tuple[subprocess.Popen[bytes], str]:
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "--log-level", "WARNING", "bookie",
        "--metadata-url", "memory://", "--storage", "memory", "--port", "0",
        "--bind", "127.0.0.1", "--advertised-address", "127.0.0.1",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait()
        raise RuntimeError(f"the bookie exited with {process.returncode} before it was ready")
    return process, str(json.loads(line)["bookieId"])


def run(args: argparse.Namespace) -> int:
    process = None
    bookie = args.bookie
    if bookie is None:
        process, bookie = _start_bookie()
    try:
        figures = trio.run(_bench, args, bookie)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    print(f"bookie-rpc against {bookie}: {figures['mode']}, {args.entry_bytes}-byte entries")
    print(
        f"  {figures['adds_per_s']} adds/s   p50 {figures['p50_ms']} ms   p99 {figures['p99_ms']} ms"
        f"   p99.9 {figures['p999_ms']} ms   max {figures['max_ms']} ms   errors {figures['errors']}"
    )
    print(json.dumps(figures, allow_nan=False))
    return 0 if not figures["errors"] else 1
