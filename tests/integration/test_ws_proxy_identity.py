"""The owner proxy under authentication as shipped: ``magnetar dev-cluster --authentication-enabled`` with two
brokers (their role ``broker`` is no superuser), clients on the broker that does not own the topic.

* A consume role cannot reach a subscription restricted to another role (``permissionOnSubscription``)
  through the non-owner with request targets a library would never send (a literal ``#``, a raw space):
  they are refused 400 with the character named; an encoded ``%23`` opens the subscription of that name on
  the owner, never the restricted one.
* The owner authorizes the client's own role: after a move, a session whose role lost its permission, or
  whose token expired, is refused by the new owner and ends with 1008 and the owner's reason.
* Ordinary sessions on a non-owner work and survive a move (before, the owner refused the broker's role 403).
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.dev_cluster import start_dev_cluster_command
from fixtures.processes import ProcessGroup
from fixtures.proxy_identity import (
    TENANT_NS,
    VICTIM_SUBSCRIPTION,
    SecureCluster,
    Session,
    attack,
    consumer_target,
    open_raw,
    publish,
    set_up,
)

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(300)]


BOOKIE_HTTP_PORTS: list[int] = []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    root = tmp_path_factory.mktemp("proxy-identity")
    group = ProcessGroup(root)
    try:
        flags = ("--zk", "1", "--bookies", "2", "--brokers", "2", "--authentication-enabled")
        process = start_dev_cluster_command(group, root / "dev", *flags)
        ready = process.ready
        secure = SecureCluster(
            brokers=[str(b["httpUrl"]) for b in ready["brokers"]],
            admin_token=Path(str(ready["adminTokenFile"])).read_text().strip(),
            key_file=str(root / "dev" / "security" / "secret.key"),
        )
        BOOKIE_HTTP_PORTS[:] = [int(b["httpPort"]) for b in ready["bookies"]]
        set_up(secure, "identity", messages=5)
        yield secure
    finally:
        group.stop_all()


def test_a_consume_role_cannot_use_another_roles_subscription_through_a_non_owner(
    cluster: SecureCluster,
) -> None:
    results = attack(cluster, "identity")
    assert results["fragment"]["status"] == 400
    assert "'#' (%23) at offset" in results["fragment"]["reason"]
    assert "percent-encode it" in results["fragment"]["reason"]
    assert results["fragment-in-query"]["status"] == 400
    assert results["raw-space"]["status"] == 400
    assert "a space (%20) at offset" in results["raw-space"]["reason"]
    assert results["direct"]["status"] == 403
    assert "thief" in results["direct"]["reason"]
    # "locked%23x" names another subscription, "locked#x": the owner opens that one, nothing of "locked"
    assert results["encoded-hash"]["status"] == 101
    assert results["encoded-hash"]["read"] == 0
    assert results["encoded-hash"]["unsubscribed"]
    subscriptions = cluster.subscriptions("identity")
    assert VICTIM_SUBSCRIPTION in subscriptions
    assert subscriptions[VICTIM_SUBSCRIPTION]["msgBacklog"] == 5  # nothing read, acked or unsubscribed
    # the victim still reads its subscription through the same non-owner
    victim = open_raw(
        cluster.non_owner("identity"),
        consumer_target("identity", VICTIM_SUBSCRIPTION),
        cluster.token("victim"),
    )
    try:
        assert victim.status == 101, victim.reason
        texts: list[str] = []
        while len(texts) < 5:
            more, closed = victim.read(20)
            assert closed is None
            texts += more
        payloads = sorted(base64.b64decode(json.loads(t)["payload"]).decode() for t in texts)
        assert payloads == [f"secret-{i}" for i in range(5)]
    finally:
        victim.close()


def read_until_closed(session: Session, timeout_s: float) -> tuple[int | None, list[str]]:
    texts: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        more, closed = session.read(min(1.0, max(0.0, deadline - time.monotonic())))
        texts += more
        if closed is not None:
            return closed, texts
    return None, texts


def test_the_owner_authorizes_the_clients_own_role_when_the_session_follows_a_move(
    cluster: SecureCluster,
) -> None:
    topic = "follow-revoked"
    cluster.admin("PUT", f"/admin/v2/persistent/{TENANT_NS}/{topic}").raise_for_status()
    permissions = f"/admin/v2/namespaces/{TENANT_NS}/permissions"
    cluster.admin("POST", f"{permissions}/revoked", ["consume"]).raise_for_status()
    expires_at = time.time() + 8
    expiring = open_raw(
        cluster.non_owner(topic), consumer_target(topic, "exp"), cluster.token("app", expires_in_s=8)
    )
    revoked = open_raw(cluster.non_owner(topic), consumer_target(topic, "rev"), cluster.token("revoked"))
    try:
        assert (expiring.status, revoked.status) == (101, 101), (expiring.reason, revoked.reason)
        cluster.admin("DELETE", f"{permissions}/revoked").raise_for_status()
        deadline = time.monotonic() + 30
        while True:  # until the owner's policies say so (they follow the metadata store)
            probe = open_raw(cluster.owner(topic), consumer_target(topic, "rev"), cluster.token("revoked"))
            probe.close()
            if probe.status == 403 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert probe.status == 403
        while time.time() < expires_at + 1.5:
            time.sleep(0.2)  # the expiring token is past its exp now (whole seconds)
        cluster.unload(topic)
        for session, status in ((revoked, "403"), (expiring, "401")):
            closed, _ = read_until_closed(session, 60)
            assert closed == 1008, (status, closed, session.close_reason)
            assert session.close_reason.startswith(f"Refused after the topic moved: {status} "), (
                session.close_reason
            )
    finally:
        expiring.close()
        revoked.close()


def test_sessions_on_a_non_owner_work_with_the_shipped_settings_and_survive_a_move(
    cluster: SecureCluster,
) -> None:
    topic = "shipped"
    cluster.admin("PUT", f"/admin/v2/persistent/{TENANT_NS}/{topic}").raise_for_status()
    url = cluster.non_owner(topic)
    token = cluster.token("app")
    consumer = open_raw(url, consumer_target(topic, "app-sub"), token)
    producer = open_raw(url, f"/ws/v2/producer/persistent/{TENANT_NS}/{topic}?token={token}", None)
    try:
        assert (consumer.status, producer.status) == (101, 101), (consumer.reason, producer.reason)
        received: list[str] = []

        def send(first: int, count: int) -> None:
            publish(producer, [f"m-{index}" for index in range(first, first + count)])

        def receive(total: int) -> None:
            deadline = time.monotonic() + 60
            while len(received) < total and time.monotonic() < deadline:
                more, closed = consumer.read(1)
                assert closed is None, closed
                for text in more:
                    message = json.loads(text)
                    received.append(base64.b64decode(message["payload"]).decode())
                    consumer.send_text(json.dumps({"messageId": message["messageId"]}))

        send(0, 10)
        receive(10)
        cluster.unload(topic)
        send(10, 10)
        receive(20)
        assert sorted(set(received), key=lambda m: int(m[2:])) == [f"m-{i}" for i in range(20)]
    finally:
        consumer.close()
        producer.close()


def test_partitioned_sessions_are_fanned_out_with_the_clients_own_token(cluster: SecureCluster) -> None:
    """A partitioned topic of 4 partitions on two brokers: whichever broker owns which partitions, the
    producer or the consumer (or both) is fanned out. Each partition's upstream session (this broker's own
    through a loopback session) carries the client's token, so the client's grants decide."""
    topic = "fanned"
    answer = cluster.admin("PUT", f"/admin/v2/persistent/{TENANT_NS}/{topic}/partitions", 4)
    assert answer.status_code == 204, answer.text
    for index in range(4):
        cluster.owner(f"{topic}-partition-{index}")  # placed now, by the leader
    token = cluster.token("app")
    consumer = open_raw(cluster.brokers[1], consumer_target(topic, "fan-sub"), token)
    producer = open_raw(cluster.brokers[0], f"/ws/v2/producer/persistent/{TENANT_NS}/{topic}", token)
    thief = open_raw(cluster.brokers[1], consumer_target(topic, VICTIM_SUBSCRIPTION), cluster.token("thief"))
    try:
        assert (consumer.status, producer.status) == (101, 101), (consumer.reason, producer.reason)
        assert thief.status == 403, thief.reason
        publish(producer, [f"p-{index}" for index in range(12)])
        received: list[str] = []
        deadline = time.monotonic() + 60
        while len(received) < 12 and time.monotonic() < deadline:
            more, closed = consumer.read(1)
            assert closed is None, closed
            received += [base64.b64decode(json.loads(text)["payload"]).decode() for text in more]
        assert sorted(received) == sorted(f"p-{index}" for index in range(12))
    finally:
        consumer.close()
        producer.close()


@pytest.mark.parametrize("port_kind", ["broker", "bookie HTTP"])
def test_every_port_answers_a_raw_space_or_a_fragment_400_naming_the_character(
    cluster: SecureCluster, port_kind: str
) -> None:
    """Plain requests and upgrades alike, before authentication (the target is wrong whoever asks)."""
    port = cluster.brokers[0] if port_kind == "broker" else f"http://127.0.0.1:{BOOKIE_HTTP_PORTS[0]}"
    for target, named in (("/metrics x", "a space (%20) at offset 8"), ("/ws/v2/consumer/a#b", "'#' (%23)")):
        for upgrade in (False, True):
            answer = raw_request(port, target, upgrade)
            assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
            reason = json.loads(answer.partition(b"\r\n\r\n")[2])["reason"]
            assert reason.startswith("Invalid request target: "), reason
            assert named in reason, reason
            assert "percent-encode it" in reason


def raw_request(url: str, target: str, upgrade: bool) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = f"GET {target} HTTP/1.1\r\nHost: {host}\r\n"
    if upgrade:
        head += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        head += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall((head + "\r\n").encode())
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data
