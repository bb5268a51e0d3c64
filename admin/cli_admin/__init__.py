"""``magnetar admin``: a command-line client of the admin REST API, mirroring ``pulsar-admin``.

``magnetar admin [--admin-url URL] [--output json|table] GROUP VERB ...`` with the groups ``clusters``,
``brokers``, ``tenants``, ``namespaces``, ``topics`` and ``subscriptions``. Answers are printed as JSON (or a
table); a refused request prints ``error: <status> <server's reason>`` on stderr and exits 1; a bad argument
exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from magnetar.admin.cli_admin.client import DEFAULT_ADMIN_URL, AdminApiError, AdminClient
from magnetar.admin.cli_admin.output import render
from magnetar.admin.cli_admin.tenancy import BROKERS, CLUSTERS, NAMESPACES, TENANTS
from magnetar.admin.cli_admin.topics import SUBSCRIPTIONS, TOPICS
from magnetar.admin.cli_admin.verbs import UsageError, add_group

GROUPS = [
    ("clusters", "manage clusters", CLUSTERS),
    ("brokers", "inspect brokers", BROKERS),
    ("tenants", "manage tenants", TENANTS),
    ("namespaces", "manage namespaces and their policies", NAMESPACES),
    ("topics", "manage topics, their subscriptions and policies", TOPICS),
    ("subscriptions", "manage subscriptions", SUBSCRIPTIONS),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("MAGNETAR_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"admin REST URL (env MAGNETAR_ADMIN_URL, default {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument("--output", "-o", choices=["json", "table"], default="json", help="output format")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for name, help_text, verbs in GROUPS:
        add_group(groups, name, help_text, verbs)


def execute(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        with AdminClient(args.admin_url) as client:
            result = args.action(client, args)
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
