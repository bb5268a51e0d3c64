"""Redis streams and NATS JetStream on this machine, measured the way ``magnetar perf`` measures Magnetar:
100-byte messages, one stream/topic, Python clients, publish pipelined (1000 in flight) then consume.

Needs ``redis-server`` and ``nats-server`` (Debian packages) and a Python with ``redis``, ``hiredis`` and
``nats-py`` (not Magnetar's dependencies: use a separate venv)::

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install redis hiredis nats-py
    /tmp/peers/bin/python tests/bench/peers_bench.py --messages 200000

Durability of an acknowledged publish: Redis with ``appendfsync always`` fsyncs the AOF before answering
each event-loop write (the only per-write fsync peer); JetStream 2.9 writes to the page cache. Every server
started here is stopped by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

PAYLOAD = os.urandom(100)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def bench_redis(messages: int, pipeline: int, fsync: str, scratch: Path) -> dict[str, Any]:
    import redis

    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(scratch),
            "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port)
        client = redis.Redis(port=port)
        started = time.monotonic()
        for first in range(0, messages, pipeline):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(pipeline, messages - first)):
                pipe.xadd("bench", {"p": PAYLOAD})
            pipe.execute()
        publish_s = time.monotonic() - started
        started = time.monotonic()
        last, read = "0", 0
        while read < messages:
            batch = client.xread({"bench": last}, count=1000)
            entries = batch[0][1]
            read += len(entries)
            last = entries[-1][0]
        consume_s = time.monotonic() - started
        client.close()
    finally:
        stop(server)
    return {"publish_msg_s": round(messages / publish_s), "consume_msg_s": round(messages / consume_s)}


async def _nats(port: int, messages: int, window: int) -> dict[str, Any]:
    import nats

    connection = await nats.connect(f"nats://127.0.0.1:{port}")
    js = connection.jetstream()
    await js.add_stream(name="bench", subjects=["bench"])
    started = time.monotonic()
    for first in range(0, messages, window):
        await asyncio.gather(*(js.publish("bench", PAYLOAD) for _ in range(min(window, messages - first))))
    publish_s = time.monotonic() - started
    subscription = await js.pull_subscribe("bench", "reader")
    started = time.monotonic()
    read = 0
    while read < messages:
        batch = await subscription.fetch(1000)
        read += len(batch)
        await asyncio.gather(*(m.ack() for m in batch))
    consume_s = time.monotonic() - started
    await connection.close()
    return {"publish_msg_s": round(messages / publish_s), "consume_msg_s": round(messages / consume_s)}


def bench_nats(messages: int, window: int, scratch: Path) -> dict[str, Any]:
    port = free_port()
    config = scratch / "nats.conf"
    config.write_text(f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{scratch / "js"}" }}\n')
    server = subprocess.Popen(["nats-server", "-c", str(config)], stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        return asyncio.run(_nats(port, messages, window))
    finally:
        stop(server)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--in-flight", type=int, default=1000)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        (base / "redis").mkdir()
        (base / "nats").mkdir()
        results = {
            "redis_aof_always": bench_redis(args.messages, args.in_flight, "always", base / "redis"),
            "nats_jetstream": bench_nats(args.messages, args.in_flight, base / "nats"),
        }
    results["load_before"] = [round(x, 2) for x in load]
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
