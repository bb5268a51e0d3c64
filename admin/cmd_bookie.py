"""``magnetar bookie``: run one bookie process. The work is in :mod:`.bookie_process` (imported on use).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:class:`~magnetar.bookkeeper.bookie.settings.BookieSettings`, :mod:`magnetar.admin.config`): flags win
over the environment, which wins over the file.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG); flags and env win")
    parser.add_argument("--metadata-url", help="metadata store: zk:HOST:PORT[/chroot], memory://[NAME]")
    parser.add_argument("--data-dir", help="entry logs and index (default ./data/bookie)")
    parser.add_argument("--journal-dir", help="journal directory (default DATA_DIR/journal)")
    parser.add_argument("--port", type=int, help="bookie protocol port (default 3181; 0 = pick a free one)")
    parser.add_argument("--bind", dest="bind_address", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--advertised-address", help="host part of the bookie id (default: bind or hostname)")
    parser.add_argument(
        "--http-port", type=int, help="port of /metrics and /api/v1/bookie/* (0 = pick one; unset = none)"
    )
    parser.add_argument(
        "--storage", choices=["disk", "memory"], help="ledger storage engine (default disk; memory = tests)"
    )
    parser.add_argument(
        "--port-file", help="when ready, write {bookieId, host, port} as JSON to this file (port discovery)"
    )


def run(args: argparse.Namespace) -> int:
    from magnetar.admin import bookie_process  # noqa: PLC0415 (heavy imports only when the command runs)

    names = (
        "metadata_url", "data_dir", "journal_dir", "port", "bind_address", "advertised_address", "http_port",
    )  # fmt: skip
    overrides = {name: getattr(args, name) for name in (*names, "storage", "port_file")}
    return bookie_process.main({k: v for k, v in overrides.items() if v is not None}, args.config)
