"""The audit's memory attacks against a real ``magnetar standalone``, each on a fresh process: the server's
RSS (``/proc/<pid>/status``) before, at its peak during, and after each attack.

    .venv/bin/python tests/bench/bounds_attacks.py [--scale audit|bench|test] [--only NAME ...]
        [--pythonpath DIR]

``--scale audit`` runs each attack at the size the audit reported (or as far as the server lets it go
within the attack's time limit: a bounded server stops reading, so the attacker sends less); ``bench`` at
a quarter of it or less where the unbounded build would take gigabytes of a shared machine; ``test`` at
the size the bounds tests use. ``--pythonpath`` runs another build's standalone (a directory holding its
``magnetar/`` package links), for before/after figures.

Attacks: ``empty`` (empty text messages from a producer that never reads), ``ping`` (125-byte pings, pongs
never read), ``frag1`` / ``frag0`` (a message in 1-byte / 0-byte continuation frames), ``permits`` (a
pull-mode consumer granting 2,147,483,647 permits on a backlog and never reading), ``reader`` (a reader
sending ``{}`` without reading), ``bodies`` (connections announcing 10 MiB bodies without a token, on a
standalone with authentication). Every process started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures import ws_attacks as attacks
from fixtures.processes import MagnetarProcess

from magnetar.bookkeeper.runtime.auth.keys import create_secret_key

SCALES: dict[str, dict[str, int]] = {
    "audit": {
        "empty": 2_000_000,
        "ping": 20_000_000,
        "frag1": 5 * 1024 * 1024,
        "frag0": 40_000_000,
        "backlog": 100_000,
        "bodies": 100,
        "seconds": 25,
    },
    "bench": {
        "empty": 500_000,
        "ping": 5_000_000,
        "frag1": 5 * 1024 * 1024,
        "frag0": 10_000_000,
        "backlog": 100_000,
        "bodies": 100,
        "seconds": 20,
    },
    "test": {
        "empty": 300_000,
        "ping": 400_000,
        "frag1": 1024 * 1024,
        "frag0": 4_000_000,
        "backlog": 20_000,
        "bodies": 20,
        "seconds": 6,
    },
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def standalone(tmp: Path, name: str, *extra: str, env: dict[str, str]) -> MagnetarProcess:
    bookie_port = str(free_port())
    process = MagnetarProcess(
        name,
        [
            "standalone",
            "--data-dir",
            str(tmp / name),
            "--http-port",
            "0",
            "--bookie-port",
            bookie_port,
            *extra,
        ],
        tmp,
        env,
    )
    process.start(timeout_s=60)
    return process


def run(name: str, scale: dict[str, int], tmp: Path, pythonpath: str) -> attacks.AttackResult:
    extra: list[str] = []
    if name == "bodies":
        key = tmp / "secret.key"
        key.write_bytes(create_secret_key("HS256"))
        extra = [
            "--authentication-enabled",
            "--token-secret-key",
            key.as_uri(),
            "--super-user-roles",
            "admin",
        ]
    process = standalone(tmp, f"standalone-{name}", *extra, env={"PYTHONPATH": pythonpath})
    try:
        port = int(process.ready["port"])
        host = "127.0.0.1"
        pid = process.pid
        seconds = scale["seconds"]
        time.sleep(1)
        chosen: dict[str, Callable[[], attacks.AttackResult]] = {
            "empty": lambda: attacks.empty_messages(host, port, pid, scale["empty"], seconds),
            "ping": lambda: attacks.ping_flood(host, port, pid, scale["ping"], seconds),
            "frag1": lambda: attacks.fragments(host, port, pid, scale["frag1"], 1, seconds),
            "frag0": lambda: attacks.fragments(host, port, pid, scale["frag0"], 0, seconds),
            "permits": lambda: attacks.greedy_pull_consumer(host, port, pid, "backlog", seconds),
            "reader": lambda: attacks.blind_reader(host, port, pid, "backlog", seconds),
            "bodies": lambda: attacks.bodies_before_auth(host, port, pid, scale["bodies"], 10 << 20),
        }
        if name in ("permits", "reader"):
            attacks.publish(host, port, "backlog", scale["backlog"], 1024)
        result = chosen[name]()
        result.notes["alive"] = process.is_running()
        return result
    finally:
        process.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", choices=sorted(SCALES), default="test")
    parser.add_argument(
        "--only", nargs="*", default=["empty", "ping", "frag1", "frag0", "permits", "reader", "bodies"]
    )
    parser.add_argument("--pythonpath", default="", help="another build's package links (before figures)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bounds-") as tmp:
        for name in args.only:
            result = run(name, SCALES[args.scale], Path(tmp), args.pythonpath)
            print(result.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
