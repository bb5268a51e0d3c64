"""The ``magnetar`` command line: one program, one subcommand per process kind or tool.

This module is the composition root's front door. Each subcommand lives in its own ``cmd_*`` module, which
is imported only when the command line chooses that subcommand (:mod:`.subcommands`): ``magnetar --help``
imports none of them, ``magnetar broker --help`` only ``cmd_broker``, and each ``cmd_*`` module imports what
its command runs on (trio, the broker, the storage engine) only in its ``run``. So ``--help`` stays fast and a
broken optional dependency (say, pyspark) never breaks unrelated commands.

Output to a closed pipe (``magnetar admin topics list public/default | head -1``) ends the command quietly
with exit code 141, as a command killed by SIGPIPE would, instead of a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from magnetar.admin.cli.subcommands import LazySubcommands

# name -> (module, help). Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "standalone": (
        "magnetar.admin.cli.cmd_standalone",
        "metadata store, bookies and a broker in one process (the quick start)",
    ),
    "admin": ("magnetar.admin.cli.cmd_admin", "manage tenants, namespaces, topics (like pulsar-admin)"),
    "bookie": ("magnetar.admin.cli.cmd_bookie", "run one bookie (storage node) process"),
    "broker": ("magnetar.admin.cli.cmd_broker", "run one broker process (WebSocket API, lookup, metrics)"),
    "autorecovery": (
        "magnetar.admin.cli.cmd_autorecovery",
        "run an AutoRecovery daemon (auditor + replication worker) in its own process",
    ),
    "initialize-cluster-metadata": (
        "magnetar.admin.cli.cmd_init_cluster",
        "create the cluster, tenant public and namespace public/default (idempotent)",
    ),
    "wait-for-metadata": (
        "magnetar.admin.cli.cmd_wait_metadata",
        "wait until the metadata store answers (and holds a cluster's metadata, enough bookies)",
    ),
    "perf": ("magnetar.admin.cli.cmd_perf", "load generators and benchmarks (like pulsar-perf)"),
    "tokens": (
        "magnetar.admin.cli.cmd_tokens",
        "keys and tokens for token authentication (like pulsar tokens)",
    ),
    "config": (
        "magnetar.admin.cli.cmd_config",
        "show the effective settings of a process kind and their sources",
    ),
    "dev-cluster": (
        "magnetar.admin.cli.cmd_dev_cluster",
        "a real local cluster: ZooKeeper, bookie and broker processes (until Ctrl-C)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magnetar",
        description="Magnetar: a Pulsar-style message log (brokers, managed ledgers, bookies).",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO").upper(),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default $MAGNETAR_LOG_LEVEL, else INFO)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, action=LazySubcommands)
    assert isinstance(sub, LazySubcommands)
    for name, (module_name, help_text) in COMMANDS.items():
        sub.add_module(name, help_text, module_name).set_defaults(_module=module_name)
    return parser


EXIT_BROKEN_PIPE = 128 + 13
"""Exit code when stdout was closed by its reader: that of a command killed by SIGPIPE (Python ignores
SIGPIPE so that sockets report EPIPE, which the servers and ``perf`` need)."""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        if not _only_broken_pipes(exc):
            raise
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module = importlib.import_module(args._module)
    code: int = module.run(args)
    sys.stdout.flush()  # a closed pipe shows here, not at exit where it could only be reported
    return code


def _only_broken_pipes(exc: BaseException) -> bool:
    """``exc`` is a BrokenPipeError, or a group of nothing else (a trio nursery's)."""
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(BrokenPipeError)
        return matched is not None and rest is None
    return isinstance(exc, BrokenPipeError)


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is left in its buffer at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
