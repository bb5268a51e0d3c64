"""``magnetar perf produce``: see :mod:`.ws` (and :mod:`.pulsar_perf` for ``--protocol pulsar``)."""

from __future__ import annotations

import argparse

from magnetar.admin.perf.ws import run_produce
from magnetar.admin.perf.ws_args import add_produce_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_produce_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.protocol == "pulsar":
        from magnetar.admin.perf.pulsar_perf import run_produce as run_pulsar  # noqa: PLC0415 (pulsar-client)

        return run_pulsar(args)
    return run_produce(args)
