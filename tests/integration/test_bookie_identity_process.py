"""Bookie identity with real ``magnetar bookie`` processes and ZooKeeper: the cookie written at the first
start is reused by a restart; a bookie whose ledger directory was wiped, or whose port changed once it held
ledger data, is refused with a message that says what to do and a non-zero exit; ``--format`` (with
``--force`` once there is data) lets it start again as a new bookie under the same id. A bookie whose
directories never held ledger data takes the id of its new port; a taken HTTP port fails the start before
any cookie is written."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import trio
from fixtures.processes import MagnetarProcess, ProcessFailedError, ProcessGroup

from magnetar.bookkeeper.bookie.cookie import COOKIE_FILE_NAME
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store

pytestmark = pytest.mark.processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def write_an_entry(metadata_url: str) -> None:
    """Add one entry to a new ledger on the cluster's bookie (E = W = A = 1), through a real client."""

    async def write() -> None:
        settings = ClientSettings(ensemble_size=1, write_quorum=1, ack_quorum=1)
        async with (
            open_metadata_store(metadata_url) as metadata,
            open_tcp_transport() as transport,
            open_bookkeeper(metadata, transport, settings) as bk,
        ):
            handle = await bk.create_ledger(ensemble_size=1, write_quorum=1, ack_quorum=1, password=b"pw")
            assert await handle.add_entry(b"stored") == 0
            await handle.close()

    trio.run(write)


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
    write_an_entry(zookeeper_url)  # it holds ledger data from here on
    cookie = json.loads((data / COOKIE_FILE_NAME).read_text())
    assert cookie["bookieId"] == bookie_id
    assert cookie == json.loads((journal / COOKIE_FILE_NAME).read_text())
    assert first.stop() == 0

    again = bookie("restarted")  # a restart finds its cookies
    assert again.ready["bookieId"] == bookie_id
    assert "cookies match" in again.log_path.read_text()
    assert again.stop() == 0

    moved_port = free_port()
    log = refused(bookie("moved", port=moved_port, start=False))
    assert "bookie refused to start" in log
    assert f"bookie id '{bookie_id}' in the cookie" in log
    assert "address or port changed" in log
    assert f"magnetar admin bookies decommission {bookie_id}`" in log  # the id that holds the data
    assert f"decommission 127.0.0.1:{moved_port}" not in log

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


def test_a_bookie_that_never_held_data_takes_its_new_ports_id(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    group = magnetar_processes
    data = tmp_path / "ledgers"

    def bookie(name: str, port: int) -> MagnetarProcess:
        return group.bookie(name, zookeeper_url, data, "--storage", "disk", "--port", str(port))

    first_port, second_port = free_port(), free_port()
    first = bookie("first", first_port)
    assert first.stop() == 0
    second = bookie("second", second_port)  # nothing was stored under the first id: nothing to lose
    assert second.ready["bookieId"] == f"127.0.0.1:{second_port}"
    log = second.log_path.read_text()
    assert f"hold the cookie of bookie 127.0.0.1:{first_port} but never held ledger data" in log
    assert json.loads((data / COOKIE_FILE_NAME).read_text())["bookieId"] == f"127.0.0.1:{second_port}"
    assert second.stop() == 0
    back = bookie("back", first_port)  # the first id's cookie is still in ZooKeeper, and equal: back to it
    assert back.ready["bookieId"] == f"127.0.0.1:{first_port}"
    assert back.stop() == 0


def test_a_taken_http_port_fails_the_bookie_before_its_cookie_is_written(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data = tmp_path / "ledgers"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        http_port = holder.getsockname()[1]
        process = magnetar_processes.bookie(
            "taken", zookeeper_url, data, "--storage", "disk", "--port", str(free_port()),
            "--http-port", str(http_port), start=False,
        )  # fmt: skip
        log = refused(process)
    assert (
        f"bookie HTTP cannot listen on 127.0.0.1:{http_port}: the port is already in use by pid {os.getpid()}"
        in log
    )
    assert "choose another port with --http-port or MAGNETAR_HTTP_PORT" in log
    assert not (data / COOKIE_FILE_NAME).exists()
