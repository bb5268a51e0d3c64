"""``magnetar admin``: the admin REST API from the command line (like ``pulsar-admin``); see
:mod:`magnetar.admin.cli.admin_client`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.admin.cli.admin_client import add_arguments as add  # noqa: PLC0415

    add(parser)


def run(args: argparse.Namespace) -> int:
    import logging  # noqa: PLC0415
    import sys  # noqa: PLC0415

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise on a terminal

    from magnetar.admin.cli.admin_client import execute  # noqa: PLC0415

    return execute(args, sys.stdout, sys.stderr)
