"""First subscribers of a new Shared subscription, all at once, on a topic nobody has loaded yet.

    .venv/bin/python tests/bench/bench_concurrent_subscribe.py [--subscribers 200] [--rounds 3]

Starts ``magnetar standalone`` (RocksDB metadata, a bookie on its TCP port) in a temporary directory, and per
round opens ``--subscribers`` WebSocket consumers of a fresh topic's ``Shared`` subscription from as many
threads, released together by a barrier; prints how the upgrades were answered (``accepted`` or the status
and reason) and whether the broker's log mentions a fenced cursor or ledger. The standalone is stopped by
its pid at the end.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import socket
import sys
import tempfile
import threading
from pathlib import Path

import websocket

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.processes import ProcessGroup


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def subscribe_all(url: str, count: int) -> collections.Counter[str]:
    barrier = threading.Barrier(count)

    def one(_: int) -> websocket.WebSocket | str:
        barrier.wait(timeout=60)
        try:
            return websocket.create_connection(url, timeout=60)
        except websocket.WebSocketBadStatusException as exc:
            return f"{exc.status_code} {exc.resp_body[:80]!r}"
        except (websocket.WebSocketException, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(one, range(count)))
    for result in results:
        if isinstance(result, websocket.WebSocket):
            result.close()
    return collections.Counter("accepted" if isinstance(r, websocket.WebSocket) else r for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        group = ProcessGroup(Path(tmp))
        try:
            process = group.add(
                "standalone",
                [
                    "standalone",
                    "--data-dir",
                    f"{tmp}/data",
                    "--http-port",
                    "0",
                    "--bookie-port",
                    str(free_port()),
                ],
            )
            ws_url = str(process.ready["httpUrl"]).replace("http://", "ws://")
            for round_index in range(args.rounds):
                topic = f"persistent/public/default/fresh-topic-{round_index}"
                url = f"{ws_url}/ws/v2/consumer/{topic}/shared-sub?subscriptionType=Shared"
                print(f"round {round_index}: {dict(subscribe_all(url, args.subscribers))}")
        finally:
            group.stop_all()
        log = process.log_path.read_text()
        fenced = log.lower().count("fenced")
        print(f"log: {log.count('Traceback')} tracebacks, {fenced} mentions of 'fenced'")


if __name__ == "__main__":
    main()
