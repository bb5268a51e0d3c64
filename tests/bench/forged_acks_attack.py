"""Forged batch sizes in acks (``fixtures/forged_acks.py``) against a fresh ``magnetar standalone`` with
authentication on: the server's RSS before, at its peak during and after, and the backlog.

    .venv/bin/python tests/bench/forged_acks_attack.py [--sizes N ...] [--targets N] [--pythonpath DIR]

``--pythonpath`` runs another build's standalone (a directory holding its ``magnetar/`` package), for the
figures before; a build that trusts the client's batch size takes ~555 MiB per target entry at 10,000,000
and runs out of memory at 2^31 - 1, so run it with ``--sizes 10000000 --targets 1``. Every process started
here is stopped by pid.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures import forged_acks
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess

from magnetar.bookkeeper.runtime.auth.keys import create_secret_key


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="*", type=int, default=list(forged_acks.FORGED_SIZES))
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--pythonpath", default="", help="another build's package (before figures)")
    args = parser.parse_args()
    keys = TokenKeys(create_secret_key("HS256"), b"", b"", b"", b"")  # secret-key tokens only
    with tempfile.TemporaryDirectory(prefix="forged-acks-") as tmp:
        key = Path(tmp) / "secret.key"
        key.write_bytes(keys.secret)
        args_ = [
            "standalone", "--data-dir", f"{tmp}/data", "--http-port", "0", "--bookie-port", str(free_port()),
            "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
        ]  # fmt: skip
        process = MagnetarProcess("standalone", args_, Path(tmp), {"PYTHONPATH": args.pythonpath})
        process.start(timeout_s=60)
        try:
            http_url = str(process.ready["httpUrl"])
            setup = forged_acks.Setup(
                http_url=http_url,
                ws_url=http_url.replace("http://", "ws://"),
                admin_token=keys.token("admin"),
                consumer_token=keys.token(forged_acks.CONSUMER_ROLE),
            )
            result, figures = forged_acks.attack(setup, process.pid, tuple(args.sizes), args.targets)
            result.notes.update(figures)
            result.notes["alive"] = process.is_running()
            print(result.line(), flush=True)
        finally:
            process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
