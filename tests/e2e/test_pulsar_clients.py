"""Pulsar's admin clients against a real broker: the third-party PyPI ``pulsar-admin`` package (its own test
cases and its calls) and requests built exactly as the Java admin client builds them, read back as it reads
them (:mod:`fixtures.java_admin`).

Messages are published the ways Pulsar users publish them: one entry per message over Pulsar's WebSocket JSON
API, and a broker-side batch of several messages in one entry (``magnetar.v1``); the Java client must cut the
batch into messages with their own ids and properties.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster, publish
from fixtures.java_admin import EARLIEST, message_id_impl, messages_from_response
from pulsar_admin import (  # type: ignore[import-untyped]
    clusters_test,
    namespaces_test,
    persistent_topics_test,
    tenants_test,
)
from pulsar_admin.p_admin import PulsarAdmin  # type: ignore[import-untyped]

from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL, OutgoingMessage, encode_send, parse_receipt

NS = "public/default"
ADMIN = f"/admin/v2/persistent/{NS}"
Connect = Callable[..., websocket.WebSocket]


@pytest.fixture
def admin_broker(cluster: Cluster) -> Broker:
    return cluster.start_broker(extras=admin_extras)


def host_port(broker: Broker) -> tuple[str, int]:
    parts = urlsplit(broker.http_url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def raw(response: httpx.Response) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]


def test_the_pypi_clients_own_test_cases_pass(admin_broker: Broker) -> None:
    """``pulsar-admin``'s unittest cases, unchanged but for the address (they hard-code localhost:8080).
    One of them passes a topic name as ``includeSystemTopic``: JAX-RS reads it as false, so must we."""
    host, port = host_port(admin_broker)
    cases = [
        tenants_test.TestTenants,
        namespaces_test.TestNamespaces,
        persistent_topics_test.TestPersistentTopics,
        clusters_test.TestClusters,
    ]
    suite = unittest.TestSuite()
    for case in cases:
        for name in unittest.defaultTestLoader.getTestCaseNames(case):
            test = case(name)
            test.admin = PulsarAdmin(host, port)
            test.http_client = test.admin.http_client
            test.setUp = lambda: None  # type: ignore[method-assign]
            suite.addTest(test)
    result = unittest.TextTestRunner(verbosity=0).run(suite)
    assert result.testsRun == 6
    assert result.wasSuccessful(), [str(e) for _, e in result.errors + result.failures]


def test_the_pypi_clients_calls(admin_broker: Broker, ws_connect: Connect) -> None:
    host, port = host_port(admin_broker)
    admin = PulsarAdmin(host, port)
    assert "standalone" in admin.clusters.get_clusters()
    admin.tenants.create_tenant("acme", {"adminRoles": [], "allowedClusters": ["standalone"]})
    admin.tenants.update_tenant("acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    admin.namespaces.create_namespace("acme", "orders")
    assert admin.namespaces.get_namespaces("acme") == ["acme/orders"]
    assert admin.namespaces.get_namespace_policy("acme", "orders")["bundles"]["numBundles"] >= 1
    admin.persistent_topics.create_topic("acme", "orders", "plain", False, {"owner": "team"})
    admin.persistent_topics.create_partitioned_topic("acme", "orders", "parts", 2, False)
    assert admin.persistent_topics.get_partitioned_topic_list("acme", "orders") == [
        "persistent://acme/orders/parts"
    ]
    producer = ws_connect(f"{admin_broker.ws_url}/ws/v2/producer/persistent/acme/orders/plain")
    assert publish(producer, "x")["result"] == "ok"
    consumer = ws_connect(f"{admin_broker.ws_url}/ws/v2/consumer/persistent/acme/orders/plain/sub-1")
    assert admin.persistent_topics.get_subscription("acme", "orders", "plain") == ["sub-1"]
    consumer.close()
    producer.close()
    admin.persistent_topics.delete_topic("acme", "orders", "plain", True, False)
    admin.persistent_topics.delete_partitioned_topic("acme", "orders", "parts", False, False)
    assert admin.persistent_topics.get_partitioned_topic_list("acme", "orders") == []
    admin.namespaces.delete_namespace("acme", "orders")
    admin.tenants.delete_tenant("acme", False)
    assert "acme" not in admin.tenants.get_tenants()


def test_messages_read_as_the_java_client_reads_them(admin_broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{admin_broker.ws_url}/ws/v2/producer/persistent/{NS}/mixed")
    single = publish(producer, "one", key="k1", properties={"TraceId": "t-1"})
    assert single["result"] == "ok"
    batcher = ws_connect(
        f"{admin_broker.ws_url}/ws/v2/producer/persistent/{NS}/mixed", subprotocols=[SUBPROTOCOL]
    )
    messages = [
        OutgoingMessage(b"b0", key="ka", properties={"n": "0"}),
        OutgoingMessage(b"b1", properties={"n": "1"}),
        OutgoingMessage(b"b2", key="kc"),
    ]
    batcher.send_binary(encode_send(1, messages))
    frame = batcher.recv()
    assert isinstance(frame, bytes)
    ids = parse_receipt(frame).message_ids()
    assert len({(ledger, entry) for _, ledger, entry, _, _ in ids}) == 1  # one entry holds the three
    _, ledger, entry, _, size = ids[0]
    assert size == 3
    with httpx.Client(base_url=admin_broker.http_url, timeout=30) as http:
        # createSubscription(topic, "s", MessageId.earliest)
        created = http.put(f"{ADMIN}/mixed/subscription/s?replicated=false", json=message_id_impl(*EARLIEST))
        assert created.status_code == 204
        # getMessagesById(topic, ledger, entry): the batch, cut into messages with their own ids
        answer = http.get(f"{ADMIN}/mixed/ledger/{ledger}/entry/{entry}")
        batch = messages_from_response(answer.status_code, raw(answer), answer.content)
        assert [(m.ledger_id, m.entry_id, m.batch_index, m.payload) for m in batch] == [
            (ledger, entry, i, b"b%d" % i) for i in range(3)
        ]
        assert [(m.key, m.properties.get("n")) for m in batch] == [("ka", "0"), (None, "1"), ("kc", "1")]
        # peekMessages(topic, "s", 4): position 1, 2, ... until 4 messages are read; positions count
        # messages, as with one message per entry, each answered alone with its own id
        peeked = []
        position = 0
        while len(peeked) < 4:
            position += 1
            answer = http.get(f"{ADMIN}/mixed/subscription/s/position/{position}")
            peeked += messages_from_response(answer.status_code, raw(answer), answer.content)
        assert position == 4
        first = peeked[0]
        assert (first.payload, first.key, first.properties, first.batch_index) == (
            b"one",
            "k1",
            {"TraceId": "t-1"},
            -1,
        )
        assert [m.payload for m in peeked] == [b"one", b"b0", b"b1", b"b2"]
        assert [(m.entry_id, m.batch_index) for m in peeked[1:]] == [(entry, 0), (entry, 1), (entry, 2)]
        assert [(m.key, m.properties.get("n")) for m in peeked[1:]] == [
            ("ka", "0"),
            (None, "1"),
            ("kc", None),
        ]
        # examineMessage(topic, "latest", 1): the last message; (topic, "earliest", 2): the second - positions
        # count messages, as with one message per entry
        answer = http.get(f"{ADMIN}/mixed/examinemessage?initialPosition=latest&messagePosition=1")
        examined = messages_from_response(answer.status_code, raw(answer), answer.content)[0]
        assert (examined.entry_id, examined.batch_index, examined.payload) == (entry, 2, b"b2")
        answer = http.get(f"{ADMIN}/mixed/examinemessage?initialPosition=earliest&messagePosition=2")
        examined = messages_from_response(answer.status_code, raw(answer), answer.content)[0]
        assert (examined.entry_id, examined.batch_index, examined.payload) == (entry, 0, b"b0")
        # getList(namespace): persistent and non-persistent, both must answer
        persistent = http.get(f"/admin/v2/persistent/{NS}?includeSystemTopic=false")
        non_persistent = http.get(f"/admin/v2/non-persistent/{NS}?includeSystemTopic=false")
        assert (persistent.status_code, non_persistent.status_code) == (200, 200)
        assert "persistent://public/default/mixed" in {*persistent.json(), *non_persistent.json()}
        # brokers().getVersion(), getLeaderBroker(), getActiveBrokers()
        assert http.get("/admin/v2/brokers/version").status_code == 200
        broker_id = admin_broker.http_url.removeprefix("http://")
        assert http.get("/admin/v2/brokers/leaderBroker").json()["serviceUrl"] == admin_broker.http_url
        assert http.get("/admin/v2/brokers/standalone").json() == [broker_id]
        owned = http.get(f"/admin/v2/brokers/standalone/{broker_id}/ownedNamespaces").json()
        assert any(key.startswith("public/default/0x") for key in owned)
        assert http.get("/admin/v2/brokers/ready").text == "ok"
    batcher.close()
    producer.close()
