"""``magnetar autorecovery``: an AutoRecovery daemon in its own process (BookKeeper's ``autorecovery`` /
``AutoRecoveryMain``). The work is in :mod:`.autorecovery_process` (imported on use).

Bookies run AutoRecovery themselves by default; run this instead next to bookies started with
``--no-autorecovery`` (or ``MAGNETAR_AUTORECOVERY__ENABLED=false``) to keep copying off the bookies' CPUs.
Every setting is also ``MAGNETAR_<NAME>`` / ``MAGNETAR_AUTORECOVERY__<NAME>`` and a key of the config file.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $MAGNETAR_CONFIG); flags and env win")
    parser.add_argument("--metadata-url", help="metadata store: zk:HOST:PORT[/chroot]")
    parser.add_argument(
        "--http-port", type=int, help="port of /metrics and the REST API (0 = pick; unset = none)"
    )
    parser.add_argument("--bind", dest="bind_address", help="address of the HTTP port (default 0.0.0.0)")
    parser.add_argument("--daemon-id", help="name in the auditor election (default HOSTNAME:PID)")
    parser.add_argument("--port-file", help="when ready, write the ready line's JSON to this file")
    security = parser.add_argument_group("security of the HTTP port (off by default; as a bookie's)")
    security.add_argument(
        "--authentication-enabled",
        action="store_const",
        const=True,
        help="the REST API needs a superuser's token (the daemon's own token for bookies is "
        "MAGNETAR_AUTORECOVERY__BOOKKEEPER_AUTH_TOKEN)",
    )
    security.add_argument(
        "--token-secret-key", help="the cluster's token key: file:///path or data:;base64,..."
    )
    security.add_argument("--token-public-key", help="or the public key of the cluster's key pair")
    security.add_argument(
        "--super-user-roles", help="comma-separated roles allowed the REST API when authentication is on"
    )


def run(args: argparse.Namespace) -> int:
    from magnetar.admin.processes import autorecovery_process  # noqa: PLC0415 (heavy imports only when it runs)

    names = (
        "metadata_url", "http_port", "bind_address", "daemon_id", "port_file",
        "authentication_enabled", "token_secret_key", "token_public_key", "super_user_roles",
    )  # fmt: skip
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return autorecovery_process.main(overrides, args.config)
