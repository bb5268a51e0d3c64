"""The real ``magnetar bookie --storage memory`` process: find its port, talk to it, SIGTERM it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from fixtures.bookie_server import add_request, call, packaged, read_request

from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.protocol.messages import AddResponse, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus

pytestmark = pytest.mark.processes


async def _ready_line(process: trio.Process) -> dict[str, object]:
    assert process.stdout is not None
    buffered = b""
    with trio.fail_after(30):
        while b"\n" not in buffered:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, "the bookie exited before it was ready"
            buffered += chunk
    document: dict[str, object] = json.loads(buffered.split(b"\n", 1)[0])
    return document


async def test_bookie_process_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port_file = tmp_path / "bookie.json"
    stderr_path = tmp_path / "bookie.log"
    command = [
        sys.executable, "-m", "magnetar.admin.cli", "bookie",
        "--metadata-url", "memory://", "--storage", "memory", "--data-dir", str(tmp_path),
        "--bind", "127.0.0.1", "--advertised-address", "127.0.0.1", "--port", "0",
        "--port-file", str(port_file), "--http-port", "0",
    ]  # fmt: skip
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=stderr)
    try:
        ready = await _ready_line(process)
        assert ready["event"] == "bookie-ready"
        port = ready["port"]
        assert isinstance(port, int)
        assert port > 0
        assert json.loads(port_file.read_text()) == ready
        bookie_id = f"127.0.0.1:{port}"
        assert ready["bookieId"] == bookie_id

        async with open_tcp_transport() as transport:
            added = await call(transport, bookie_id, add_request(1, 0))
            assert isinstance(added, AddResponse)
            assert added.status is BookieStatus.EOK
            read = await call(transport, bookie_id, read_request(1, 0))
            assert isinstance(read, ReadResponse)
            assert (read.status, read.body) == (BookieStatus.EOK, packaged(1, 0))

        http_port = ready["httpPort"]
        assert isinstance(http_port, int)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as http:
            assert (await http.get("/api/v1/bookie/is_ready")).status_code == 200
            state = (await http.get("/api/v1/bookie/state")).json()
            assert state == {
                "running": True,
                "readOnly": False,
                "shuttingDown": False,
                "availableForHighPriorityWrites": True,
            }
            metrics = (await http.get("/metrics")).text
            assert 'bookkeeper_server_ADD_ENTRY_REQUEST_count{success="true"} 1.0' in metrics

        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            code = await process.wait()
        log = stderr_path.read_text()
        assert code == 0, log
        assert "received SIGTERM" in log
        assert "unregistered /ledgers/available/" in log
        assert "exited cleanly" in log
        assert not port_file.exists()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


async def test_bookie_process_with_bad_settings_exits_with_a_reason(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "magnetar.admin.cli", "bookie", "--port", "70000"]
    result = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 2
    assert b"invalid BookieProcessSettings" in result.stderr  # the bookie's own and its AutoRecovery's
    assert b"port" in result.stderr
