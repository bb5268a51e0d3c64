"""``magnetar broker``: run one broker process. The work is in :mod:`magnetar.admin.processes.broker_process`
(imported on use).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:class:`~magnetar.broker.settings.BrokerSettings`, :mod:`magnetar.admin.processes.config`): flags win over
the environment, which wins over the file.
"""

from __future__ import annotations

import argparse

SERVER_SECURITY_FLAGS = (
    "authentication_enabled",
    "token_secret_key",
    "token_public_key",
    "super_user_roles",
    "http_port_tls",
    "tls_certificate_file",
    "tls_key_file",
)
"""The token and TLS flags ``magnetar broker`` and ``magnetar standalone`` share."""
FLAGS = (
    "metadata_url",
    "http_port",
    "broker_service_port",
    "broker_service_port_tls",
    "bind_address",
    "advertised_address",
    "advertised_listeners",
    "internal_listener_name",
    "cluster",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    *SERVER_SECURITY_FLAGS,
    "tls_trust_certs_file",
    "bookkeeper_auth_token",
    "bookkeeper_tls_enabled",
    "bookkeeper_tls_trust_certs_file",
    "managed_ledger_password",
)


def add_server_security_arguments(group: argparse._ArgumentGroup, authentication_help: str) -> None:
    """The flags of :data:`SERVER_SECURITY_FLAGS`."""
    group.add_argument("--authentication-enabled", action="store_const", const=True, help=authentication_help)
    group.add_argument("--token-secret-key", help="token key: file:///path, data:;base64,... or base64")
    group.add_argument("--token-public-key", help="or the public key of a key pair, same forms")
    group.add_argument("--super-user-roles", help="comma-separated roles allowed everything")
    group.add_argument("--http-port-tls", type=int, help="also serve HTTPS/WSS on this port (0: any)")
    group.add_argument("--tls-certificate-file", help="PEM certificate chain of the TLS port")
    group.add_argument("--tls-key-file", help="PEM private key of the TLS port")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG); flags and env win")
    parser.add_argument("--metadata-url", help="metadata store: zk:HOST:PORT[/chroot], memory://[NAME]")
    parser.add_argument("--http-port", type=int, help="HTTP/WebSocket port (default 8080; 0: any free port)")
    parser.add_argument("--port", dest="http_port", type=int, help="alias of --http-port")
    parser.add_argument(
        "--broker-service-port", type=int, help="Pulsar binary protocol port (default 6650; 0: any free port)"
    )
    parser.add_argument(
        "--broker-service-port-tls",
        type=int,
        help="Pulsar binary protocol over TLS, pulsar+ssl:// (default off; 0: any; needs the TLS files)",
    )
    parser.add_argument("--bind", dest="bind_address", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--advertised-address", help="host clients are told to use (lookup, redirects)")
    parser.add_argument(
        "--advertised-listeners",
        help="named binary addresses, name:pulsar://host:port,name:pulsar+ssl://host:port,... "
        "(lookups naming a listener get its address)",
    )
    parser.add_argument(
        "--internal-listener-name", help="the listener whose URLs are the broker's own (default: the first)"
    )
    parser.add_argument("--cluster", help="cluster name (default standalone)")
    parser.add_argument("--ensemble-size", type=int, help="bookies per ledger (default 2)")
    parser.add_argument("--write-quorum", type=int, help="copies of each entry (default 2)")
    parser.add_argument("--ack-quorum", type=int, help="acks needed per entry (default 2)")
    creation = parser.add_mutually_exclusive_group()
    creation.add_argument(
        "--auto-topic-creation",
        dest="allow_auto_topic_creation",
        action="store_true",
        default=None,
        help="create topics on first use (the default)",
    )
    creation.add_argument(
        "--no-auto-topic-creation", dest="allow_auto_topic_creation", action="store_false", default=None
    )
    parser.add_argument(
        "--port-file", help="when ready, write {brokerId, httpUrl, port} as JSON to this file"
    )
    security = parser.add_argument_group("security (off by default; every MAGNETAR_<NAME> setting works too)")
    add_server_security_arguments(
        security, "require a token on the WebSocket API, lookup and admin API (and check permissions)"
    )
    security.add_argument("--tls-trust-certs-file", help="PEM CA certificates for client certificates")
    security.add_argument(
        "--bookkeeper-auth-token", help="token for the bookies: token:<jwt> or file:///path"
    )
    security.add_argument(
        "--bookkeeper-tls-enabled", action="store_const", const=True, help="connect to bookies over TLS"
    )
    security.add_argument("--bookkeeper-tls-trust-certs-file", help="PEM CA certificates of the bookies")
    security.add_argument(
        "--managed-ledger-password",
        help="password of the ledgers this broker creates: file:///path (default: a random one per start)",
    )


def run(args: argparse.Namespace) -> int:
    from magnetar.admin.processes import broker_process  # noqa: PLC0415 (heavy imports only when the command runs)

    overrides = {name: getattr(args, name) for name in (*FLAGS, "allow_auto_topic_creation")}
    return broker_process.main(
        {k: v for k, v in overrides.items() if v is not None},
        port_file=getattr(args, "port_file", None),
        config_file=args.config,
    )
