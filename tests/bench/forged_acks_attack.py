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
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures import forged_acks
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess

from magnetar.bookkeeper.runtime.auth.keys import create_secret_key


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
        args_ = forged_acks.secure_standalone_args(Path(tmp), keys.secret)
        process = MagnetarProcess("standalone", args_, Path(tmp), {"PYTHONPATH": args.pythonpath})
        process.start(timeout_s=60)
        try:
            setup = forged_acks.Setup.of(
                process.ready, keys.token("admin"), keys.token(forged_acks.CONSUMER_ROLE)
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
