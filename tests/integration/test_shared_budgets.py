"""What the sessions and requests of a port share - received WebSocket bytes, request-body bytes,
connections and file descriptors - attacked through a real ``magnetar standalone`` with authentication on
and the shipped settings, by a consume-only role of tenant ``acme``; the victim is tenant ``beta``'s admin.
The server's memory is read from ``/proc/<pid>/status``; tests/bench/RESULTS.md has the figures before and
after the bounds.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websocket
from fixtures import ws_attacks as attacks
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess, ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

HOST = "127.0.0.1"
MIB = 1 << 20
WS_BUDGET_MIB = 128
"""The shipped ``ws_received_bytes_in_flight_max``."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Secured:
    process: MagnetarProcess
    url: str
    admin: str
    reader: str
    """Token of role ``reader``: ``consume`` on ``acme/orders``, nothing else."""
    beta: str
    """Token of role ``beta-admin``: admin of tenant ``beta``."""

    @property
    def port(self) -> int:
        return int(self.process.ready["port"])


def start_secured(group: ProcessGroup, tmp: Path, keys: TokenKeys, name: str) -> Secured:
    key = tmp / "secret.key"
    key.write_bytes(keys.secret)
    process = group.add(
        name,
        [
            "standalone", "--data-dir", str(tmp / name), "--http-port", "0",
            "--bookie-port", str(free_port()),
            "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
        ],
    )  # fmt: skip
    secured = Secured(
        process,
        str(process.ready["httpUrl"]),
        keys.token("admin"),
        keys.token("reader"),
        keys.token("beta-admin"),
    )
    bearer = {"Authorization": f"Bearer {secured.admin}"}
    with httpx.Client(base_url=secured.url, headers=bearer, timeout=10) as http:
        for tenant, admins in (("acme", []), ("beta", ["beta-admin"])):
            body = {"adminRoles": admins, "allowedClusters": ["standalone"]}
            http.put(f"/admin/v2/tenants/{tenant}", json=body).raise_for_status()
        http.put("/admin/v2/namespaces/acme/orders").raise_for_status()
        http.put("/admin/v2/namespaces/beta/ns").raise_for_status()
        http.post("/admin/v2/namespaces/acme/orders/permissions/reader", json=["consume"]).raise_for_status()
    return secured


@pytest.fixture
def secured(magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys) -> Secured:
    return start_secured(magnetar_processes, tmp_path, token_keys, "secured")


@pytest.fixture
def beta_producer(secured: Secured) -> Iterator[websocket.WebSocket]:
    ws = websocket.create_connection(
        f"{secured.url.replace('http://', 'ws://')}/ws/v2/producer/persistent/beta/ns/victim",
        timeout=30,
        header=[f"Authorization: Bearer {secured.beta}"],
    )
    try:
        yield ws
    finally:
        ws.close()


def publish_s(producer: websocket.WebSocket) -> float:
    """Seconds one persistent publish took to be acknowledged (fails the test if it was not)."""
    started = time.monotonic()
    producer.send(json.dumps({"payload": base64.b64encode(b"victim").decode()}))
    answer = json.loads(producer.recv())
    assert answer["result"] == "ok", answer
    return time.monotonic() - started


def test_unfinished_messages_across_sessions_stay_within_the_ports_budget(
    secured: Secured, beta_producer: websocket.WebSocket
) -> None:
    """40 consumer sessions of a consume-only role, each parking an unfinished 5 MiB message, held 200 MiB
    (2,048 would hold 10 GiB): the port's received bytes are bounded by ``ws_received_bytes_in_flight_max``
    (the largest unfinished messages are dropped and their sessions closed with 1013), and tenant beta's
    publishes go on."""
    publish_s(beta_producer)
    paths = [
        attacks.ws_path("consumer", f"parked/sub{i}").replace("public/default", "acme/orders")
        for i in range(40)
    ]
    result = attacks.unfinished_messages(
        HOST,
        secured.port,
        secured.process.pid,
        paths,
        5 * MIB - 16,
        headers=[f"Authorization: Bearer {secured.reader}"],
        victim=lambda: publish_s(beta_producer),
    )
    print(result.line())
    assert secured.process.is_running(), secured.process.log_tail()
    closed = result.notes["closed"]
    assert isinstance(closed, dict)
    assert closed.get(1013, 0) >= 40 - WS_BUDGET_MIB // 5, result.line()
    assert result.growth_mib < WS_BUDGET_MIB + 40, result.line()
    victim_s = result.notes["victim_s"]
    assert isinstance(victim_s, float) and victim_s < 5, result.line()
    assert "ws_received_bytes_in_flight_max" in secured.process.log_tail(400)
    # Once the sessions are gone, their memory goes back to the system (malloc_trim after the burst).
    deadline = time.monotonic() + 10
    while attacks.rss_kib(secured.process.pid) > result.start_kib + 40 * 1024 and time.monotonic() < deadline:
        time.sleep(0.2)
    after_mib = (attacks.rss_kib(secured.process.pid) - result.start_kib) / 1024
    print(f"RSS after the sessions closed: +{after_mib:.0f} MiB")
    assert after_mib < 40
