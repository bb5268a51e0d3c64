"""``magnetar standalone``: metadata store, bookies and a broker in one process (see :mod:`.standalone`).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:mod:`magnetar.admin.config`): flags win over the environment, which wins over the file.
"""

from __future__ import annotations

import argparse

from magnetar.admin.cmd_broker import SERVER_SECURITY_FLAGS, add_server_security_arguments

FLAGS = ("data_dir", "http_port", "bind_address", "bookies", "bookie_port")
QUORUM_FLAGS = ("ensemble_size", "write_quorum", "ack_quorum")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG); flags and env win")
    parser.add_argument("--data-dir", help="where everything is stored (default ./data)")
    parser.add_argument("--http-port", type=int, help="WebSocket/admin/metrics port (default 8080; 0: any)")
    parser.add_argument(
        "--bind", dest="bind_address", help="address the broker listens on (default 127.0.0.1)"
    )
    parser.add_argument("--bookies", type=int, help="number of bookies (default 1)")
    parser.add_argument("--bookie-port", type=int, help="first bookie port (default 3181; bookie i: +i)")
    parser.add_argument("--ensemble-size", type=int, help="bookies per ledger (default from --bookies)")
    parser.add_argument("--write-quorum", type=int, help="copies of each entry (default from --bookies)")
    parser.add_argument("--ack-quorum", type=int, help="acks needed per entry (default from --bookies)")
    security = parser.add_argument_group("security (off by default)")
    add_server_security_arguments(
        security, "require tokens (and check permissions) on the broker and the bookies' ports"
    )


def run(args: argparse.Namespace) -> int:
    from magnetar.admin import standalone  # noqa: PLC0415 (heavy imports only when the command runs)

    overrides = {name: getattr(args, name) for name in (*FLAGS, *QUORUM_FLAGS, *SERVER_SECURITY_FLAGS)}
    return standalone.main({k: v for k, v in overrides.items() if v is not None}, config_file=args.config)
