"""Where a Magnetar system's CPU goes at a fixed publish rate: latency, CPU per process, entries, journal.

Run (not a test)::

    .venv/bin/python tests/bench/fixed_rate_cpu.py --system cluster --transport binary --rate 5000 --runs 3
    MAGNETAR_STORAGE_ENGINE__JOURNAL_INLINE_SYNC_BYTES_MAX=0 .venv/bin/python tests/bench/fixed_rate_cpu.py
    .venv/bin/python tests/bench/fixed_rate_cpu.py --saturate 100000 --runs 2   # throughput, CPU per message

Starts ``magnetar standalone`` or ``magnetar dev-cluster`` (3 disk bookies, E/W/A 3/3/2) the way
``compare.py`` does (settings from ``MAGNETAR_*`` variables reach every process), then for each run publishes
at ``--rate`` for ``--duration-s`` with the comparison harness's open-loop publisher
(``comparison/engine.py``: latency from each message's due time to its ack) and prints:

* the client's p50 / p99 / p99.9 and its own send lag (with ``--saturate N``: msgs/s for N messages
  published with 1,000 in flight (``--window``), and CPU per message);
* the broker's ``magnetar_publish_latency_seconds`` over the run (received -> stored), as cumulative shares;
* CPU cores used by each kind of process (broker, bookies, ZooKeeper, the standalone) and by this client,
  from ``/proc/<pid>/stat``, and the bookies' CPU per entry; the share of CPU time the hypervisor stole
  (``/proc/stat``): on a shared host CPU per message is the steadier figure, msgs/s falls with steal;
* entries written (``internalStats``) and, in a cluster, the bookies' journal figures
  (``magnetar_bookie_journal_*``: syncs, inline syncs, mean sync time).

Every process it started is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: bench.comparison, fixtures

import anyio
from bench.comparison import engine
from bench.comparison.figures import Latency, Throughput
from bench.comparison.machine import cpu_ticks, steal_share
from bench.comparison.magnetar_system import MagnetarSystem

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WINDOW = 1000
"""Messages in flight by default, as in ``compare.py`` (``--window``)."""
DRAIN_S = 10.0
T = TypeVar("T")
LATENCY_BOUNDS = ("0.001", "0.002", "0.005", "0.01", "0.02", "0.05")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kind_of(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return "gone"
    for kind in (b"bookie", b"broker", b"standalone"):
        if kind in args:
            return kind.decode()
    return "zookeeper" if any(b"zookeeper" in a.lower() for a in args) else "supervisor"


def processes(system: MagnetarSystem) -> dict[str, list[int]]:
    by_kind: dict[str, list[int]] = {}
    for pid in system.pids():
        for each in (pid, *descendants(pid)):
            by_kind.setdefault(kind_of(each), []).append(each)
    return by_kind


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text: str = answer.read().decode()
        return text


def latency_buckets(http_url: str) -> dict[str, float]:
    buckets: dict[str, float] = {}
    pattern = r'magnetar_publish_latency_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} ([0-9.e+]+)'
    for bound, count in re.findall(pattern, fetch(f"{http_url}/metrics")):
        buckets[bound] = buckets.get(bound, 0.0) + float(count)
    return buckets


def journal_figures(bookies: list[int]) -> dict[str, float]:
    total: dict[str, float] = {}
    for pid in bookies:
        args = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        if "--http-port" not in args:
            continue
        port = args[args.index("--http-port") + 1]
        for name, value in re.findall(
            r"^magnetar_bookie_(journal_[a-z_]+) ([0-9.e+-]+)$",
            fetch(f"http://127.0.0.1:{port}/metrics"),
            re.M,
        ):
            total[name] = total.get(name, 0.0) + float(value)
    return total


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


@dataclass
class Usage:
    """What the processes spent during one measured phase."""

    elapsed_s: float
    cpu_s: dict[str, float]
    """CPU seconds by kind of process (broker, bookie, zookeeper, standalone, supervisor)."""
    client_cpu_s: float
    entries: int
    buckets: dict[str, float]
    journal: dict[str, float]
    steal: float
    """Share of the machine's CPU time the hypervisor gave to other guests during the phase."""

    def report(self, messages: int, bookies: int) -> None:
        cores = ", ".join(f"{kind} {cpu / self.elapsed_s:.2f}" for kind, cpu in sorted(self.cpu_s.items()))
        print(
            f"  cores: {cores}, this client {self.client_cpu_s / self.elapsed_s:.2f}; "
            f"stolen by the hypervisor: {self.steal:.0%} of the machine's CPU time"
        )
        if messages:
            per_message = ", ".join(
                f"{kind} {cpu / messages * 1e6:.2f}" for kind, cpu in sorted(self.cpu_s.items())
            )
            print(
                f"  CPU per message (us): {per_message}, this client {self.client_cpu_s / messages * 1e6:.2f}"
            )
        per_entry = ""
        if bookies and self.entries:
            per_bookie = self.cpu_s.get("bookie", 0.0) / self.entries / bookies * 1e6
            per_entry = f"; bookie CPU per entry and bookie: {per_bookie:.0f} us"
        print(f"  {self.entries:,} entries{per_entry}")
        total = self.buckets.get("+Inf", 0.0) or 1.0
        shares = ", ".join(
            f"<= {float(b) * 1e3:g} ms {self.buckets.get(b, 0.0) / total:.1%}" for b in LATENCY_BOUNDS
        )
        print(f"  broker received -> stored: {shares}")
        if syncs := self.journal.get("journal_syncs"):
            inline = self.journal.get("journal_inline_syncs", 0.0) / syncs
            mean_ms = self.journal.get("journal_sync_seconds", 0.0) / syncs * 1e3
            print(f"  journals: {syncs:,.0f} syncs ({inline:.0%} inline), mean {mean_ms:.2f} ms")


def measured(
    system: MagnetarSystem, procs: dict[str, list[int]], topic: str, phase: Callable[[], T]
) -> tuple[T, Usage]:
    http_url = system.ws_url.replace("ws://", "http://")
    bookies = procs.get("bookie", [])
    mine = os.getpid()
    cpu_before = {kind: sum(cpu_seconds(p) for p in pids) for kind, pids in procs.items()}
    client_before, journal_before = cpu_seconds(mine), journal_figures(bookies)
    buckets_before, ticks_before, started = latency_buckets(http_url), cpu_ticks(), time.monotonic()
    result = phase()
    elapsed, ticks_after = time.monotonic() - started, cpu_ticks()
    cpu = {kind: sum(cpu_seconds(p) for p in pids) - cpu_before[kind] for kind, pids in procs.items()}
    stats = json.loads(fetch(f"{http_url}/admin/v2/persistent/public/default/{topic}/internalStats"))
    return result, Usage(
        elapsed_s=elapsed,
        cpu_s=cpu,
        client_cpu_s=cpu_seconds(mine) - client_before,
        entries=int(stats["numberOfEntries"]),
        buckets=delta(latency_buckets(http_url), buckets_before),
        journal=delta(journal_figures(bookies), journal_before),
        steal=steal_share(ticks_before, ticks_after),
    )


def fixed_rate_run(
    system: MagnetarSystem, procs: dict[str, list[int]], topic: str, args: argparse.Namespace
) -> None:
    def phase() -> Latency:
        return anyio.run(
            engine.publish_latency, system, topic, args.size, args.rate, args.duration_s, args.window,
            DRAIN_S, backend="trio",
        )  # fmt: skip

    latency, usage = measured(system, procs, topic, phase)
    print(
        f"  client p50 {latency.p50_ms:.2f} p99 {latency.p99_ms:.2f} p99.9 {latency.p999_ms:.2f} ms "
        f"(send lag p99 {latency.send_lag_p99_ms:.2f}); {latency.count:,} messages"
    )
    usage.report(0, len(procs.get("bookie", [])))


def saturated_run(
    system: MagnetarSystem, procs: dict[str, list[int]], topic: str, args: argparse.Namespace
) -> None:
    def phase() -> Throughput:
        return anyio.run(
            engine.publish_throughput, system, topic, args.size, args.saturate, args.window, 60.0,
            backend="trio",
        )  # fmt: skip

    throughput, usage = measured(system, procs, topic, phase)
    print(f"  {throughput.rate:,.0f} msgs/s ({throughput.count:,} in {throughput.elapsed_s:.2f} s)")
    usage.report(throughput.count, len(procs.get("bookie", [])))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--system", choices=("standalone", "cluster"), default="cluster")
    parser.add_argument("--transport", choices=("json", "binary"), default="binary")
    parser.add_argument("--rate", type=float, default=5000.0, help="msgs/s (default 5000)")
    parser.add_argument("--duration-s", type=float, default=10.0, help="length of each run (default 10)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument("--runs", type=int, default=1, help="runs on the same started system (default 1)")
    parser.add_argument(
        "--saturate", type=int, default=0, metavar="N",
        help="instead of a fixed rate: publish N messages as fast as acks allow (--window in flight)",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=int, default=WINDOW,
        help=f"messages in flight at most (default {WINDOW:,}, as in compare.py)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.window < 1:
        parser.error("--window must be at least 1")
    system = MagnetarSystem("magnetar", args.system == "cluster", args.transport == "binary")
    with tempfile.TemporaryDirectory(prefix="magnetar-fixed-rate-") as workdir:
        system.start(Path(workdir))
        try:
            procs = processes(system)
            if args.saturate:
                what = f"{args.saturate:,} messages of {args.size} B, {args.window:,} in flight"
            else:
                what = f"{args.rate:,.0f} msgs/s of {args.size} B for {args.duration_s:g} s"
            print(f"{args.system}, {args.transport}, {what}")
            for run in range(args.runs):
                gc.collect()
                gc.freeze()
                print(f"run {run + 1}:", flush=True)
                measure = saturated_run if args.saturate else fixed_rate_run
                measure(system, procs, f"fixed-rate-{run}", args)
                gc.unfreeze()
        finally:
            system.stop()


if __name__ == "__main__":
    main()
