"""The ``magnetar`` command line: one program, one subcommand per process kind or tool.

This module is the composition root's front door. Each subcommand lives in its own ``cmd_*`` module, which
is imported only when that subcommand runs, so ``magnetar --help`` stays fast and a broken optional
dependency (say, pyspark) never breaks unrelated commands.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

# name -> (module, help). Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "standalone": (
        "magnetar.admin.cmd_standalone",
        "metadata store, bookies and a broker in one process (the quick start)",
    ),
    "admin": ("magnetar.admin.cmd_admin", "manage tenants, namespaces, topics (like pulsar-admin)"),
    "bookie": ("magnetar.admin.cmd_bookie", "run one bookie (storage node) process"),
    "broker": ("magnetar.admin.cmd_broker", "run one broker process (WebSocket API, lookup, metrics)"),
    "autorecovery": (
        "magnetar.admin.cmd_autorecovery",
        "run an AutoRecovery daemon (auditor + replication worker) in its own process",
    ),
    "initialize-cluster-metadata": (
        "magnetar.admin.cmd_init_cluster",
        "create the cluster, tenant public and namespace public/default (idempotent)",
    ),
    "perf": ("magnetar.admin.cmd_perf", "load generators and benchmarks (like pulsar-perf)"),
    "tokens": ("magnetar.admin.cmd_tokens", "keys and tokens for token authentication (like pulsar tokens)"),
    "config": (
        "magnetar.admin.cmd_config",
        "show the effective settings of a process kind and their sources",
    ),
    "dev-cluster": (
        "magnetar.admin.cmd_dev_cluster",
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        cmd_parser = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(cmd_parser)
        cmd_parser.set_defaults(_module=module_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module = importlib.import_module(args._module)
    try:
        code: int = module.run(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
