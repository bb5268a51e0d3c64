"""The command-line tools behave in a pipeline and tell a user what to do in the tools' own words.

* Output to a pipe whose reader has gone (``magnetar admin ... | head -1``) ends the command quietly with
  exit code 141 (a SIGPIPE death's), not a ``BrokenPipeError`` traceback. The reader here is gone before the
  command writes anything, so every write fails - what ``head`` does to a long output, made deterministic.
* Advice in an error names the ``magnetar admin`` verb to use, not a REST path.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fixtures.processes import ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

EXIT_BROKEN_PIPE = 141


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def standalone_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("standalone")
    group = ProcessGroup(root)
    try:
        args = [
            "standalone", "--data-dir", str(root / "data"), "--http-port", "0",
            "--bookie-port", str(free_port()),
        ]  # fmt: skip
        yield str(group.add("standalone", args).ready["httpUrl"])
    finally:
        group.stop_all()


def magnetar(*args: str, closed_stdout: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "magnetar.admin.cli", *args]
    if not closed_stdout:
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before the command writes a byte
    try:
        return subprocess.run(
            command, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120, check=False
        )
    finally:
        os.close(writer)


def ends_quietly(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == EXIT_BROKEN_PIPE, done.stderr[-3000:]
    for noise in ("Traceback", "BrokenPipeError", "Broken pipe", "Exception ignored"):
        assert noise not in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize(
    "args",
    [
        ("admin", "--admin-url", "{url}", "tenants", "list"),
        ("admin", "--admin-url", "{url}", "--output", "table", "namespaces", "list", "public"),
        (
            "perf",
            "produce",
            "--url",
            "{url}",
            "--topic",
            "piped",
            "--messages",
            "200",
            "--report-interval-s",
            "0.1",
        ),
        (
            "perf",
            "consume",
            "--url",
            "{url}",
            "--topic",
            "piped",
            "--messages",
            "200",
            "--report-interval-s",
            "0.1",
        ),
        ("config", "show", "standalone"),
        ("config", "show", "broker", "--format", "json"),
        ("tokens", "create-secret-key", "--base64"),
    ],
    ids=["admin", "admin-table", "perf-produce", "perf-consume", "config-toml", "config-json", "tokens"],
)
def test_a_command_writing_to_a_closed_pipe_ends_quietly(standalone_url: str, args: tuple[str, ...]) -> None:
    ends_quietly(magnetar(*(arg.format(url=standalone_url) for arg in args), closed_stdout=True))


def test_deleting_a_partitioned_topic_points_to_the_verb_that_does(standalone_url: str) -> None:
    topic = "persistent://public/default/orders-by-region"
    created = magnetar(
        "admin", "--admin-url", standalone_url, "topics", "create-partitioned-topic", topic, "-p", "2"
    )
    assert created.returncode == 0, created.stderr
    refused = magnetar("admin", "--admin-url", standalone_url, "topics", "delete", topic)
    assert refused.returncode == 1
    assert (
        "error: 409 Topic is a partitioned topic; delete it with delete-partitioned-topic" in refused.stderr
    )
    assert "DELETE" not in refused.stderr
    assert "/partitions" not in refused.stderr
    deleted = magnetar("admin", "--admin-url", standalone_url, "topics", "delete-partitioned-topic", topic)
    assert deleted.returncode == 0, deleted.stderr
