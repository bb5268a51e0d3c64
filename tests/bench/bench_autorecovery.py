"""AutoRecovery benchmark: how fast a lost bookie's data is re-replicated, and what that costs publishers.

    python tests/bench/bench_autorecovery.py --data-mb 1024                      # unlimited copy rate
    python tests/bench/bench_autorecovery.py --data-mb 256 --rate-limit-mb 10    # 10 MB/s per process

A real cluster (ZooKeeper, 5 bookies with AutoRecovery inside, 1 broker; E/Qw/Qa = 3/3/2) on a scratch
directory. Steps, each printed as it ends and all of them as one JSON line at the end:

1. load ``--data-mb`` MB of entries of ``--entry-kb`` KiB into ledgers of ``--ledger-mb`` MB with the
   replication client (so about 3/5 of it lands on each bookie);
2. baseline: ``magnetar perf produce`` at ``--perf-rate`` msg/s of ``--perf-size`` bytes for ``--perf-s``;
3. destroy the bookie holding the most ledgers (SIGKILL, data wiped) and time until the cluster is fully
   replicated (no ledger names it, nothing marked), while ``magnetar perf produce`` runs in ``--perf-s``
   segments; the bytes and entries copied are the bookies'
   ``replication_replication_worker_NUM_{BYTES,ENTRIES}_WRITTEN``.

The copy rate limit is the bookies' ``rereplication_rate_bytes_per_s`` (each process's own budget: every
bookie's worker copies in parallel).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import trio

from magnetar.admin.processes.dev_cluster import DevCluster, DevClusterSpec, open_dev_cluster
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata.factory import open_metadata_store

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-mb", type=int, default=1024)
    parser.add_argument("--entry-kb", type=int, default=64)
    parser.add_argument("--ledger-mb", type=int, default=64)
    parser.add_argument(
        "--rate-limit-mb", type=float, default=0.0, help="bookies' copy limit, MB/s (0: none)"
    )
    parser.add_argument("--batch", type=int, default=10, help="rereplication_entry_batch_size")
    parser.add_argument("--perf-rate", type=int, default=500)
    parser.add_argument("--perf-size", type=int, default=1000)
    parser.add_argument("--perf-s", type=float, default=10.0)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temporary directory")
    parser.add_argument("--heal-timeout-s", type=float, default=1800.0)
    return parser.parse_args(argv)


def bookie_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "MAGNETAR_AUTORECOVERY__LOST_BOOKIE_RECOVERY_DELAY_S": "0",
        "MAGNETAR_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE_PERIOD_MS": "5000",
        "MAGNETAR_AUTORECOVERY__UNDERREPLICATED_POLL_MS": "1000",
        "MAGNETAR_AUTORECOVERY__REREPLICATION_ENTRY_BATCH_SIZE": str(args.batch),
        "MAGNETAR_AUTORECOVERY__REREPLICATION_RATE_BYTES_PER_S": str(int(args.rate_limit_mb * 1e6)),
    }


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def http(cluster: DevCluster, index: int) -> str:
    return f"http://127.0.0.1:{cluster.ports.bookies[index]['http']}"


def metric_total(cluster: DevCluster, indexes: list[int], name: str) -> float:
    total = 0.0
    for index in indexes:
        with urllib.request.urlopen(http(cluster, index) + "/metrics", timeout=30) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + " "):
                    total += float(line.split()[1])
    return total


async def load(cluster: DevCluster, args: argparse.Namespace) -> dict[str, float]:
    entry = os.urandom(args.entry_kb * 1024)
    per_ledger = max(1, args.ledger_mb * 1024 // args.entry_kb)
    total = max(1, args.data_mb * 1024 // args.entry_kb)
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2, pending_adds_max=64)
    started = time.monotonic()
    async with (
        open_metadata_store(cluster.metadata_url) as metadata,
        open_tcp_transport() as transport,
        open_bookkeeper(metadata, transport, settings) as bk,
    ):
        written = 0
        while written < total:
            lh = await bk.create_ledger(password=b"bench")
            for _ in range(min(per_ledger, total - written)):
                await lh.wait_for_room()
                lh.add_entry_nowait(entry, lambda outcome: None)
                written += 1
            await lh.close()
    elapsed = time.monotonic() - started
    return {"loaded_mb": round(total * len(entry) / 1e6, 1), "load_s": round(elapsed, 1),
            "load_mb_per_s": round(total * len(entry) / 1e6 / elapsed, 1)}  # fmt: skip


async def perf(cluster: DevCluster, args: argparse.Namespace, topic: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "--log-level", "WARNING", "perf", "produce",
        "--url", cluster.broker_urls[0], "--topic", f"persistent://public/default/{topic}",
        "--rate", str(args.perf_rate), "--size", str(args.perf_size), "--duration-s", str(args.perf_s),
        "--report-interval-s", str(args.perf_s * 2),
    ]  # fmt: skip
    done = await trio.run_process(command, capture_stdout=True, check=True)
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


async def ledgers_naming(cluster: DevCluster, live: list[int], bookie_id: str) -> tuple[int, int]:
    """(ledgers naming ``bookie_id``, ledgers marked under-replicated)."""
    base = http(cluster, live[0])
    _, ledgers = await trio.to_thread.run_sync(get, base + "/api/v1/ledger/list?print_metadata=true")
    naming = sum(1 for md in ledgers.values() if any(bookie_id in m for m in md["allEnsembles"].values()))
    status, marks = await trio.to_thread.run_sync(
        get, base + "/api/v1/autorecovery/list_under_replicated_ledger"
    )
    return naming, 0 if status == 404 else len(marks)


async def bench(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    spec = DevClusterSpec(
        data_dir=data_dir, zookeepers=1, bookies=5, brokers=1, ensemble_size=3, write_quorum=3, ack_quorum=2,
        session_timeout_ms=4000, bookie_env=bookie_env(args), log_level="WARNING",
    )  # fmt: skip
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    async with open_dev_cluster(spec) as cluster:
        result.update(await load(cluster, args))
        print("loaded:", result, flush=True)
        result["baseline"] = (await perf(cluster, args, "baseline"))["latency_ms"]
        print("baseline publish latency:", result["baseline"], flush=True)
        _, ledgers = await trio.to_thread.run_sync(
            get, http(cluster, 0) + "/api/v1/ledger/list?print_metadata=true"
        )
        counts = dict.fromkeys(range(5), 0)
        ids = [cluster.bookie_id(i) for i in range(5)]
        for md in ledgers.values():
            for members in md["allEnsembles"].values():
                for bookie in members:
                    counts[ids.index(bookie)] += 1
        victim = max(counts, key=lambda i: counts[i])
        live = [i for i in range(5) if i != victim]
        result["victim_ledgers"] = counts[victim]
        await cluster.kill(cluster.bookie_names[victim])
        shutil.rmtree(cluster.data_dir / cluster.bookie_names[victim], ignore_errors=True)
        lost_at = time.monotonic()
        print(f"destroyed {cluster.bookie_names[victim]} ({counts[victim]} ledgers)", flush=True)
        segments: list[dict[str, Any]] = []
        healed_at: list[float] = []

        async def watch() -> None:
            with trio.fail_after(args.heal_timeout_s):
                while True:
                    naming, marked = await ledgers_naming(cluster, live, ids[victim])
                    if naming == 0 and marked == 0:
                        healed_at.append(time.monotonic())
                        return
                    await trio.sleep(0.5)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            while not healed_at:
                segments.append((await perf(cluster, args, f"during-{len(segments)}"))["latency_ms"])
        result["heal_s"] = round(healed_at[0] - lost_at, 1)
        copied = await trio.to_thread.run_sync(
            metric_total, cluster, live, "replication_replication_worker_NUM_BYTES_WRITTEN"
        )
        entries = await trio.to_thread.run_sync(
            metric_total, cluster, live, "replication_replication_worker_NUM_ENTRIES_WRITTEN"
        )
        result.update(
            copied_mb=round(copied / 1e6, 1),
            copied_entries=int(entries),
            copy_mb_per_s=round(copied / 1e6 / result["heal_s"], 1),
            copy_entries_per_s=round(entries / result["heal_s"], 1),
            during=segments,
            during_p50_ms_median=statistics.median(s["p50"] for s in segments),
            during_p99_ms_max=max(s["p99"] for s in segments),
        )
    return result


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        result = trio.run(bench, args, args.data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-autorecovery-") as scratch:
            result = trio.run(bench, args, Path(scratch))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
