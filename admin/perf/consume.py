"""``magnetar perf consume``: see :mod:`.ws`."""

from __future__ import annotations

import argparse

from magnetar.admin.perf.ws import add_consume_arguments, run_consume


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_consume_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return run_consume(args)
