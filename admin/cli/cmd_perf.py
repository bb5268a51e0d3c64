"""``magnetar perf``: load generators and benchmarks. Each benchmark registers a sub-subcommand, whose module
is imported only when the command line chooses it (:mod:`.subcommands`)."""

from __future__ import annotations

import argparse
import importlib

# name -> (module, help); each module exposes add_arguments(parser) and run(args) -> int
BENCHMARKS: dict[str, tuple[str, str]] = {
    "bookie-rpc": (
        "magnetar.admin.perf.bookie_rpc",
        "bookie wire path: pipelined adds over TCP to one bookie",
    ),
    "ledger": (
        "magnetar.admin.perf.ledger",
        "replication client + real bookie processes: adds/s, add latency, reads/s, recovery time",
    ),
    "managed-ledger": (
        "magnetar.admin.perf.managed_ledger",
        "a managed ledger on real bookie processes: appends/s, cursor reads/s, rollover cost",
    ),
    "bookie-storage": (
        "magnetar.admin.perf.bookie_storage",
        "bookie storage engine: durable adds/s, add latency, catch-up reads/s, journal replay, disk limit",
    ),
    "compaction": (
        "magnetar.admin.perf.compaction",
        "entry-log compaction: live MB/s copied, publish latency during it, rate limit on and off",
    ),
    "produce": ("magnetar.admin.perf.produce", "publish over the WebSocket API: throughput and latency"),
    "consume": ("magnetar.admin.perf.consume", "consume over the WebSocket API: throughput, e2e latency"),
}


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default; an option without one (None) says in its help what
    leaving it unset means."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from magnetar.admin.cli.subcommands import LazySubcommands  # noqa: PLC0415

    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True, action=LazySubcommands)
    assert isinstance(sub, LazySubcommands)
    for name, (module_name, help_text) in BENCHMARKS.items():
        sub.add_module(name, help_text, module_name, formatter_class=DefaultsHelpFormatter).set_defaults(
            _bench_module=module_name
        )


def run(args: argparse.Namespace) -> int:
    code: int = importlib.import_module(args._bench_module).run(args)
    return code
