"""Namespace and topic policies against a real ``magnetar standalone``: set with the exact REST calls the
Java ``PulsarAdmin`` makes, and enforced on real clients - the official ``pulsar-client`` over the binary
protocol and the WebSocket API - including a change that reaches a loaded topic without an unload."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
import websocket
from fixtures.admin_http import Admin
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import running_standalone

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    checks = {"MAGNETAR_BROKER_DELETE_INACTIVE_TOPICS_FREQUENCY_S": "1"}  # inactive topics found in seconds
    with running_standalone(tmp_path_factory.mktemp("policies"), env=checks) as process:
        yield process


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def admin(standalone: MagnetarProcess) -> Admin:
    return Admin(standalone)


@pytest.fixture
def namespace(admin: Admin) -> str:
    name = f"public/pol-{uuid.uuid4().hex[:8]}"
    assert admin.call("PUT", f"/namespaces/{name}")[0] == 204
    return name


def ws_status(standalone: MagnetarProcess, path: str) -> int:
    """The status of a WebSocket upgrade (101 when accepted; the connection is closed again)."""
    try:
        ws = websocket.create_connection(f"ws://{HOST}:{standalone.ready['port']}/ws/v2/{path}", timeout=10)
    except websocket.WebSocketBadStatusException as exc:
        return int(exc.status_code)
    ws.close()
    return 101


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the policy change did not reach the topic"
        time.sleep(0.1)


def test_java_admin_bodies_round_trip(admin: Admin, namespace: str) -> None:
    ns = f"/namespaces/{namespace}"
    persistence = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
                   "managedLedgerMaxMarkDeleteRate": 0.0, "managedLedgerStorageClassName": None}  # fmt: skip
    inactive = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 60,
                "deleteWhileInactive": True}  # fmt: skip
    auto_topic = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    calls = {
        "persistence": persistence,
        "maxProducersPerTopic": 3,
        "maxConsumersPerTopic": 4,
        "maxConsumersPerSubscription": 5,
        "maxSubscriptionsPerTopic": 6,
        "maxUnackedMessagesPerConsumer": 7,
        "maxUnackedMessagesPerSubscription": 8,
        "inactiveTopicPolicies": inactive,
        "subscriptionExpirationTime": 9,
        "autoTopicCreation": auto_topic,
        "autoSubscriptionCreation": {"allowAutoSubscriptionCreation": False},
    }
    for path, body in calls.items():
        assert admin.call("POST", f"{ns}/{path}", body)[0] == 204, path
    status, policies = admin.call("GET", ns)
    assert status == 200
    assert policies["persistence"] == {
        k: v for k, v in persistence.items() if k != "managedLedgerStorageClassName"
    }
    assert policies["max_producers_per_topic"] == 3
    assert policies["max_consumers_per_topic"] == 4
    assert policies["max_consumers_per_subscription"] == 5
    assert policies["max_subscriptions_per_topic"] == 6
    assert policies["max_unacked_messages_per_consumer"] == 7
    assert policies["max_unacked_messages_per_subscription"] == 8
    assert policies["inactive_topic_policies"] == inactive
    assert policies["subscription_expiration_time_minutes"] == 9
    assert policies["autoTopicCreationOverride"] == auto_topic
    assert policies["autoSubscriptionCreationOverride"] == {"allowAutoSubscriptionCreation": False}
    assert admin.call("GET", f"{ns}/maxConsumersPerTopic") == (200, 4)
    for path in calls:
        assert admin.call("DELETE", f"{ns}/{path}")[0] == 204, path
        assert admin.call("GET", f"{ns}/{path}") == (204, None), path
    refused = admin.call("POST", f"{ns}/maxProducersPerTopic", -1)
    assert refused == (412, {"reason": "maxProducersPerTopic must be 0 or more"})
    bad_quorum = {**persistence, "bookkeeperAckQuorum": 2}
    assert admin.call("POST", f"{ns}/persistence", bad_quorum) == (
        400, {"reason": "Bookkeeper Ensemble (1) >= WriteQuorum (1) >= AckQuorum (2)"})  # fmt: skip


def test_max_producers_both_protocols_and_live_change(
    standalone: MagnetarProcess, admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    assert admin.call("POST", f"/namespaces/{namespace}/maxProducersPerTopic", 1)[0] == 204
    topic = f"persistent://{namespace}/prod"
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert ws_status(standalone, f"producer/persistent/{namespace}/prod") == 409
    # Raised while the topic is loaded (no unload): the next producer is let in.
    assert admin.call("POST", f"/namespaces/{namespace}/maxProducersPerTopic", 2)[0] == 204
    second: list[pulsar.Producer] = []

    def one_more() -> bool:
        try:
            second.append(client.create_producer(topic))
        except pulsar.ProducerBusy:
            return False
        return True

    eventually(one_more)
    # The topic's own policy overrides the namespace's.
    assert admin.call("POST", f"/persistent/{namespace}/prod/maxProducers", 3)[0] == 204
    assert admin.call("GET", f"/persistent/{namespace}/prod/maxProducers?applied=true") == (200, 3)
    eventually(lambda: ws_status(standalone, f"producer/persistent/{namespace}/prod") == 101)
    first.close()
    second[0].close()


def test_max_subscriptions_and_consumers(
    standalone: MagnetarProcess, admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    ns = f"/namespaces/{namespace}"
    assert admin.call("POST", f"{ns}/maxSubscriptionsPerTopic", 1)[0] == 204
    assert admin.call("POST", f"{ns}/maxConsumersPerSubscription", 1)[0] == 204
    topic = f"persistent://{namespace}/subs"
    shared = pulsar.ConsumerType.Shared
    first = client.subscribe(topic, "a", consumer_type=shared)
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(topic, "b", consumer_type=shared)
    assert ws_status(standalone, f"consumer/persistent/{namespace}/subs/b") == 500
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=shared)
    assert ws_status(standalone, f"consumer/persistent/{namespace}/subs/a?subscriptionType=Shared") == 409
    assert admin.call("POST", f"{ns}/maxConsumersPerTopic", 1)[0] == 204
    assert admin.call("DELETE", f"{ns}/maxConsumersPerSubscription")[0] == 204
    time.sleep(0.5)  # both changes reach the topic; the topic-wide bound now refuses
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "a", consumer_type=shared)
    first.close()


def test_auto_creation_overrides(
    standalone: MagnetarProcess, admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    ns = f"/namespaces/{namespace}"
    existing = f"persistent://{namespace}/existing"
    client.subscribe(existing, "known").close()
    assert admin.call("POST", f"{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})[0] == 204
    assert (
        admin.call("POST", f"{ns}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False})[0]
        == 204
    )
    time.sleep(0.5)
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{namespace}/missing")
    assert ws_status(standalone, f"producer/persistent/{namespace}/missing-too") == 404
    client.create_producer(existing).close()  # an existing topic is still served
    # The C++ client takes SubscriptionNotFound for a passing error and retries until its operation
    # timeout (as against Pulsar); the broker's answer is in its log above, the WebSocket's status below.
    with pytest.raises((pulsar.SubscriptionNotFound, pulsar.Timeout)):
        client.subscribe(existing, "new-name")
    assert ws_status(standalone, f"consumer/persistent/{namespace}/existing/new-name") == 500
    client.subscribe(existing, "known").close()  # an existing subscription is still served
    assert admin.call("DELETE", f"{ns}/autoTopicCreation")[0] == 204
    eventually(lambda: ws_status(standalone, f"producer/persistent/{namespace}/now-allowed") == 101)


def test_unacked_bound_changes_on_a_loaded_topic(admin: Admin, client: pulsar.Client, namespace: str) -> None:
    assert admin.call("POST", f"/namespaces/{namespace}/maxUnackedMessagesPerConsumer", 5)[0] == 204
    topic = f"persistent://{namespace}/unacked"
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = [consumer.receive(5000) for _ in range(5)]  # held, never acknowledged
    with pytest.raises(pulsar.Timeout):
        consumer.receive(1000)
    assert admin.call("POST", f"/namespaces/{namespace}/maxUnackedMessagesPerConsumer", 100)[0] == 204
    got += [consumer.receive(5000) for _ in range(15)]
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(20))
    producer.close()
    consumer.close()


def test_subscription_unacked_bound_holds_every_consumer_until_half_is_acknowledged(
    admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    path = f"/namespaces/{namespace}/maxUnackedMessagesPerSubscription"
    assert admin.call("POST", path, 6)[0] == 204
    topic = f"persistent://{namespace}/unacked-sub"
    consumers = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared) for _ in range(2)]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    held: list[pulsar.Message] = []
    for consumer in consumers:  # the two together get the bound's 6, however they share them
        while True:
            try:
                held.append(consumer.receive(1500))
            except pulsar.Timeout:
                break
    assert len(held) == 6
    stats = admin.call("GET", f"/persistent/{namespace}/unacked-sub/stats")[1]
    assert stats["subscriptions"]["s"]["blockedSubscriptionOnUnackedMsgs"] is True
    assert admin.call("DELETE", path)[0] == 204  # back to the broker's 200,000: the rest flows
    rest = []
    for consumer in consumers:
        while True:
            try:
                rest.append(consumer.receive(1500))
            except pulsar.Timeout:
                break
    assert sorted(m.data() for m in held + rest) == sorted(f"m{i}".encode() for i in range(20))
    producer.close()
    for consumer in consumers:
        consumer.close()


def test_persistence_quorum_applies_to_new_ledgers(
    admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    # The standalone has one bookie: a policy asking for two cannot get its ledger, so the topic cannot be
    # loaded; with one it can. (Existing ledgers keep their quorum.)
    ns = f"/namespaces/{namespace}"
    two = {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}
    assert admin.call("POST", f"{ns}/persistence", two)[0] == 204
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(f"persistent://{namespace}/quorum", send_timeout_millis=3000)
    one = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1}
    assert admin.call("POST", f"{ns}/persistence", one)[0] == 204
    producer = client.create_producer(f"persistent://{namespace}/quorum")
    producer.send(b"stored with E=W=A=1")
    producer.close()


def test_inactive_topic_is_deleted(admin: Admin, client: pulsar.Client, namespace: str) -> None:
    policy = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 1,
              "deleteWhileInactive": True}  # fmt: skip
    topic = f"persistent://{namespace}/idle"
    kept = f"persistent://{namespace}/subscribed"
    client.subscribe(kept, "stays").close()  # a durable subscription keeps its topic active in this mode
    producer = client.create_producer(topic)
    producer.send(b"x")
    assert admin.call("POST", f"/namespaces/{namespace}/inactiveTopicPolicies", policy)[0] == 204
    time.sleep(3)
    assert topic in admin.call("GET", f"/persistent/{namespace}")[1]  # a producer: active
    producer.close()
    eventually(lambda: topic not in admin.call("GET", f"/persistent/{namespace}")[1], timeout_s=15)
    assert kept in admin.call("GET", f"/persistent/{namespace}")[1]


def test_inactive_non_persistent_topic_is_removed(
    admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    """The namespace's inactiveTopicPolicies (a one-second inactive duration) remove a non-persistent topic
    once its last producer is gone; one with a connected consumer stays."""
    policy = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 1,
              "deleteWhileInactive": True}  # fmt: skip
    topic = f"non-persistent://{namespace}/idle"
    kept = f"non-persistent://{namespace}/consumed"

    def loaded() -> list[str]:
        status, names = admin.call("GET", f"/non-persistent/{namespace}")
        assert status == 200
        return list(names)

    consumer = client.subscribe(kept, "reads")
    try:
        producer = client.create_producer(topic)
        producer.send(b"x")
        assert admin.call("POST", f"/namespaces/{namespace}/inactiveTopicPolicies", policy)[0] == 204
        time.sleep(3)
        assert topic in loaded()  # a producer: active
        producer.close()
        eventually(lambda: topic not in loaded(), timeout_s=15)
        assert kept in loaded()
        again = client.create_producer(topic)  # a client that comes back creates it afresh
        again.send(b"y")
        assert topic in loaded()
        again.close()
    finally:
        consumer.close()


def test_auto_creation_of_partitioned_topics(
    standalone: MagnetarProcess, admin: Admin, client: pulsar.Client, namespace: str
) -> None:
    rule = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
    assert admin.call("POST", f"/namespaces/{namespace}/autoTopicCreation", rule)[0] == 204
    producer = client.create_producer(f"persistent://{namespace}/auto-binary")
    producer.send(b"to some partition")
    producer.close()
    assert admin.call("GET", f"/persistent/{namespace}/auto-binary/partitions")[1]["partitions"] == 3
    assert ws_status(standalone, f"producer/persistent/{namespace}/auto-ws") == 101
    assert admin.call("GET", f"/persistent/{namespace}/auto-ws/partitions")[1]["partitions"] == 3
    # a topic that already exists non-partitioned stays so
    assert admin.call("DELETE", f"/namespaces/{namespace}/autoTopicCreation")[0] == 204
    client.create_producer(f"persistent://{namespace}/plain").close()
    assert admin.call("POST", f"/namespaces/{namespace}/autoTopicCreation", rule)[0] == 204
    client.create_producer(f"persistent://{namespace}/plain").close()
    assert admin.call("GET", f"/persistent/{namespace}/plain/partitions")[1]["partitions"] == 0
