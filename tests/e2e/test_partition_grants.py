"""Partitions and grants, on a real broker with authentication on (WebSocket API, lookup, admin API).

The audit found that a grant on topic ``solo`` also covered ``solo-partition-N`` for any N (a topic that only
looks like a partition of ``solo``), that partitions beyond a partitioned topic's count were auto-created
(``solo-partition-2147483647``), and that a consume-only role created ``part-partition-7`` of a 3-partition
topic. Now a grant on a topic covers ``<topic>-partition-<i>`` only while the topic is partitioned with more
than ``i`` partitions, and a partition beyond the count names no topic: 404 on the WebSocket API, lookup and
the admin API (412 for creating it), and nothing is created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.auth import TokenKeys
from fixtures.broker import Broker, Cluster

ROOT, SOLO_APP, PART_READER, NS_READER = "root", "solo-app", "part-reader", "ns-reader"
NS = "acme/ns"
TOPICS = f"/admin/v2/persistent/{NS}"


class Client:
    def __init__(self, broker: Broker, keys: TokenKeys) -> None:
        self.broker = broker
        self.keys = keys
        self.http = httpx.Client(base_url=broker.http_url, timeout=30)
        self.subscriptions = 0

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys.token(role)}"}

    def call(self, method: str, url: str, role: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, url, headers=self.headers(role), **kwargs)

    def ok(self, method: str, url: str, **kwargs: Any) -> None:
        response = self.call(method, url, ROOT, **kwargs)
        assert response.status_code < 300, (method, url, response.status_code, response.text)

    def ws_status(self, path: str, role: str) -> int:
        """The answer to a WebSocket upgrade: 101 when accepted (the session is closed at once)."""
        try:
            ws = websocket.create_connection(
                f"{self.broker.ws_url}{path}",
                timeout=10,
                header=[f"Authorization: Bearer {self.keys.token(role)}"],
            )
        except websocket.WebSocketBadStatusException as exc:
            return int(exc.status_code)
        ws.close()
        return 101

    def producer(self, local: str, role: str) -> int:
        return self.ws_status(f"/ws/v2/producer/persistent/{NS}/{local}", role)

    def consumer(self, local: str, role: str) -> int:
        # A subscription of its own each time: the previous session may still hold an exclusive one (409).
        self.subscriptions += 1
        return self.ws_status(f"/ws/v2/consumer/persistent/{NS}/{local}/sub-{self.subscriptions}", role)

    def reader(self, local: str, role: str) -> int:
        return self.ws_status(f"/ws/v2/reader/persistent/{NS}/{local}", role)

    def lookup(self, local: str, role: str) -> int:
        return self.call("GET", f"/lookup/v2/topic/persistent/{NS}/{local}", role).status_code

    def topics(self) -> list[str]:
        response = self.call("GET", TOPICS, ROOT)
        assert response.status_code == 200
        names: list[str] = response.json()
        return sorted(name.rsplit("/", 1)[1] for name in names)


@pytest.fixture
def client(cluster: Cluster, token_keys: TokenKeys) -> Iterator[Client]:
    broker = cluster.start_broker(
        extras=admin_extras,
        authentication_enabled=True,
        token_secret_key=token_keys.secret_setting,
        super_user_roles=ROOT,
    )
    client = Client(broker, token_keys)
    client.ok(
        "PUT",
        "/admin/v2/tenants/acme",
        json={"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]},
    )
    client.ok("PUT", f"/admin/v2/namespaces/{NS}")
    client.ok("PUT", f"{TOPICS}/solo")
    client.ok("POST", f"{TOPICS}/solo/permissions/{SOLO_APP}", json=["produce", "consume"])
    client.ok("PUT", f"{TOPICS}/part/partitions", json=3)
    client.ok("POST", f"{TOPICS}/part/permissions/{PART_READER}", json=["consume"])
    client.ok("POST", f"/admin/v2/namespaces/{NS}/permissions/{NS_READER}", json=["consume"])
    try:
        yield client
    finally:
        client.http.close()


def test_a_grant_on_a_non_partitioned_topic_does_not_cover_look_alike_names(client: Client) -> None:
    assert client.producer("solo", SOLO_APP) == 101
    assert client.consumer("solo", SOLO_APP) == 101
    look_alikes = ("solo-partition-0", "solo-partition-5", "solo-partition-2147483647")
    seen = {
        name: (
            client.producer(name, SOLO_APP),
            client.consumer(name, SOLO_APP),
            client.reader(name, SOLO_APP),
            client.lookup(name, SOLO_APP),
            client.call("GET", f"{TOPICS}/{name}/stats", SOLO_APP).status_code,
            client.call("PUT", f"{TOPICS}/{name}/subscription/sub", SOLO_APP).status_code,
        )
        for name in look_alikes
    }
    assert seen == dict.fromkeys(look_alikes, (403, 403, 403, 403, 403, 403))
    assert client.topics() == ["part-partition-0", "part-partition-1", "part-partition-2", "solo"]
    reason = client.call("GET", f"/lookup/v2/topic/persistent/{NS}/solo-partition-5", SOLO_APP).json()[
        "reason"
    ]
    assert "solo-partition-5" in reason


def test_a_grant_on_a_partitioned_topic_covers_exactly_its_partitions(client: Client) -> None:
    assert client.consumer("part", PART_READER) == 101
    assert [client.consumer(f"part-partition-{i}", PART_READER) for i in range(3)] == [101, 101, 101]
    assert [client.lookup(f"part-partition-{i}", PART_READER) for i in range(3)] == [200, 200, 200]
    beyond = ("part-partition-3", "part-partition-7", "part-partition-2147483647")
    assert [client.consumer(name, PART_READER) for name in beyond] == [403, 403, 403]
    assert [client.lookup(name, PART_READER) for name in beyond] == [403, 403, 403]
    permissions = client.call("GET", f"{TOPICS}/part-partition-7/permissions", ROOT).json()
    assert PART_READER not in permissions
    assert client.call("GET", f"{TOPICS}/part-partition-1/permissions", ROOT).json()[PART_READER] == [
        "consume"
    ]
    # Growing the topic brings the new partitions under the grant.
    client.ok("POST", f"{TOPICS}/part/partitions", json=8)
    assert client.consumer("part-partition-7", PART_READER) == 101


def test_partitions_beyond_the_count_are_refused_and_never_created(client: Client) -> None:
    name = "part-partition-7"
    # A role whose namespace grant lets it through authorization meets the missing topic.
    assert client.consumer(name, NS_READER) == 404
    assert client.reader(name, NS_READER) == 404
    assert client.lookup(name, NS_READER) == 404
    assert client.producer(name, ROOT) == 404
    assert client.consumer("part-partition-2147483647", ROOT) == 404
    assert client.lookup(name, ROOT) == 404
    assert client.call("GET", f"/lookup/v2/topic/persistent/{NS}/{name}/bundle", ROOT).status_code == 404
    assert client.call("GET", f"{TOPICS}/{name}/stats", ROOT).status_code == 404
    assert client.call("PUT", f"{TOPICS}/{name}/subscription/sub", ROOT).status_code == 404
    created = client.call("PUT", f"{TOPICS}/{name}", ROOT)
    assert created.status_code == 412
    assert created.json()["reason"] == (
        f"Can't create topic persistent://{NS}/{name}: persistent://{NS}/part has 3 partitions (0 to 2)"
    )
    assert client.topics() == ["part-partition-0", "part-partition-1", "part-partition-2", "solo"]
    # A name that only looks like a partition of a non-partitioned topic is an ordinary topic of its own.
    assert client.producer("solo-partition-9", ROOT) == 101
    assert "solo-partition-9" in client.topics()
