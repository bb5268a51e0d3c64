"""The README's "Common tasks", pasted as a newcomer would: its shell lines (curl and ``magnetar admin``) and
its WebSocket snippet run against a real standalone with the shipped defaults, and each has the effect the
README says. (The token snippet runs in ``test_secure_standalone.py``, whose standalone has authentication
on.)"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket
from fixtures.processes import MagnetarProcess
from fixtures.readme import pointed_at, readme_blocks
from fixtures.standalone_process import running_standalone

pytestmark = [pytest.mark.processes]

SECTION = "Common tasks"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("readme")) as process:
        yield process


def _get(process: MagnetarProcess, path: str) -> Any:
    response = httpx.get(f"{process.ready['httpUrl']}/admin/v2/{path}", timeout=10)
    response.raise_for_status()
    return response.json()


def test_the_shell_lines_run_and_set_what_they_say(standalone: MagnetarProcess, tmp_path: Path) -> None:
    (block,) = readme_blocks(SECTION, "sh")
    url = str(standalone.ready["httpUrl"])
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the venv's magnetar
        "MAGNETAR_ADMIN_URL": url,
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", pointed_at(block, url)],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert _get(standalone, "namespaces/public/default/retention") == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 1024,
    }
    assert _get(standalone, "persistent/public/default/orders/retention") == {
        "retentionTimeInMinutes": 1440,
        "retentionSizeInMB": 10240,
    }
    assert _get(standalone, "namespaces/public/default/messageTTL") == 2 * 24 * 3600
    assert _get(standalone, "namespaces/public/default/maxConsumersPerTopic") == 100
    assert "audit" in _get(standalone, "persistent/public/default/orders/subscriptions")
    assert '"subscriptions"' in run.stdout  # the stats the create-subscription lines print
    assert _get(standalone, "namespaces/public/default/deduplication") is True
    assert _get(standalone, "namespaces/public/default/delayedDelivery") == {
        "active": True,
        "tickTime": 1000,
        "maxDeliveryDelayInMillis": 86_400_000,
    }
    assert _get(standalone, "namespaces/public/default/publishRate") == {
        "publishThrottlingRateInMsg": 1000,
        "publishThrottlingRateInByte": -1,
    }
    assert _get(standalone, "namespaces/public/default/dispatchRate") == {
        "dispatchThrottlingRateInMsg": 500,
        "dispatchThrottlingRateInByte": -1,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    }


def test_the_websocket_snippet_opens_each_subscription_type_and_a_reader(standalone: MagnetarProcess) -> None:
    block = readme_blocks(SECTION, "python")[0]
    ws_url = str(standalone.ready["httpUrl"]).replace("http://", "ws://", 1)
    producer = websocket.create_connection(f"{ws_url}/ws/v2/producer/persistent/public/default/orders")
    producer.send(json.dumps({"payload": base64.b64encode(b"first").decode()}))
    assert json.loads(producer.recv())["result"] == "ok"
    producer.close()
    names: dict[str, Any] = {}
    exec(compile(pointed_at(block, str(standalone.ready["httpUrl"])), "README.md", "exec"), names)
    try:
        stats = _get(standalone, "persistent/public/default/orders/stats")["subscriptions"]
        types = {name: stats[name]["type"] for name in ("workers", "by-key", "standby")}
        assert types == {"workers": "Shared", "by-key": "Key_Shared", "standby": "Failover"}
        first = json.loads(names["reader"].recv())
        assert base64.b64decode(first["payload"]) == b"first"  # the reader starts at the earliest message
    finally:
        for name in ("workers", "by_key", "standby", "reader"):
            names[name].close()


def test_the_delayed_and_deduplicated_snippet(
    standalone: MagnetarProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the shell lines (deduplication on): the message sent twice is stored once, and reaches the
    Shared subscription no earlier than its delay."""
    block = readme_blocks(SECTION, "python")[1]
    names: dict[str, Any] = {}
    started = time.monotonic()
    exec(compile(pointed_at(block, str(standalone.ready["httpUrl"])), "README.md", "exec"), names)
    elapsed = time.monotonic() - started
    try:
        assert capsys.readouterr().out.splitlines() == ["ok", "ok", "b'remind me'"]
        assert elapsed >= 1.5  # not delivered before its time
        names["reminders"].settimeout(3)
        with pytest.raises(websocket.WebSocketTimeoutException):
            names["reminders"].recv()  # the copy sent again was not stored
    finally:
        names["reminders"].close()
        names["producer"].close()
