"""Bookie identity with real ``magnetar bookie`` processes and ZooKeeper: the cookie written at the first
start is reused by a restart; a bookie whose ledger directory was wiped, or whose port changed, is refused
with a message that says what to do and a non-zero exit; ``--format`` (with ``--force`` once there is data)
lets it start again as a new bookie under the same id."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from fixtures.processes import MagnetarProcess, ProcessFailedError, ProcessGroup

from magnetar.bookkeeper.bookie.cookie import COOKIE_FILE_NAME

pytestmark = pytest.mark.processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def refused(process: MagnetarProcess) -> str:
    """Start a process that must fail: its exit code is non-zero; returns its log."""
    with pytest.raises(ProcessFailedError, match="exited before it was ready"):
        process.start()
    assert process.wait() != 0
    return process.log_path.read_text()


def test_a_wiped_bookie_is_refused_until_it_is_formatted(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    group = magnetar_processes
    data, journal = tmp_path / "ledgers", tmp_path / "journal"
    port = free_port()
    dirs = ("--journal-dir", str(journal), "--storage", "disk")

    def bookie(name: str, *, port: int = port, start: bool = True) -> MagnetarProcess:
        return group.bookie(name, zookeeper_url, data, *dirs, "--port", str(port), start=start)

    first = bookie("first")
    bookie_id = f"127.0.0.1:{port}"
    assert first.ready["bookieId"] == bookie_id
    cookie = json.loads((data / COOKIE_FILE_NAME).read_text())
    assert cookie["bookieId"] == bookie_id
    assert cookie == json.loads((journal / COOKIE_FILE_NAME).read_text())
    assert first.stop() == 0

    again = bookie("restarted")  # a restart finds its cookies
    assert again.ready["bookieId"] == bookie_id
    assert "cookies match" in again.log_path.read_text()
    assert again.stop() == 0

    log = refused(bookie("moved", port=free_port(), start=False))
    assert "bookie refused to start" in log
    assert f"bookie id '{bookie_id}' in the cookie" in log
    assert "address or port changed" in log

    shutil.rmtree(data)  # the ledger volume is wiped (or replaced by an empty one)
    log = refused(bookie("wiped", start=False))
    assert "bookie refused to start" in log
    assert f"a bookie with id {bookie_id} existed" in log
    assert f"ledger directory {data} has no cookie: its data is gone" in log
    assert f"magnetar admin bookies decommission {bookie_id}" in log
    assert "magnetar bookie --format --force" in log
    assert not (data / COOKIE_FILE_NAME).exists()  # the refused start wrote nothing

    format_args = [
        "bookie", "--format", "--metadata-url", zookeeper_url, "--data-dir", str(data), *dirs,
        "--port", str(port), "--advertised-address", "127.0.0.1",
    ]  # fmt: skip
    log = refused(group.add("format-without-force", format_args, start=False))
    assert "bookie refused to format" in log
    assert f"{journal} (" in log  # the journal still holds its files
    assert "Add --force" in log

    formatted = group.add("format", [*format_args, "--force"])
    assert formatted.wait() == 0
    assert formatted.ready["event"] == "bookie-formatted"
    assert formatted.ready["bookieId"] == bookie_id
    assert formatted.ready["cookieDeleted"] is True
    assert formatted.ready["deleted"][str(journal)] >= 2  # its cookie and journal files
    assert list(journal.iterdir()) == []

    new = bookie("new")  # accepted as a new bookie, under the same id
    assert new.ready["bookieId"] == bookie_id
    assert "new bookie, cookie written" in new.log_path.read_text()
    assert json.loads((data / COOKIE_FILE_NAME).read_text())["bookieId"] == bookie_id
    assert new.stop() == 0
