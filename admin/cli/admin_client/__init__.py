"""``magnetar admin``: a command-line client of the admin REST API, mirroring ``pulsar-admin``.

``magnetar admin [--admin-url URL] [--output json|table] GROUP VERB ...`` with the groups ``clusters``,
``brokers``, ``tenants``, ``namespaces``, ``topics``, ``subscriptions`` and ``schemas`` (the admin REST API
of a broker), and ``bookies`` (a bookie's REST API, :mod:`.bookies`). Answers are printed as JSON (or a
table); a refused request prints ``error: <status> <server's reason>`` on stderr and exits 1; a bad argument
exits 2. ``--auth-token`` (``token:<jwt>``, ``file:///path`` or the bare token; env ``MAGNETAR_AUTH_TOKEN``)
authenticates every request; ``--tls-trust-certs-file`` (env ``MAGNETAR_TLS_TRUST_CERTS_FILE``) names the CA
certificates of an ``https://`` admin URL.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Sequence
from typing import TextIO

from magnetar.admin.cli.admin_client.bookies import BOOKIES
from magnetar.admin.cli.admin_client.client import DEFAULT_ADMIN_URL, AdminApiError, AdminClient
from magnetar.admin.cli.admin_client.output import render
from magnetar.admin.cli.admin_client.policy_verbs import namespace_policy_verbs, topic_policy_verbs
from magnetar.admin.cli.admin_client.schemas import SCHEMAS
from magnetar.admin.cli.admin_client.tenancy import BROKERS, CLUSTERS, NAMESPACES, TENANTS
from magnetar.admin.cli.admin_client.topics import SUBSCRIPTIONS, TOPICS
from magnetar.admin.cli.admin_client.verbs import UsageError, add_group
from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import TlsConfigError, client_ssl_context

GROUPS = [
    ("clusters", "manage clusters", CLUSTERS),
    ("brokers", "inspect brokers", BROKERS),
    ("tenants", "manage tenants", TENANTS),
    ("namespaces", "manage namespaces and their policies", [*NAMESPACES, *namespace_policy_verbs()]),
    ("topics", "manage topics, their subscriptions and policies", [*TOPICS, *topic_policy_verbs()]),
    ("subscriptions", "manage subscriptions", SUBSCRIPTIONS),
    ("schemas", "manage topic schemas", SCHEMAS),
    ("bookies", "bookies and AutoRecovery, through a bookie's REST API (--bookie-url)", BOOKIES),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("MAGNETAR_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"admin REST URL (env MAGNETAR_ADMIN_URL, default {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("MAGNETAR_AUTH_TOKEN"),
        help="token: token:<jwt>, file:///path or the bare token (env MAGNETAR_AUTH_TOKEN)",
    )
    parser.add_argument(
        "--tls-trust-certs-file",
        default=os.environ.get("MAGNETAR_TLS_TRUST_CERTS_FILE"),
        help="PEM CA certificates of an https:// admin URL (env MAGNETAR_TLS_TRUST_CERTS_FILE)",
    )
    parser.add_argument("--output", "-o", choices=["json", "table"], default="json", help="output format")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for name, help_text, verbs in GROUPS:
        add_group(groups, name, help_text, verbs)


def _client(args: argparse.Namespace) -> AdminClient:
    token = read_token_setting(args.auth_token, "--auth-token") if args.auth_token else None
    verify: ssl.SSLContext | bool = True
    if args.tls_trust_certs_file:
        verify = client_ssl_context(trust_certs_file=args.tls_trust_certs_file)
    return AdminClient(args.admin_url, token=token, verify=verify)


def execute(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        with _client(args) as client:
            result = args.action(client, args)
    except (KeyConfigError, TlsConfigError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    except UsageError as exc:
        print(f"error: {exc}", file=err)
        return 2
    except AdminApiError as exc:
        print(f"error: {exc.status} {exc.reason}" if exc.status else f"error: {exc.reason}", file=err)
        return 1
    render(result, args.output, out)
    return 0


def admin_main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Parse and run one ``magnetar admin`` command line (without the leading ``admin``)."""
    parser = argparse.ArgumentParser(prog="magnetar admin")
    add_arguments(parser)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    return execute(args, out or sys.stdout, err or sys.stderr)
