"""Metadata load of N topics on a real ZooKeeper: write rate and latency as N grows.

Run: ``.venv/bin/python tests/bench/metadata_load.py [--topics 1000,3000,10000] [--window 64]`` (starts its
own ZooKeeper from Debian, stops it at the end). Figures go to tests/bench/RESULTS.md and docs/scale-plan.md.

What one topic writes to the metadata store (see docs/scale-plan.md for where each comes from):

* setup, once: its managed-ledger node (``/managed-ledgers/<name>``, ~300 bytes), a cursor node per
  subscription (~150 bytes), the metadata nodes of its first ledger and first cursor ledger (~200 bytes);
* a ledger roll: create the new ledger's node, compare-and-set the managed-ledger node, close the old
  ledger (set its node): 3 writes;
* a cursor snapshot (cursor-ledger roll, or a cursor without a cursor ledger flushing): 1 compare-and-set.

For each N the generator creates N topics' nodes, then runs rounds in which every topic rolls a ledger and
snapshots its cursor (4 writes per topic), with up to ``--window`` requests in flight on each of
``--sessions`` ZooKeeper sessions (a broker is one session). It reports the sustained write rate (the
store's capacity on this machine, closed loop), the latency of each write at that load (p50/p99), and
ZooKeeper's own figures from ``mntr`` (znodes, data size, watches). ``--open-rate`` adds a run at a fixed
offered write rate to show the latency below saturation.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fixtures.zookeeper

from fixtures.zookeeper import ZooKeeperServer

ML_INFO = b"m" * 300
CURSOR_INFO = b"c" * 150
LEDGER_META = b"l" * 200


def mntr(host: str, port: int) -> dict[str, str]:
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(b"mntr")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    out: dict[str, str] = {}
    for line in data.decode().splitlines():
        key, _, value = line.partition("\t")
        if value:
            out[key] = value
    return out


class Pipeline:
    """Up to ``window`` asynchronous requests in flight on one session; latencies of each."""

    def __init__(self, client: KazooClient, window: int) -> None:
        self.client = client
        self.window = window
        self.inflight: deque[tuple[float, Any, str]] = deque()
        self.latencies: list[float] = []

    def submit(self, op: str, path: str, value: bytes, version: int = -1) -> None:
        if len(self.inflight) >= self.window:
            self._wait_oldest()
        if op == "create":
            result = self.client.create_async(path, value)
        else:
            result = self.client.set_async(path, value, version)
        self.inflight.append((time.perf_counter(), result, f"{op} {path}"))

    def _wait_oldest(self) -> None:
        start, result, what = self.inflight.popleft()
        try:
            result.get(timeout=60)
        except Exception as exc:
            raise RuntimeError(f"{what} failed: {exc!r}") from exc
        self.latencies.append(time.perf_counter() - start)

    def drain(self) -> None:
        while self.inflight:
            self._wait_oldest()


def topic_writes(pipe: Pipeline, topic: int, generation: int) -> int:
    """One round of topic ``topic``: a ledger roll (3 writes) and a cursor snapshot (1)."""
    base = f"/managed-ledgers/t{topic}"
    pipe.submit("create", f"/ledgers/t{topic}/L{generation + 1}", LEDGER_META)
    pipe.submit("set", base, ML_INFO)
    pipe.submit("set", f"/ledgers/t{topic}/L0", LEDGER_META)  # closing the previous ledger: a set
    pipe.submit("set", f"{base}/sub", CURSOR_INFO)
    return 4


def run_sessions(
    clients: list[KazooClient], window: int, topics: int, work: Any
) -> tuple[int, float, list[float]]:
    """``work(pipe, topic)`` for every topic, spread over the sessions (a thread each)."""
    pipes = [Pipeline(c, window) for c in clients]
    counts = [0] * len(pipes)

    def one(index: int) -> None:
        for topic in range(index, topics, len(pipes)):
            counts[index] += work(pipes[index], topic)
        pipes[index].drain()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(pipes))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return sum(counts), elapsed, [lat for p in pipes for lat in p.latencies]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


def setup(pipe: Pipeline, topic: int) -> int:
    pipe.submit("create", f"/managed-ledgers/t{topic}", ML_INFO)
    pipe.submit("create", f"/managed-ledgers/t{topic}/sub", CURSOR_INFO)
    pipe.submit("create", f"/ledgers/t{topic}", b"")
    pipe.submit("create", f"/ledgers/t{topic}/L0", LEDGER_META)
    pipe.submit("create", f"/ledgers/t{topic}/C0", LEDGER_META)
    return 5


def open_loop(client: KazooClient, rate_per_s: float, duration_s: float, topics: int) -> list[float]:
    """Writes at a fixed offered rate (one session): the latency of each."""
    pipe = Pipeline(client, 100_000)
    interval = 1.0 / rate_per_s
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - start < duration_s:
        due = int((now - start) / interval)
        while sent < due:
            pipe.submit("set", f"/managed-ledgers/t{sent % topics}/sub", CURSOR_INFO)
            sent += 1
        while pipe.inflight and pipe.inflight[0][1].ready():
            pipe._wait_oldest()
        time.sleep(min(interval, 0.001))
    pipe.drain()
    return pipe.latencies


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--topics", default="1000,3000,10000", help="comma-separated topic counts")
    parser.add_argument("--sessions", type=int, default=4, help="ZooKeeper sessions (brokers)")
    parser.add_argument("--window", type=int, default=64, help="requests in flight per session")
    parser.add_argument("--rounds", type=int, default=2, help="roll+snapshot rounds per topic count")
    parser.add_argument("--open-rate", type=float, default=500.0, help="offered writes/s, open loop")
    args = parser.parse_args()
    counts = [int(n) for n in args.topics.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="metadata-load-") as directory,
        ZooKeeperServer(Path(directory) / "zookeeper") as server,
    ):
        host, port = server.connect_string.split(",")[0].rsplit(":", 1)
        clients = [KazooClient(hosts=f"{host}:{port}", timeout=30) for _ in range(args.sessions)]
        for client in clients:
            client.start(timeout=30)
        clients[0].ensure_path("/managed-ledgers")
        clients[0].ensure_path("/ledgers")
        try:
            print(
                f"{'topics':>7} {'znodes':>8} {'data MB':>8} {'setup w/s':>10} {'round w/s':>10} "
                f"{'p50 ms':>7} {'p99 ms':>7} {'watches':>8}"
            )
            done = 0
            rounds_run = 0
            for n in counts:
                written, elapsed, _ = run_sessions(
                    clients, args.window, n - done, lambda p, t, lo=done: setup(p, lo + t)
                )
                setup_rate = written / elapsed if elapsed else 0.0
                done = n
                latencies: list[float] = []
                total = 0
                seconds = 0.0
                for _ in range(args.rounds):
                    rounds_run += 1
                    written, elapsed, lat = run_sessions(
                        clients, args.window, n, lambda p, t, g=rounds_run: topic_writes(p, t, g)
                    )
                    total += written
                    seconds += elapsed
                    latencies += lat
                figures = mntr(host, int(port))
                print(
                    f"{n:>7} {figures.get('zk_znode_count', '?'):>8} "
                    f"{int(figures.get('zk_approximate_data_size', 0)) / 1e6:>8.1f} {setup_rate:>10.0f} "
                    f"{total / seconds:>10.0f} {statistics.median(latencies) * 1000:>7.2f} "
                    f"{percentile(latencies, 0.99) * 1000:>7.2f} {figures.get('zk_watch_count', '?'):>8}"
                )
            lat = open_loop(clients[0], args.open_rate, 5.0, counts[-1])
            print(
                f"open loop {args.open_rate:.0f} writes/s offered for 5 s: {len(lat)} writes, "
                f"p50 {statistics.median(lat) * 1000:.2f} ms, p99 {percentile(lat, 0.99) * 1000:.2f} ms"
            )
        finally:
            for client in clients:
                client.stop()
                client.close()


if __name__ == "__main__":
    main()
