"""What the sessions and requests of a port share - received WebSocket bytes, request-body bytes,
connections and file descriptors - attacked through a real ``magnetar standalone`` with authentication on
and the shipped settings, by a consume-only role of tenant ``acme``; the victim is tenant ``beta``'s admin.
The server's memory is read from ``/proc/<pid>/status``; tests/bench/RESULTS.md has the figures before and
after the bounds.
"""

from __future__ import annotations

import base64
import json
import resource
import socket
import time
from collections.abc import Callable, Iterator
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


def start_secured(
    group: ProcessGroup, tmp: Path, keys: TokenKeys, name: str, limit: Callable[[], None] | None = None
) -> Secured:
    """A standalone with authentication, tenants ``acme`` (namespace ``acme/orders``, role ``reader`` may
    consume there) and ``beta`` (admin ``beta-admin``, namespace ``beta/ns``); ``limit`` runs in the child
    before it starts (a lower ``ulimit -n``)."""
    key = tmp / "secret.key"
    key.write_bytes(keys.secret)
    args = [
        "standalone", "--data-dir", str(tmp / name), "--http-port", "0",
        "--bookie-port", str(free_port()),
        "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
    ]  # fmt: skip
    process = MagnetarProcess(name, args, tmp, preexec_fn=limit)
    group.processes.append(process)
    process.start(timeout_s=60)
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
    assert isinstance(victim_s, float)
    assert victim_s < 5, result.line()
    assert "ws_received_bytes_in_flight_max" in secured.process.log_tail(400)
    # Once the sessions are gone, their memory goes back to the system (malloc_trim after the burst).
    deadline = time.monotonic() + 10
    while attacks.rss_kib(secured.process.pid) > result.start_kib + 40 * 1024 and time.monotonic() < deadline:
        time.sleep(0.2)
    after_mib = (attacks.rss_kib(secured.process.pid) - result.start_kib) / 1024
    print(f"RSS after the sessions closed: +{after_mib:.0f} MiB")
    assert after_mib < 40


@pytest.mark.parametrize(
    ("method", "path"),
    [("PUT", "/api/v1/autorecovery/decommission"), ("PUT", "/api/v1/autorecovery/bookie")],
)
def test_the_bookie_ports_autorecovery_routes_refuse_before_reading_a_body(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys, method: str, path: str
) -> None:
    """The bookie's HTTP port checked the caller of its AutoRecovery routes after reading the body: 20
    unauthenticated 10 MiB bodies were read (+64 MiB RSS) and held the port's body budget. Now they are
    answered 401 on their head, and the bodies stay unread."""
    key = tmp_path / "secret.key"
    key.write_bytes(token_keys.secret)
    bookie = magnetar_processes.bookie(
        "bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory", "--http-port", "0",
        "--authentication-enabled", "--token-secret-key", key.as_uri(), "--auth-allowed-roles", "broker",
        "--super-user-roles", "admin",
    )  # fmt: skip
    port = int(bookie.ready["httpPort"])
    result = attacks.bodies_before_auth(HOST, port, bookie.pid, 20, 10 * MIB, path=path, method=method)
    print(result.line())
    assert result.notes["answers"] == {"401": 20}, result.line()
    assert result.growth_mib < 20, result.line()
    body_sent = result.notes["body_bytes_sent_before_answer_max"]
    assert isinstance(body_sent, int)
    assert body_sent < 10 * MIB, result.line()
    assert bookie.is_running(), bookie.log_tail()


def slow_bodies(port: int, token: str, path: str, sizes: list[int]) -> list[socket.socket]:
    """One connection per size: a request announcing a body of that size, of which 64 KiB are sent; the
    rest never comes (the server holds the budget for it until the request's deadline)."""
    socks = []
    for size in sizes:
        sock = socket.create_connection((HOST, port), timeout=10)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
        )
        sock.sendall(head.encode() + b" " * 65536)
        socks.append(sock)
    return socks


def test_one_role_cannot_hold_the_body_budget_with_slow_bodies(secured: Secured) -> None:
    """A consume-only role of tenant acme announced 64 MiB of bodies on 7 connections and sent them slowly:
    the port's budget was full and tenant beta's admin waited 29 s for its request's deadline. Now a role
    holds at most its share (``http_bodies_in_flight_bytes_per_role_max``, 16 MiB) and beta is served."""
    path = "/admin/v2/persistent/acme/orders/slow/subscription/s/resetcursor"
    socks = slow_bodies(secured.port, secured.reader, path, [10 * MIB] * 6 + [4 * MIB])
    try:
        time.sleep(1)  # the server has read the heads and taken what it grants
        started = time.monotonic()
        with httpx.Client(
            base_url=secured.url, headers={"Authorization": f"Bearer {secured.beta}"}, timeout=40
        ) as http:
            answer = http.post(
                "/admin/v2/namespaces/beta/ns/retention",
                json={"retentionTimeInMinutes": 5, "retentionSizeInMB": -1},
            )
        served_s = time.monotonic() - started
        print(f"tenant beta's admin call: {answer.status_code} in {served_s:.2f} s")
        assert answer.status_code == 204, answer.text
        assert served_s < 5
    finally:
        for sock in socks:
            sock.close()


def open_files_limit(soft: int, hard: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child ``ulimit -n`` ``soft`` (hard limit ``hard``)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def start_limited(group: ProcessGroup, tmp: Path, keys: TokenKeys, soft: int, hard: int) -> Secured:
    return start_secured(group, tmp, keys, "limited", open_files_limit(soft, hard))


def idle_connections(port: int, source: str, count: int) -> tuple[list[socket.socket], dict[str, int]]:
    """``count`` connections from address ``source`` that send nothing; the answers of those the server
    refused at once (429 per address, 503 for the process), by status."""
    socks: list[socket.socket] = []
    for _ in range(count):
        try:
            socks.append(socket.create_connection((HOST, port), timeout=10, source_address=(source, 0)))
        except OSError:
            break
    time.sleep(1.5)
    answers: dict[str, int] = {}
    for sock in socks:
        sock.setblocking(False)
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            continue  # accepted, idle
        except OSError:
            data = b""
        status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
        answers[status] = answers.get(status, 0) + 1
    return socks, answers


def test_idle_connections_cannot_starve_storage_of_descriptors(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """Under ``ulimit -n 1024``, about 1,000 idle connections from one address took every descriptor of the
    standalone: its journal could not open files, every persistent publish failed and 80 ledgers were made in
    a second. Now one address gets ``http_connections_per_ip_max`` connections (429 beyond), all addresses
    together what the limit leaves after the descriptors kept for storage (503 beyond), and tenant beta's
    persistent publishes from another address go on without a new ledger."""
    secured = start_limited(magnetar_processes, tmp_path, token_keys, 1024, 1024)
    assert "ulimit -n 1024" in secured.process.log_tail(400)  # http_connections_max=2048 cannot be honoured
    sock = socket.create_connection((HOST, secured.port), timeout=10, source_address=("127.0.0.2", 0))
    producer = websocket.create_connection(
        f"ws://{HOST}:{secured.port}/ws/v2/producer/persistent/beta/ns/victim",
        timeout=30,
        header=[f"Authorization: Bearer {secured.beta}"],
        socket=sock,
    )
    held: list[socket.socket] = []
    try:
        publish_s(producer)
        socks, from_one = idle_connections(secured.port, HOST, 1100)
        held += socks
        print(f"1,100 idle connections from {HOST}: refused {from_one}")
        # Beyond the 32 answered at once, refused connections are closed without an answer.
        assert set(from_one) <= {"429", "closed"}
        assert from_one.get("429", 0) > 0
        assert sum(from_one.values()) == 1100 - 256
        refused_from_many: dict[str, int] = {}
        for i in range(4):
            socks, from_many = idle_connections(secured.port, f"127.0.0.{10 + i}", 256)
            held += socks
            print(f"256 idle connections from 127.0.0.{10 + i}: refused {from_many}")
            for status, count in from_many.items():
                refused_from_many[status] = refused_from_many.get(status, 0) + count
        # All addresses together get what ulimit -n leaves after the descriptors kept for storage.
        assert refused_from_many.get("503", 0) > 0
        assert 256 + 4 * 256 - sum(refused_from_many.values()) <= 1024 - 256
        slowest = max(publish_s(producer) for _ in range(50))
        print(f"slowest of 50 persistent publishes under the attack: {slowest:.3f} s")
        assert slowest < 5
    finally:
        for idle in held:
            idle.close()
        producer.close()
    bearer = {"Authorization": f"Bearer {secured.admin}"}
    with httpx.Client(base_url=secured.url, headers=bearer, timeout=10) as http:
        stats = http.get("/admin/v2/persistent/beta/ns/victim/internalStats").json()
    print(f"ledgers of the victim's topic: {len(stats['ledgers'])}")
    assert len(stats["ledgers"]) == 1, stats
    assert "Too many open files" not in secured.process.log_tail(2000)
    assert secured.process.is_running()


def test_the_open_files_limit_is_raised_to_the_hard_limit_at_start(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    secured = start_limited(magnetar_processes, tmp_path, token_keys, 1024, 4096)
    log = secured.process.log_tail(400)
    assert "raised the open-files limit (ulimit -n) from 1024 to its hard limit 4096" in log
    assert "needs more file descriptors" not in log
