"""``magnetar perf produce|consume`` against a real broker: ``--messages N`` means N acknowledged (shared
between producers, kept across a lost connection), failures that retrying cannot fix stop the run at once
with the broker's reason and exit code 1, and the closing line is strict JSON."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from fixtures.broker import Broker

from magnetar.admin.cli.main import main
from magnetar.broker.wire.topic_name import parse_topic_name


def _summary(out: str) -> dict[str, Any]:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1], parse_constant=refuse)
    return summary


def _perf(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str, str]:
    code = main(["perf", *argv])
    captured = capsys.readouterr()
    return code, _summary(captured.out), captured.out, captured.err


@pytest.mark.parametrize("protocol", ["json", "binary"])
def test_messages_are_all_acknowledged_when_producers_share_them_unevenly(
    broker: Broker, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    common = ["--url", broker.http_url, "--topic", f"uneven-{protocol}", "--protocol", protocol]
    code, produced, _, _ = _perf(capsys, "produce", *common, "--messages", "1000", "--producers", "3")
    assert code == 0
    assert (produced["messages"], produced["errors"], produced["outcome"]) == (1000, 0, "completed")
    assert produced["target_messages"] == 1000
    code, consumed, _, _ = _perf(capsys, "consume", *common, "--messages", "1000")
    assert code == 0
    assert consumed["messages"] == 1000
    assert consumed["latency_ms"]["p50"] is not None


@pytest.mark.parametrize("protocol", ["json", "binary"])
def test_topics_spread_the_load_and_lookup_finds_each_owner(
    broker: Broker, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    common = ["--url", broker.http_url, "--topic", f"spread-{protocol}", "--protocol", protocol,
              "--topics", "3", "--lookup"]  # fmt: skip
    code, produced, _, err = _perf(capsys, "produce", *common, "--messages", "900", "--producers", "2")
    assert code == 0, err
    assert (produced["messages"], produced["topics"], produced["producers"]) == (900, 3, 6)
    stored = []
    for index in range(3):
        loaded = broker.call_sync(
            broker.service.topic_if_loaded, parse_topic_name(f"spread-{protocol}-{index}")
        )
        assert loaded is not None
        stored.append(loaded.ml.number_of_entries())
    assert all(entries > 0 for entries in stored)
    code, consumed, _, err = _perf(capsys, "consume", *common, "--messages", "900")
    assert code == 0, err
    assert (consumed["messages"], consumed["topics"]) == (900, 3)


def test_a_lookup_refused_for_good_stops_the_run_at_once(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    code, produced, out, err = _perf(
        capsys, "produce", "--url", broker.http_url, "--topic", "public/no-such-namespace/t", "--lookup",
        "--messages", "10", "--duration-s", "120",
    )  # fmt: skip
    assert code == 1
    assert "lookup" in err
    assert "404" in err
    assert "retrying" not in out
    assert produced["outcome"] == "failed"


@pytest.mark.parametrize("protocol", ["json", "binary"])
def test_a_lost_connection_does_not_lose_messages_from_the_count(
    broker: Broker, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    topic = parse_topic_name(f"failover-{protocol}")
    unloaded = threading.Event()

    def unload_once_publishing() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            loaded = broker.call_sync(broker.service.topic_if_loaded, topic)
            if loaded is not None and loaded.ml.number_of_entries() >= 200:
                broker.call(broker.service.unload_topic, topic)
                unloaded.set()
                return
            time.sleep(0.01)

    unloader = threading.Thread(target=unload_once_publishing)
    unloader.start()
    try:
        code, produced, out, err = _perf(
            capsys, "produce", "--url", broker.http_url, "--topic", f"failover-{protocol}",
            "--messages", "3000", "--rate", "1500", "--max-pending", "100", "--batch-size", "10",
            "--protocol", protocol,
        )  # fmt: skip
    finally:
        unloader.join()
    assert unloaded.is_set()
    assert "connection lost" in out
    assert code == 0, err
    assert (produced["messages"], produced["outcome"]) == (3000, "completed")


def test_a_topic_that_cannot_exist_stops_the_run_at_once(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    code, produced, out, err = _perf(
        capsys, "produce", "--url", broker.http_url, "--topic", "public/no-such-namespace/t",
        "--messages", "10", "--duration-s", "120",
    )  # fmt: skip
    assert code == 1
    assert "404" in err
    assert "retrying" not in out
    assert (produced["messages"], produced["outcome"]) == (0, "failed")
    assert produced["elapsed_s"] < 60  # not retried until the duration ended


def test_no_broker_is_given_up_after_the_reconnect_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    code, consumed, _, err = _perf(
        capsys, "consume", "--url", "ws://127.0.0.1:9", "--topic", "t", "--reconnect-timeout-s", "0.5",
    )  # fmt: skip
    assert code == 1
    assert "no connection to ws://127.0.0.1:9/ws/v2/consumer/persistent/public/default/t/perf-sub" in err
    assert consumed["outcome"] == "failed"


def test_ctrl_c_still_prints_the_summary() -> None:
    # As from a terminal, where Ctrl-C's SIGINT is not ignored - also when this suite runs as a background job
    # of a non-interactive shell, which starts it (and so its children) with SIGINT ignored, and Python keeps
    # an ignored SIGINT ignored.
    at_a_terminal = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'magnetar'; runpy.run_module('magnetar.admin.cli', run_name='__main__')"
    )
    command = [sys.executable, "-c", at_a_terminal, "perf", "consume", "--url", "ws://127.0.0.1:9",
               "--topic", "t", "--reconnect-timeout-s", "120"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert "retrying" in process.stdout.readline()  # running: the first attempt failed
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)  # closes the pipes too
    assert process.returncode == 130
    assert _summary(out)["outcome"] == "interrupted"
