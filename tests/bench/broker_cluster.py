"""Start a real cluster for ``magnetar perf``: ZooKeeper, N ``magnetar bookie`` processes (``--storage
memory`` by default, ``--storage disk`` for the real engine) and one ``magnetar broker`` (E = W = A = N when
N <= 3, else 3/3/2), then hold it until Ctrl-C.

    .venv/bin/python tests/bench/broker_cluster.py --bookies 1
    .venv/bin/magnetar perf produce --url ws://127.0.0.1:PORT --topic bench --messages 200000

Every process started here is stopped (by pid) on exit.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.broker_processes import ProcessCluster
from fixtures.zookeeper import ZooKeeperServer


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # SIGTERM, and SIGINT even when a non-interactive shell started this in the background with SIGINT
    # ignored, stop the cluster (every process by its pid) instead of orphaning it.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    parser = argparse.ArgumentParser()
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--quorum", type=int, default=0, help="E=W=A (default: min(bookies, 3))")
    parser.add_argument("--storage", choices=["memory", "disk"], default="memory", help="bookie storage")
    args = parser.parse_args()
    quorum = args.quorum or min(args.bookies, 3)
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        with ZooKeeperServer(base / "zk") as zk:
            cluster = ProcessCluster(zk.url("/bench"), base)
            try:
                for index in range(args.bookies):
                    cluster.start_bookie(index, "--storage", args.storage)
                broker = cluster.start_broker(
                    0,
                    "--ensemble-size", str(quorum), "--write-quorum", str(quorum),
                    "--ack-quorum", str(quorum),
                )  # fmt: skip
                print(f"broker ready: ws://127.0.0.1:{broker.ready['port']} pids: "
                      f"{[p.pid for p in cluster.processes]}", flush=True)  # fmt: skip
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
            finally:
                cluster.close()


if __name__ == "__main__":
    sys.exit(main())
