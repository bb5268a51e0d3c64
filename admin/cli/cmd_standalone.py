"""``magnetar standalone``: metadata store, bookies and a broker in one process (see
:mod:`magnetar.admin.processes.standalone`).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:mod:`magnetar.admin.processes.config`): flags win over the environment, which wins over the file. Every
setting of the broker and of the bookies is a standalone setting too
(:mod:`magnetar.admin.processes.standalone_settings`); the security flags set the broker's and the bookies'
settings of the same name, except ``--tls-certificate-file`` and ``--tls-key-file``, which are the HTTPS
port's (``broker.tls_*``): the bookies' TCP ports stay plain unless the config file or the environment gives
them a certificate.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.admin.cli.cmd_broker import SERVER_SECURITY_FLAGS, add_server_security_arguments

FLAGS = (
    "data_dir",
    "http_port",
    "broker_service_port",
    "broker_service_port_tls",
    "bind_address",
    "bookies",
    "bookie_port",
)
QUORUM_FLAGS = ("ensemble_size", "write_quorum", "ack_quorum")
BROKER_ONLY_FLAGS = ("tls_certificate_file", "tls_key_file")
"""Flags that set the broker's setting only (the certificate of ``--http-port-tls``), not the bookies'."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG); flags and env win")
    parser.add_argument("--data-dir", help="where everything is stored (default ./data)")
    parser.add_argument("--http-port", type=int, help="WebSocket/admin/metrics port (default 8080; 0: any)")
    parser.add_argument(
        "--broker-service-port",
        type=int,
        help="Pulsar binary protocol port, pulsar://host:port (default 6650; 0: any)",
    )
    parser.add_argument(
        "--broker-service-port-tls",
        type=int,
        help="Pulsar binary protocol over TLS, pulsar+ssl://host:port (default off; 0: any; "
        "needs --tls-certificate-file and --tls-key-file)",
    )
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
    from magnetar.admin.processes import standalone  # noqa: PLC0415 (heavy imports only when the command runs)

    given = {name: getattr(args, name) for name in (*FLAGS, *QUORUM_FLAGS, *SERVER_SECURITY_FLAGS)}
    overrides: dict[str, Any] = {
        k: v for k, v in given.items() if v is not None and k not in BROKER_ONLY_FLAGS
    }
    broker = {k: v for k, v in given.items() if v is not None and k in BROKER_ONLY_FLAGS}
    if broker:
        overrides["broker"] = broker
    return standalone.main(overrides, config_file=args.config)
