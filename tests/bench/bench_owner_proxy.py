"""The owner proxy's cost per message: ``magnetar perf`` against the topic's owner (direct) and against the
other broker (served through its owner proxy), interleaved in one run on one cluster: ZooKeeper, one bookie
(memory storage, E = W = A = 1) and two brokers.

    .venv/bin/python tests/bench/bench_owner_proxy.py --messages 100000 --rounds 2

Each round publishes ``--messages`` to a fresh topic, direct then proxied (then proxied then direct, so drift
in time does not favour one side), and consumes them back from the earliest position the same way, for the
JSON API and ``magnetar.v1``. Prints one line per run (perf's summary) and a table of medians. Every process
started here is stopped (by pid) on exit.

With ``--partitions N`` each round also runs a third path, ``fan-out``: the same through a fresh N-partition
topic whose partitions the two brokers share, opened on the broker that owns fewer of them (the session is
served through one upstream session per partition: ``broker/owner_proxy/fanout.py``). ``magnetar
perf`` publishes without keys, so its messages go to one partition (``SinglePartition``, as Pulsar routes
keyless messages by default); the consumer reads every partition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.broker_processes import ProcessCluster
from fixtures.zookeeper import ZooKeeperServer


def perf(kind: str, url: str, topic: str, protocol: str, messages: int) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "perf", kind, "--url", url, "--topic", topic,
        "--messages", str(messages), "--protocol", protocol, "--report-interval-s", "60",
    ]  # fmt: skip
    if kind == "consume":
        command += ["--initial-position", "Earliest", "--subscription", f"bench-{uuid.uuid4().hex[:6]}"]
    else:
        command += ["--max-pending", "1000"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command}: {done.stdout}{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def fan_out_entry(urls: list[str], protocol: str, partitions: int) -> tuple[str, str]:
    """Create an N-partition topic, look its partitions up (placing them), and answer the broker that owns
    the fewest of them, and the topic."""
    topic = f"persistent://public/default/fanout-{protocol}-{uuid.uuid4().hex[:6]}"
    path = topic.replace("://", "/")
    answer = httpx.put(f"{urls[0]}/admin/v2/{path}/partitions", json=partitions)
    answer.raise_for_status()
    owners = [
        httpx.get(f"{urls[0]}/lookup/v2/topic/{path}-partition-{i}", follow_redirects=True).json()["httpUrl"]
        for i in range(partitions)
    ]
    print(f"{topic}: partition owners {owners}", flush=True)
    return min(urls, key=owners.count), topic


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=0, help="also a fan-out path over N partitions")
    args = parser.parse_args()
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        with ZooKeeperServer(base / "zk") as zk:
            cluster = ProcessCluster(zk.url("/bench"), base)
            try:
                cluster.start_bookie(0, "--storage", "memory")
                quorum = ["--ensemble-size", "1", "--write-quorum", "1", "--ack-quorum", "1"]
                brokers = [cluster.start_broker(i, *quorum) for i in range(2)]
                urls = [f"http://127.0.0.1:{b.ready['port']}" for b in brokers]
                for round_number in range(args.rounds):
                    for protocol in ("json", "binary"):
                        topic = f"persistent://public/default/proxy-{protocol}-{uuid.uuid4().hex[:6]}"
                        owner = httpx.get(
                            f"{urls[0]}/lookup/v2/topic/{topic.replace('://', '/')}", follow_redirects=True
                        ).json()["httpUrl"]
                        other = next(u for u in urls if u != owner)
                        order = [("direct", owner, topic), ("proxied", other, topic)]
                        if round_number % 2:
                            order.reverse()
                        if args.partitions:
                            order.append(("fan-out", *fan_out_entry(urls, protocol, args.partitions)))
                        for kind in ("produce", "consume"):
                            for path, url, target in order:
                                figures = perf(kind, url, target, protocol, args.messages)
                                results.setdefault((kind, protocol, path), []).append(figures)
                                print(kind, protocol, path, json.dumps(figures), flush=True)
            finally:
                cluster.close()
    print("\n| operation | protocol | path | msg/s (runs) → median | publish latency p50 / p99 ms (median) |")
    print("|---|---|---|---|---|")
    for (kind, protocol, path), runs in sorted(
        results.items(), key=lambda item: (item[0][0] != "produce", item[0])
    ):
        rates = [float(r["rate_msg_s"]) for r in runs]
        shown = " / ".join(f"{rate:,.0f}" for rate in rates)
        latency = "-"  # a consumer's latency is the backlog's age here (it reads from the earliest position)
        if kind == "produce":
            p50 = statistics.median(float(r["latency_ms"]["p50"]) for r in runs)
            p99 = statistics.median(float(r["latency_ms"]["p99"]) for r in runs)
            latency = f"{p50:.1f} / {p99:.1f}"
        print(f"| {kind} | {protocol} | {path} | {shown} → **{statistics.median(rates):,.0f}** | {latency} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
