"""``magnetar perf consume``: see :mod:`.ws`."""

from __future__ import annotations

import argparse

from magnetar.admin.perf.ws import run_consume
from magnetar.admin.perf.ws_args import add_consume_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_consume_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return run_consume(args)
