"""The ``magnetar perf`` command lines: help for every option with its default, values checked when parsed,
``--messages`` not cut short by a hidden duration, shares of producers that add up, strict-JSON summaries."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import pytest

from magnetar.admin.cli import cmd_perf
from magnetar.admin.cli.main import build_parser
from magnetar.admin.perf.common import latency_summary_ms
from magnetar.admin.perf.ws import PerfRun, _duration_s, _quotas
from magnetar.admin.perf.ws_stats import Histogram, Stats, summary_line
from magnetar.bookkeeper.runtime.http.ws_client import WsRejected


def _strict(text: str) -> Any:
    """JSON as every parser but Python's reads it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _perf_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser()
    cmd_perf.add_arguments(parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(cmd_perf.BENCHMARKS))
def test_every_option_has_help_and_help_shows_its_default(name: str) -> None:
    parser = _perf_parsers()[name]
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"perf {name} {action.option_strings}: no help text"
        if action.default is not None:
            assert f"(default: {action.default})" in text, f"perf {name} {action.option_strings}"
        else:
            assert "unset" in action.help or action.required, f"perf {name} {action.option_strings}"


def test_the_auth_token_never_shows_in_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_AUTH_TOKEN", "token:secret-value")
    for parser in _perf_parsers().values():
        assert "secret-value" not in parser.format_help()


def _produce(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["perf", "produce", "--topic", "t", *argv])


def test_messages_run_until_acknowledged_unless_a_duration_is_given() -> None:
    assert _duration_s(_produce("--messages", "55000")) == math.inf
    assert _duration_s(_produce()) == 30.0
    assert _duration_s(_produce("--messages", "10", "--duration-s", "5")) == 5.0
    assert _duration_s(_produce("--duration-s", "0")) == math.inf


@pytest.mark.parametrize(
    "argv",
    [
        ["--messages", "-1"],
        ["--duration-s", "-2"],
        ["--duration-s", "inf"],
        ["--producers", "0"],
        ["--max-pending", "0"],
        ["--rate", "nan"],
        ["--size", "ten"],
        ["--report-interval-s", "0"],
    ],
)
def test_bad_values_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _produce(*argv)
    assert exited.value.code == 2
    assert "is not" in capsys.readouterr().err


def test_producer_shares_add_up_to_the_messages_asked_for() -> None:
    assert _quotas(55_000, 3) == [18_334, 18_333, 18_333]
    assert sum(_quotas(1000, 7)) == 1000
    assert _quotas(2, 5) == [1, 1]  # producers without a share do not start
    assert _quotas(0, 3) == [0, 0, 0]  # no count: each runs until the duration ends


def test_a_summary_without_messages_is_strict_json() -> None:
    empty = _strict(summary_line("produce", Stats(), {"protocol": "json"}))
    assert empty["messages"] == 0
    assert empty["latency_ms"] == {"p50": None, "p95": None, "p99": None, "p99.9": None, "max": None}
    stats = Stats()
    stats.record(0.002, 1.0)
    assert _strict(summary_line("produce", stats, {}))["latency_ms"]["p50"] == 2.0
    assert Histogram().summary()["p99"] is None
    assert latency_summary_ms([]) == {"p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}


def test_outcomes_and_exit_codes() -> None:
    run = PerfRun("produce", target=10)
    assert run.outcome() == ("refused messages", 1)
    run.duration_ended = True
    assert run.outcome() == ("duration ended", 1)
    run.stats.count = 10
    assert run.outcome() == ("completed", 0)
    assert run.outcome(interrupted=True) == ("interrupted", 130)
    run.failure = "producer 0: refused"
    assert run.outcome() == ("failed", 1)
    assert PerfRun("consume", target=0).outcome() == ("completed", 0)


def test_a_refusal_carries_the_servers_reason() -> None:
    assert WsRejected(401, b'{"reason":"Failed to authenticate"}').reason == "Failed to authenticate"
    assert WsRejected(502, b"Bad Gateway\n").reason == "Bad Gateway"
    assert WsRejected(500, b'["x"]').reason == '["x"]'
