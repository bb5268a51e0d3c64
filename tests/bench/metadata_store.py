"""Metadata-store latency: sequential put (create), CAS update and get on each backend.

Run: ``.venv/bin/python tests/bench/metadata_store.py [--ops N]`` (starts its own ZooKeeper from Debian).
Prints ops/s and p50/p99 latency per backend and operation; figures go to tests/bench/RESULTS.md by hand.
Single caller, one operation at a time: this is the latency a managed ledger sees per metadata write.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fixtures.zookeeper

from fixtures.zookeeper import ZooKeeperServer

from magnetar.bookkeeper.metadata import MetadataStore, MetadataStoreSettings, open_metadata_store


async def _timed(count: int, operation: Callable[[int], Awaitable[object]]) -> list[float]:
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        await operation(i)
        latencies.append(time.perf_counter() - start)
    return latencies


def _report(backend: str, name: str, latencies: list[float]) -> None:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"{backend:8} {name:7} {len(latencies) / sum(latencies):9.0f} ops/s  "
        f"p50 {statistics.median(ordered) * 1000:7.3f} ms  p99 {p99 * 1000:7.3f} ms"
    )


async def _bench(backend: str, url: str, ops: int) -> None:
    value = b"x" * 200  # about a ManagedLedgerInfo with a few ledgers
    async with open_metadata_store(url, MetadataStoreSettings(session_timeout_ms=10_000)) as store:
        s: MetadataStore = store
        _report(backend, "create", await _timed(ops, lambda i: s.put(f"/bench/n{i}", value, -1)))
        _report(backend, "cas", await _timed(ops, lambda i: s.put(f"/bench/n{i}", value, 0)))
        _report(backend, "get", await _timed(ops, lambda i: s.get(f"/bench/n{i}")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="metadata-bench-") as directory:
        base = Path(directory)
        trio.run(_bench, "memory", "memory://", args.ops)
        trio.run(_bench, "rocksdb", f"rocksdb://{base / 'rocksdb'}", args.ops)
        with ZooKeeperServer(base / "zookeeper") as server:
            trio.run(_bench, "zk", server.url("/bench-root"), args.ops)


if __name__ == "__main__":
    main()
