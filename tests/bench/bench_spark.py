"""Rows/s read into Spark (``noop`` sink) by the ``magnetar`` source, by the number of topic partitions.

    .venv/bin/python tests/bench/bench_spark.py --messages 1000000 --partitions 1,2,4

For each partition count: a topic of ``--messages`` messages of ``--size`` bytes is published through the
WebSocket API (``magnetar perf produce``) into a ``magnetar standalone`` process (one disk bookie, infinite
namespace retention), then read by a local SparkSession (``local[2]``) twice: a streaming query with
``trigger(availableNow=True)`` into the ``noop`` sink, and a batch read into ``noop``, ``--repeat`` times
each (the median is reported; wall-clock time from ``start()``/``save()`` to the end, query start-up
included). Python workers are warmed up first on a small topic. Every process started here is
stopped (by pid) on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.processes import ProcessGroup

NAMESPACE = "persistent://public/default"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def produce(http_url: str, name: str, partitions: int, messages: int, size: int) -> float:
    """Publish through the WebSocket API; ``perf produce`` returns once every message is acknowledged."""
    topic = f"{NAMESPACE}/{name}"
    started = time.monotonic()
    command = [sys.executable, "-m", "magnetar.admin.cli", "perf", "produce", "--url", http_url,
               "--topic", topic, "--messages", str(messages), "--size", str(size), "--producers", "4",
               "--max-pending", "2000", "--report-interval-s", "30", "--duration-s", "3600"]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return messages / (time.monotonic() - started)


def create_topic(http_url: str, name: str, partitions: int) -> str:
    topic = f"{NAMESPACE}/{name}"
    if partitions > 1:
        response = httpx.put(
            f"{http_url}/admin/v2/persistent/public/default/{name}/partitions", json=partitions
        )
        response.raise_for_status()
    return topic


def entries_of(http_url: str, name: str, partitions: int) -> int:
    parts = [f"{name}-partition-{i}" for i in range(partitions)] if partitions > 1 else [name]
    total = 0
    for part in parts:
        stats = httpx.get(f"{http_url}/admin/v2/persistent/public/default/{part}/internalStats").json()
        total += sum(ledger["entries"] for ledger in stats["ledgers"]) + stats["currentLedgerEntries"]
    return total


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from magnetar.admin.spark import MagnetarDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MagnetarDataSource)
    return spark


def read_stream(spark: Any, http_url: str, topic: str) -> tuple[int, float]:
    started = time.monotonic()
    query = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", http_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    return sum(p["numInputRows"] for p in query.recentProgress), elapsed


def read_batch(spark: Any, http_url: str, topic: str) -> float:
    started = time.monotonic()
    df = spark.read.format("magnetar").option("serviceUrl", http_url).option("topic", topic).load()
    df.write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def measure(spark: Any, http_url: str, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    """Publish the topic, then read it ``--repeat`` times each way; the median rows/s of each."""
    name = f"bench-{partitions}"
    topic = create_topic(http_url, name, partitions)
    publish_rate = produce(http_url, name, partitions, args.messages, args.size)
    stream_s, batch_s = [], []
    for _ in range(args.repeat):
        rows, elapsed = read_stream(spark, http_url, topic)
        if rows != args.messages:
            raise RuntimeError(f"{topic}: read {rows} rows of {args.messages} messages")
        stream_s.append(elapsed)
        batch_s.append(read_batch(spark, http_url, topic))
    return {
        "partitions": partitions, "messages": args.messages, "size": args.size,
        "entries": entries_of(http_url, name, partitions), "publish_msgs_per_s": round(publish_rate),
        "stream_s": [round(t, 2) for t in stream_s],
        "stream_rows_per_s": round(args.messages / statistics.median(stream_s)),
        "batch_s": [round(t, 2) for t in batch_s],
        "batch_rows_per_s": round(args.messages / statistics.median(batch_s)),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each topic (the median is reported)")
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        group = ProcessGroup(Path(scratch))
        try:
            args_ = ["standalone", "--data-dir", f"{scratch}/data", "--http-port", "0",
                     "--bookie-port", str(free_port())]  # fmt: skip
            process = group.add("standalone", args_)
            http_url = str(process.ready["httpUrl"])
            retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
            httpx.post(
                f"{http_url}/admin/v2/namespaces/public/default/retention", json=retention
            ).raise_for_status()
            spark = session()
            try:
                warm = create_topic(http_url, "warm-up", 1)
                produce(http_url, "warm-up", 1, 20_000, args.size)
                read_stream(spark, http_url, warm)
                read_batch(spark, http_url, warm)
                for partitions in counts:
                    print(json.dumps(measure(spark, http_url, partitions, args)), flush=True)
            finally:
                spark.stop()
        finally:
            group.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
