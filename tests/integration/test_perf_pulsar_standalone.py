"""``magnetar perf produce|consume --protocol pulsar`` (the official ``pulsar-client`` over Pulsar's binary
protocol) against a real ``magnetar standalone``, run as the command a user types: every message
acknowledged and consumed, progress lines while it runs, a strict-JSON summary last, ``pulsar-perf``'s
batching and compression options passed to the client (batched and LZ4-compressed messages read back
whole), and a clear error when the client is not installed or the URL is not a ``pulsar://`` one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import running_standalone

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("perf-pulsar")) as process:
        yield process


def _perf(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str, str]:
    command = [sys.executable, "-m", "magnetar.admin.cli", "perf", *argv]
    done = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **(env or {})},
    )
    lines = done.stdout.strip().splitlines()
    summary: dict[str, Any] = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return done.returncode, summary, done.stdout, done.stderr


def test_every_message_is_acknowledged_then_consumed(standalone: MagnetarProcess) -> None:
    common = ["--protocol", "pulsar", "--url", standalone.ready["brokerUrl"], "--topic", "perf-pulsar",
              "--topics", "2", "--report-interval-s", "0.2"]  # fmt: skip
    code, produced, out, err = _perf(
        "produce", *common, "--messages", "600", "--producers", "2", "--rate", "300", "--disable-batching"
    )
    assert code == 0, err
    assert (produced["messages"], produced["errors"], produced["outcome"]) == (600, 0, "completed")
    assert (produced["protocol"], produced["batching"], produced["producers"]) == ("pulsar", False, 4)
    assert produced["latency_ms"]["p50"] is not None
    assert "produce: " in out.splitlines()[0]  # a progress line before the summary (600 at 300/s: 2 s)
    code, consumed, _, err = _perf("consume", *common, "--messages", "600")
    assert code == 0, err
    assert (consumed["messages"], consumed["outcome"]) == (600, "completed")


def test_batched_produce_passes_pulsar_perf_batching_options(standalone: MagnetarProcess) -> None:
    code, produced, _, err = _perf(
        "produce", "--protocol", "pulsar", "--url", standalone.ready["brokerUrl"], "--topic", "perf-batched",
        "--messages", "5000", "--batch-max-messages", "50", "--batch-time-window-ms", "5", "--size", "64",
    )  # fmt: skip
    assert code == 0, err
    assert (produced["messages"], produced["errors"]) == (5000, 0)
    assert (produced["batching"], produced["batch_max_messages"], produced["size"]) == (True, 50, 64)
    code, consumed, _, err = _perf(
        "consume", "--protocol", "pulsar", "--url", standalone.ready["brokerUrl"], "--topic", "perf-batched",
        "--messages", "5000",
    )  # fmt: skip
    assert code == 0, err
    assert (consumed["messages"], consumed["outcome"]) == (5000, "completed")  # every batch, whole


def test_compressed_batches_are_stored_and_consumed(standalone: MagnetarProcess) -> None:
    url = standalone.ready["brokerUrl"]
    code, produced, _, err = _perf(
        "produce", "--protocol", "pulsar", "--url", url, "--topic", "perf-lz4", "--messages", "500",
        "--compression", "LZ4", "--batch-max-messages", "25", "--reconnect-timeout-s", "10",
    )  # fmt: skip
    assert code == 0, err
    assert (produced["compression"], produced["messages"], produced["errors"]) == ("LZ4", 500, 0)
    code, consumed, _, err = _perf("consume", "--protocol", "pulsar", "--url", url, "--topic", "perf-lz4",
                                   "--messages", "500")  # fmt: skip
    assert code == 0, err
    assert (consumed["messages"], consumed["outcome"]) == (500, "completed")


def test_a_url_that_is_not_pulsar_is_a_usage_error() -> None:
    code, _, _, err = _perf("produce", "--protocol", "pulsar", "--url", "ws://127.0.0.1:8080", "--topic", "t")
    assert code == 2
    assert "--protocol pulsar takes the broker's pulsar:// URL, not ws://127.0.0.1:8080" in err


def test_without_the_client_the_error_says_what_to_install(tmp_path: Path) -> None:
    shadow = tmp_path / "pulsar"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('no pulsar-client here')\n")
    code, summary, _, err = _perf(
        "consume", "--protocol", "pulsar", "--topic", "t", env={"PYTHONPATH": str(tmp_path)}
    )
    assert code == 2
    assert summary == {}
    assert "error: --protocol pulsar needs Apache's Pulsar client: pip install pulsar-client" in err
