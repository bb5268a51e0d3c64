"""``magnetar bookie``: run one bookie process. The work is in :mod:`magnetar.admin.processes.bookie_process`
(imported on use).

Every flag is also an environment variable ``MAGNETAR_<NAME>`` and a key of the TOML config file
(:class:`~magnetar.admin.processes.bookie_settings.BookieSettings`,
:mod:`magnetar.admin.processes.config`): flags win over the environment, which wins over the file.
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
    # AutoRecovery (BEGIN)
    parser.add_argument("--rack", help="this bookie's rack or zone; placement spreads write sets over racks")
    parser.add_argument(
        "--no-autorecovery",
        dest="autorecovery_enabled",
        action="store_const",
        const=False,
        help="do not run the AutoRecovery daemon in this bookie (run `magnetar autorecovery` instead)",
    )
    # AutoRecovery (END)
    identity = parser.add_argument_group("identity (BookKeeper's cookies)")
    identity.add_argument(
        "--format",
        dest="format_data",
        action="store_true",
        help="instead of serving: empty the data and journal directories and delete this bookie's cookie "
        "from the metadata store, so that it next starts as a new bookie (BookKeeper's bookieformat); "
        "retire the old identity first (decommission or recover its ledgers)",
    )
    identity.add_argument(
        "--force", action="store_true", help="with --format: delete what the directories hold (needed if any)"
    )
    security = parser.add_argument_group("security (off by default)")
    security.add_argument(
        "--authentication-enabled",
        action="store_const",
        const=True,
        help="require every connection to present a cluster token (AUTH) before any request",
    )
    security.add_argument(
        "--token-secret-key", help="the cluster's token key: file:///path or data:;base64,..."
    )
    security.add_argument("--token-public-key", help="or the public key of the cluster's key pair")
    security.add_argument(
        "--auth-allowed-roles",
        help="comma-separated roles of the brokers (their bookkeeper_auth_token's subject)",
    )
    security.add_argument(
        "--super-user-roles",
        help="comma-separated superuser roles: admitted on the bookie protocol, and the only roles that may "
        "call the HTTP endpoints (GC, listings) when authentication is on",
    )
    security.add_argument("--tls-certificate-file", help="PEM certificate chain: serve the protocol over TLS")
    security.add_argument("--tls-key-file", help="PEM private key of the certificate")
    security.add_argument("--tls-trust-certs-file", help="PEM CA certificates for client certificates")
    security.add_argument(
        "--tls-require-trusted-client-cert",
        action="store_const",
        const=True,
        help="mutual TLS: refuse clients without a certificate signed by --tls-trust-certs-file",
    )


def run(args: argparse.Namespace) -> int:
    from magnetar.admin.processes import bookie_process  # noqa: PLC0415 (heavy imports only when the command runs)

    names = (
        "metadata_url", "data_dir", "journal_dir", "port", "bind_address", "advertised_address", "http_port",
    )  # fmt: skip
    security = (
        "authentication_enabled", "token_secret_key", "token_public_key", "auth_allowed_roles",
        "super_user_roles", "tls_certificate_file", "tls_key_file", "tls_trust_certs_file",
        "tls_require_trusted_client_cert",
    )  # fmt: skip
    overrides = {name: getattr(args, name) for name in (*names, *security, "storage", "port_file", "rack")}
    if args.autorecovery_enabled is not None:
        overrides["autorecovery"] = {"enabled": args.autorecovery_enabled}
    given = {k: v for k, v in overrides.items() if v is not None}
    return bookie_process.main(given, args.config, format_data=args.format_data, force=args.force)
