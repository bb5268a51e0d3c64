"""``magnetar standalone``: metadata store, bookies and a broker in one process (see :mod:`.standalone`).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:mod:`magnetar.admin.config`): flags win over the environment, which wins over the file.
"""

from __future__ import annotations

import argparse

FLAGS = ("data_dir", "http_port", "bind_address", "bookies", "bookie_port")
QUORUM_FLAGS = ("ensemble_size", "write_quorum", "ack_quorum")
SECURITY_FLAGS = (
    "authentication_enabled",
    "token_secret_key",
    "token_public_key",
    "super_user_roles",
    "http_port_tls",
    "tls_certificate_file",
    "tls_key_file",
)


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
    security.add_argument(
        "--authentication-enabled",
        action="store_const",
        const=True,
        help="require tokens (and check permissions) on the broker and the bookies' ports",
    )
    security.add_argument("--token-secret-key", help="token key: file:///path, data:;base64,... or base64")
    security.add_argument("--token-public-key", help="or the public key of a key pair, same forms")
    security.add_argument("--super-user-roles", help="comma-separated roles allowed everything")
    security.add_argument("--http-port-tls", type=int, help="also serve HTTPS/WSS on this port (0: any)")
    security.add_argument("--tls-certificate-file", help="PEM certificate chain of the TLS port")
    security.add_argument("--tls-key-file", help="PEM private key of the TLS port")


def run(args: argparse.Namespace) -> int:
    from magnetar.admin import standalone  # noqa: PLC0415 (heavy imports only when the command runs)

    overrides = {name: getattr(args, name) for name in (*FLAGS, *QUORUM_FLAGS, *SECURITY_FLAGS)}
    return standalone.main({k: v for k, v in overrides.items() if v is not None}, config_file=args.config)
