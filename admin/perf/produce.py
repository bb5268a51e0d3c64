"""``magnetar perf produce``: see :mod:`.ws`."""

from __future__ import annotations

import argparse

from magnetar.admin.perf.ws import run_produce
from magnetar.admin.perf.ws_args import add_produce_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_produce_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return run_produce(args)
