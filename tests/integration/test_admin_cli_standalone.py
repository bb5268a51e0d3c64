"""``magnetar admin`` as a user runs it, against a running ``magnetar standalone`` (both real processes)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import websocket
from fixtures.processes import ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]
MAGNETAR = str(Path(sys.executable).with_name("magnetar"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def admin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MAGNETAR, "admin", "--admin-url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_admin_cli_against_standalone(magnetar_processes: ProcessGroup, tmp_path: Path) -> None:
    process = magnetar_processes.add(
        "standalone",
        [
            "standalone",
            "--data-dir",
            str(tmp_path / "data"),
            "--http-port",
            "0",
            "--bookie-port",
            str(free_port()),
        ],
    )
    url = str(process.ready["httpUrl"])
    retention = admin(url, "namespaces", "set-retention", "public/default", "--time", "1h", "--size", "1G")
    assert retention.returncode == 0, retention.stderr + process.log_tail()
    got = admin(url, "namespaces", "get-retention", "public/default")
    assert json.loads(got.stdout) == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}

    producer = websocket.create_connection(
        f"{url.replace('http://', 'ws://')}/ws/v2/producer/persistent/public/default/t", timeout=10
    )
    try:
        producer.send(json.dumps({"payload": base64.b64encode(b"hello").decode()}))
        assert json.loads(producer.recv())["result"] == "ok"
    finally:
        producer.close()
    stats = admin(url, "topics", "stats", "persistent://public/default/t")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["msgInCounter"] == 1
    table = admin(url, "--output", "table", "topics", "list", "public/default")
    assert table.stdout.splitlines() == ["VALUE", "persistent://public/default/t"]
    missing = admin(url, "topics", "stats", "persistent://public/default/none")
    assert missing.returncode == 1
    assert missing.stderr.strip().startswith("error: 404")
    bad = admin(url, "namespaces", "set-retention", "public/default", "--time", "0", "--size", "1G")
    assert bad.returncode == 1
    assert "412 Invalid retention policy" in bad.stderr
