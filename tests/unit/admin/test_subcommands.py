"""The ``magnetar`` command line loads a subcommand's module only when that subcommand is chosen.

``magnetar --help`` and every other command's ``--help`` must not import what they do not use: the
subprocess tests below run the real entry point in a fresh interpreter and look at ``sys.modules``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from magnetar.admin.cli import cmd_perf
from magnetar.admin.cli import main as cli
from magnetar.admin.cli.subcommands import LazySubcommands, load_every_subcommand

HEAVY = ("trio", "httpx", "pydantic", "kazoo", "rocksdict", "cryptography", "magnetar.broker")
"""Packages that no ``--help`` outside the command that needs them may import."""

PROBE = """
import json, sys
from magnetar.admin.cli import main as cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter has imported after ``magnetar ARGV`` (e.g. ``--help``)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.startswith("usage: magnetar"), done.stdout + done.stderr
    loaded: set[str] = set(json.loads(done.stderr.splitlines()[-1]))
    return loaded


def heavy(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in HEAVY or name.startswith(HEAVY)}


def test_top_level_help_imports_no_command() -> None:
    modules = modules_after("--help")
    assert not {name for name in modules if name.startswith("magnetar.admin.cli.cmd_")}
    assert not heavy(modules)


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_a_commands_help_imports_that_command_only(command: str) -> None:
    modules = modules_after(command, "--help")
    commands = {name for name in modules if name.startswith("magnetar.admin.cli.cmd_")}
    expected = {cli.COMMANDS[command][0]}
    if command == "standalone":
        expected.add("magnetar.admin.cli.cmd_broker")  # the security flags both share
    assert commands == expected
    if command != "admin":  # the admin client's verbs and httpx are what `admin --help` shows
        assert not heavy(modules), f"magnetar {command} --help imported {sorted(heavy(modules))}"


def test_perf_help_imports_no_benchmark() -> None:
    modules = modules_after("perf", "--help")
    assert not {name for name in modules if name.startswith("magnetar.admin.perf.")}
    assert not heavy(modules)


def test_a_chosen_subcommand_gets_its_arguments() -> None:
    args = cli.build_parser().parse_args(["standalone", "--http-port", "8081", "--data-dir", "d"])
    assert (args.command, args._module, args.http_port, args.data_dir) == (
        "standalone",
        "magnetar.admin.cli.cmd_standalone",
        8081,
        "d",
    )
    perf = cli.build_parser().parse_args(["perf", "produce", "--topic", "t", "--messages", "5"])
    assert (perf._bench_module, perf.topic, perf.messages) == ("magnetar.admin.perf.produce", "t", 5)


def test_an_unknown_subcommand_is_still_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def test_load_every_subcommand_builds_the_whole_tree() -> None:
    parser = cli.build_parser()
    load_every_subcommand(parser)
    commands = subcommands(parser)
    assert set(commands) == set(cli.COMMANDS)
    assert set(subcommands(commands["perf"])) == set(cmd_perf.BENCHMARKS)
    for name, command in commands.items():
        assert command._actions, name
    produce = subcommands(commands["perf"])["produce"]
    assert "--messages" in {option for action in produce._actions for option in action.option_strings}


def test_a_loader_runs_once_and_only_when_chosen() -> None:
    calls: list[str] = []
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers(dest="command", required=True, action=LazySubcommands)
    assert isinstance(sub, LazySubcommands)

    def loader(name: str) -> Callable[[argparse.ArgumentParser], None]:
        def load(child: argparse.ArgumentParser) -> None:
            calls.append(name)
            child.add_argument("--value", type=int)

        return load

    sub.add_lazy("one", "the first", loader("one"))
    sub.add_lazy("two", "the second", loader("two"))
    assert parser.parse_args(["one", "--value", "3"]).value == 3
    assert parser.parse_args(["one", "--value", "4"]).value == 4
    assert calls == ["one"]
    assert "the second" in parser.format_help()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
