"""How closely a topic's ``publishRate`` holds its producers to the rate: target against observed.

Run (not a test)::

    .venv/bin/python tests/bench/rate_accuracy.py    # 500, 2000, 5000 msgs/s, both protocols
    .venv/bin/python tests/bench/rate_accuracy.py --rates 1000 --duration-s 20 --protocols binary

Starts one ``magnetar standalone`` (ports picked free, data in a temporary directory), and for each rate and
protocol creates a topic, sets its ``publishRate`` with the REST call of Java's ``PulsarAdmin`` and floods it
with 100-byte messages - the official client's producer (``--protocols binary``: ``send_async`` with a full
queue blocking, one message a SEND; ``binary-batched``: the same with the client's default batching, as most
applications publish) or a WebSocket producer (``ws``: one thread sends, the main thread reads the acks) -
sending
``rate x (duration + 2.5 s)`` messages, so the producer is over the rate throughout. Observed: the acks in the
``--duration-s`` window that ends a quarter of a second before the last ack, divided by the window. The
bucket starts with one second of tokens, which a producer spends at the broker's own pace: near the broker's
capacity that takes several seconds (at ``M`` msgs/s, ``rate / (M - rate)`` of them), so a window at the
start would count part of the burst; the flood's last ``duration + 1.5`` seconds are past it whatever ``M``
is. Capacity: the same flood on a topic without a ``publishRate`` (``rate x (duration + 2.5 s)`` messages at
the largest rate asked), the same window - a rate above it cannot be reached whatever the limiter does.
Prints one line per run and a Markdown table. Every process it started is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fixtures

import pulsar
import websocket
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import official_client, running_standalone

SKIP_S = 1.0
END_S = 0.25
PAYLOAD = b"x" * 100


def admin(process: MagnetarProcess, method: str, path: str, body: object = None) -> int:
    url = f"http://127.0.0.1:{process.ready['port']}/admin/v2{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def observed_rate(times: list[float], window_s: float) -> float:
    end = max(times) - END_S
    return sum(1 for t in times if end - window_s <= t < end) / window_s


def flood_binary(process: MagnetarProcess, topic: str, total: int, *, batching: bool = False) -> list[float]:
    acks: list[float] = []

    def sent(result: object, _id: object) -> None:
        if result == pulsar.Result.Ok:
            acks.append(time.monotonic())

    with official_client(process) as client:
        producer = client.create_producer(
            f"persistent://{topic}",
            batching_enabled=batching,  # batched: the client's default (1,000 messages or 10 ms a batch)
            max_pending_messages=5000,
            block_if_queue_full=True,
        )
        for _ in range(total):
            producer.send_async(PAYLOAD, sent)
        producer.flush()
        producer.close()
    return acks


def flood_ws(process: MagnetarProcess, topic: str, total: int) -> list[float]:
    url = f"ws://127.0.0.1:{process.ready['port']}/ws/v2/producer/persistent/{topic}"
    ws = websocket.create_connection(url, timeout=30)
    frame = json.dumps({"payload": base64.b64encode(PAYLOAD).decode()})

    def send_all() -> None:
        for _ in range(total):
            ws.send(frame)

    sender = threading.Thread(target=send_all, daemon=True)
    acks: list[float] = []
    try:
        sender.start()
        for _ in range(total):
            if json.loads(ws.recv())["result"] == "ok":
                acks.append(time.monotonic())
        sender.join(timeout=30)
    finally:
        ws.close()
    return acks


FLOODS: dict[str, Callable[[MagnetarProcess, str, int], list[float]]] = {
    "binary": flood_binary,
    "binary-batched": functools.partial(flood_binary, batching=True),
    "ws": flood_ws,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[500, 2000, 5000])
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--protocols", nargs="+", choices=sorted(FLOODS), default=["binary", "ws"])
    args = parser.parse_args()
    rows: list[tuple[str, int, float, int]] = []
    capacity: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="rate-accuracy-") as tmp,
        running_standalone(Path(tmp)) as process,
    ):
        assert admin(process, "PUT", "/namespaces/public/rates") == 204
        for protocol in args.protocols:
            topic = f"public/rates/{protocol}-unlimited"
            assert admin(process, "PUT", f"/persistent/{topic}") == 204
            acks = FLOODS[protocol](process, topic, int(max(args.rates) * (args.duration_s + SKIP_S + 1.5)))
            capacity[protocol] = observed_rate(acks, args.duration_s)
            print(f"{protocol} capacity (no publishRate) {capacity[protocol]:.1f}/s", flush=True)
            for rate in args.rates:
                topic = f"public/rates/{protocol}-{rate}"
                assert admin(process, "PUT", f"/persistent/{topic}") == 204
                body = {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1}
                assert admin(process, "POST", f"/persistent/{topic}/publishRate", body) == 204
                time.sleep(0.5)  # the metadata watch reaches the loaded topic
                total = int(rate * (args.duration_s + SKIP_S + 1.5))
                acks = FLOODS[protocol](process, topic, total)
                observed = observed_rate(acks, args.duration_s)
                rows.append((protocol, rate, observed, len(acks)))
                print(f"{protocol} target {rate}/s observed {observed:.1f}/s ({observed / rate - 1:+.1%}), "
                      f"{len(acks)} acks", flush=True)  # fmt: skip
    print()
    print("| protocol | target msgs/s | observed msgs/s | error | acks | capacity msgs/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for protocol, rate, observed, acked in rows:
        print(f"| {protocol} | {rate:,} | {observed:,.1f} | {observed / rate - 1:+.1%} | {acked:,} "
              f"| {capacity[protocol]:,.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
