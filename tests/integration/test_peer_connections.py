"""Sessions proxied by a peer broker are not limited by the owner's per-address connection limit, on real
processes: a dev cluster with authentication (ZooKeeper, a bookie, two brokers whose role ``broker`` is no
superuser), each broker on an address of its own (127.0.0.2 and 127.0.0.3, as pods have), and a small
``http_connections_per_ip_max`` (4) so that a few sessions test the mechanism.

Through the broker that does not own the topic, 3x the limit of consumer sessions (clients from distinct
addresses) all open and all receive what is published: at the owner they all come from the peer's one
address. A client of its own beyond the limit still gets 429 from the owner, and from the non-owner too.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
import trio
from fixtures.dev_cluster import open_test_cluster
from fixtures.proxy_identity import (
    TENANT_NS,
    SecureCluster,
    Session,
    consumer_target,
    open_raw,
    publish,
    set_up,
)

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(300)]

BROKER_ADDRESSES = ("127.0.0.2", "127.0.0.3")
PER_ADDRESS = 4
"""``http_connections_per_ip_max`` of both brokers."""
TOPIC = "peers"


def first_payload(session: Session, timeout_s: float = 30) -> bytes | None:
    """The payload of the first message ``session`` receives within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        texts, closed = session.read(0.2)
        if texts:
            return base64.b64decode(json.loads(texts[0])["payload"])
        assert closed is None, (closed, session.close_reason)
    return None


def proxied_sessions_beyond_the_limit(cluster: SecureCluster) -> dict[str, object]:
    set_up(cluster, TOPIC, messages=0)
    owner = cluster.owner(TOPIC)
    non_owner = cluster.non_owner(TOPIC)
    assert owner != non_owner
    opened: list[Session] = []
    try:
        count = 3 * PER_ADDRESS
        statuses = []
        for index in range(count):  # each client from an address of its own: the non-owner lets them in
            session = open_raw(
                non_owner,
                consumer_target(TOPIC, f"sub-{index}"),
                cluster.token("app"),
                source=f"127.0.1.{index + 1}",
            )
            statuses.append((session.status, session.reason))
            if session.status == 101:
                opened.append(session)
        producer = open_raw(owner, f"/ws/v2/producer/persistent/{TENANT_NS}/{TOPIC}", cluster.token("app"))
        assert producer.status == 101, producer.reason
        publish(producer, ["hello"])
        producer.close()
        received = sum(first_payload(session) == b"hello" for session in opened)
        # A client of its own, from one address, beyond the limit: refused by the owner and by the non-owner.
        refusals: dict[str, list[tuple[int, str]]] = {}
        for name, url in (("owner", owner), ("non-owner", non_owner)):
            own = [
                open_raw(url, consumer_target(TOPIC, f"own-{name}-{i}"), cluster.token("app"), "127.0.0.4")
                for i in range(PER_ADDRESS + 1)
            ]
            refusals[name] = [(s.status, s.reason) for s in own]
            opened += own
        return {"statuses": statuses, "received": received, "refusals": refusals}
    finally:
        for session in opened:
            session.close()


async def test_sessions_proxied_by_a_peer_are_not_limited_per_address(tmp_path: Path) -> None:
    env = {"MAGNETAR_HTTP_CONNECTIONS_PER_IP_MAX": str(PER_ADDRESS)}
    async with open_test_cluster(
        tmp_path / "dev",
        bookies=1,
        brokers=2,
        authentication=True,
        broker_addresses=BROKER_ADDRESSES,
        broker_env=env,
    ) as dev:
        cluster = SecureCluster(
            brokers=dev.broker_urls,
            admin_token=dev.admin_token_file.read_text().strip(),
            key_file=str(dev.data_dir / "security" / "secret.key"),
        )
        outcome = await trio.to_thread.run_sync(proxied_sessions_beyond_the_limit, cluster)
        logs = [(dev.data_dir / "logs" / f"{name}.log").read_text() for name in dev.broker_names]
    print(json.dumps(outcome, indent=1))
    statuses = outcome["statuses"]
    assert statuses == [(101, "")] * (3 * PER_ADDRESS)
    assert outcome["received"] == 3 * PER_ADDRESS
    refusals = outcome["refusals"]
    assert isinstance(refusals, dict)
    for name in ("owner", "non-owner"):
        assert [status for status, _ in refusals[name]] == [101] * PER_ADDRESS + [429], name
        assert (
            f"too many connections from 127.0.0.4 (http_connections_per_ip_max={PER_ADDRESS})"
            in (refusals[name][-1][1])
        )
    for log in logs:
        assert "not counted against http_connections_per_ip_max=4" in log
