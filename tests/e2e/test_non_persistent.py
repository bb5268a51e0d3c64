"""Non-persistent topics on a real broker: Pulsar's WebSocket JSON API and ``magnetar.v1`` on
``/ws/v2/{producer,consumer,reader}/non-persistent/...``, the admin calls Pulsar's Java client makes for them
(listings merged by ``topics().getList(ns)``, stats, internal stats, delete), and a bundle unload."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster, nothing_arrives, publish_many, recv_json, send_json, unb64
from prometheus_client.parser import text_string_to_metric_families

from magnetar.broker.wire.magnetar_v1 import (
    SUBPROTOCOL,
    FrameType,
    OutgoingMessage,
    encode_send,
    parse_messages,
    parse_receipt,
)
from magnetar.broker.wire.message_id import MessageId
from magnetar.broker.wire.topic_name import parse_topic_name

Connect = Callable[..., websocket.WebSocket]
NP = "non-persistent/public/default"


@pytest.fixture
def admin_broker(cluster: Cluster) -> Broker:
    return cluster.start_broker(extras=admin_extras)


def test_json_clients_at_most_once_with_pulsar_ids(admin_broker: Broker, ws_connect: Connect) -> None:
    url = admin_broker.ws_url
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-json")
    # published with no subscription: answered ok, and gone
    early = publish_many(producer, ["early"])[0]
    assert early["result"] == "ok"
    assert MessageId.from_base64(early["messageId"]) == MessageId(0, 0, -1)
    consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-json/sub?subscriptionInitialPosition=Earliest")
    reader = ws_connect(f"{url}/ws/v2/reader/{NP}/np-json?messageId=earliest")
    acks = publish_many(producer, ["one", "two"])
    assert {a["result"] for a in acks} == {"ok"}
    got = [recv_json(consumer) for _ in range(2)]
    assert [unb64(m["payload"]) for m in got] == [b"one", b"two"]
    assert MessageId.from_base64(got[0]["messageId"]) == MessageId(0, 0, -1)
    for message in got:
        send_json(consumer, {"messageId": message["messageId"]})
    read = [recv_json(reader) for _ in range(2)]
    assert [unb64(m["payload"]) for m in read] == [b"one", b"two"]
    # a consumer that reconnects gets nothing of what was sent meanwhile (nothing is stored)
    consumer.close()
    publish_many(producer, ["while away"])
    again = ws_connect.retrying(f"{url}/ws/v2/consumer/{NP}/np-json/sub")  # type: ignore[attr-defined]
    assert nothing_arrives(again)


def test_no_permits_means_dropped_and_counted(admin_broker: Broker, ws_connect: Connect) -> None:
    url = admin_broker.ws_url
    consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-drop/sub?receiverQueueSize=2")
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-drop")
    publish_many(producer, [f"m{i}" for i in range(5)])
    got = [recv_json(consumer) for _ in range(2)]
    assert [unb64(m["payload"]) for m in got] == [b"m0", b"m1"]
    assert nothing_arrives(consumer)  # m2..m4 were dropped, not queued
    send_json(consumer, {"messageId": got[0]["messageId"]})  # one window place back
    with httpx.Client(base_url=admin_broker.http_url, timeout=30) as admin:

        def permits() -> int:
            stats = admin.get(f"/admin/v2/{NP}/np-drop/stats").json()
            return int(stats["subscriptions"]["sub"]["consumers"][0]["availablePermits"])

        deadline = time.monotonic() + 10  # the ack and the next publish travel on different connections
        while permits() != 1:
            assert time.monotonic() < deadline, "the ack never gave a window place back"
            time.sleep(0.02)
        publish_many(producer, ["m5"])
        assert unb64(recv_json(consumer)["payload"]) == b"m5"
        stats = admin.get(f"/admin/v2/{NP}/np-drop/stats").json()
    assert stats["msgInCounter"] == 6
    assert stats["msgOutCounter"] == 3
    assert "msgDropRate" in stats
    assert "msgDropRate" in stats["subscriptions"]["sub"]
    assert "msgDropRate" in stats["publishers"][0]
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
    assert admin_broker.handle is not None
    service = admin_broker.handle.service
    topic = admin_broker.call_sync(
        lambda: service.non_persistent.topics["non-persistent://public/default/np-drop"]
    )
    assert topic.msg_drop_counter == 3


def test_binary_subprotocol_producer_and_consumer(admin_broker: Broker, ws_connect: Connect) -> None:
    url = admin_broker.ws_url
    consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-bin/sub", subprotocols=[SUBPROTOCOL])
    json_consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-bin/json-sub")
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-bin", subprotocols=[SUBPROTOCOL])
    producer.send_binary(encode_send(1, [OutgoingMessage(b"a", key="k"), b"b", b"c"]))
    frame = producer.recv()
    assert isinstance(frame, bytes)
    receipt = parse_receipt(frame)
    assert receipt.ok
    assert receipt.message_ids() == [(-1, 0, 0, 0, 3), (-1, 0, 0, 1, 3), (-1, 0, 0, 2, 3)]
    frame = consumer.recv()
    assert isinstance(frame, bytes)
    assert frame[0] == FrameType.MESSAGES
    got = parse_messages(frame)
    while len(got) < 3:
        more = consumer.recv()
        assert isinstance(more, bytes)
        got += parse_messages(more)
    assert [m.payload for m in got] == [b"a", b"b", b"c"]
    assert got[0].key == "k"
    from_json = [recv_json(json_consumer) for _ in range(3)]
    assert [unb64(m["payload"]) for m in from_json] == [b"a", b"b", b"c"]
    assert MessageId.from_base64(from_json[1]["messageId"]) == MessageId(0, 0, -1, 1, 3)


def test_admin_as_the_java_client_calls_it(admin_broker: Broker, ws_connect: Connect) -> None:
    url = admin_broker.ws_url
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-admin")
    publish_many(producer, ["x"])
    with httpx.Client(base_url=admin_broker.http_url, timeout=30) as admin:
        # the load report counts the non-persistent topic and its producer (brokerStats().getLoadReport())
        report = admin.get("/admin/v2/broker-stats/load-report").json()
        assert (report["numTopics"], report["numProducers"]) == (1, 1), report
        assert admin.put("/admin/v2/persistent/public/default/durable").status_code == 204
        # topics().getList(ns): both domains, merged by the client
        listing = {"includeSystemTopic": "false"}
        persistent = admin.get("/admin/v2/persistent/public/default", params=listing).json()
        non_persistent = admin.get("/admin/v2/non-persistent/public/default", params=listing).json()
        assert "persistent://public/default/durable" in persistent
        assert non_persistent == ["non-persistent://public/default/np-admin"]
        assert admin.get("/admin/v2/non-persistent/public/default/partitioned").json() == []
        modes = admin.get("/admin/v2/namespaces/public/default/topics", params={"mode": "ALL"}).json()
        assert "non-persistent://public/default/np-admin" in modes
        assert "persistent://public/default/durable" in modes
        only = admin.get("/admin/v2/namespaces/public/default/topics", params={"mode": "NON_PERSISTENT"})
        assert only.json() == ["non-persistent://public/default/np-admin"]
        stats = admin.get(
            f"/admin/v2/{NP}/np-admin/stats",
            params={"getPreciseBacklog": "false", "subscriptionBacklogSize": "false"},
        )
        assert stats.status_code == 200
        assert stats.json()["publishers"][0]["msgInCounter"] == 1
        lookup = admin.get(f"/lookup/v2/topic/{NP}/np-admin")
        assert lookup.status_code == 200
        assert lookup.json()["httpUrl"] == admin_broker.http_url
        bundle = admin.get(f"/lookup/v2/topic/{NP}/np-admin/bundle")
        assert bundle.status_code == 200
        internal = admin.get(f"/admin/v2/{NP}/np-admin/internalStats", params={"metadata": "false"}).json()
        assert internal["ledgers"] == []
        assert admin.get(f"/admin/v2/{NP}/nowhere/stats").status_code == 404
        # delete: refused while the producer is connected, forced it ends the session
        refused = admin.delete(f"/admin/v2/{NP}/np-admin")
        assert refused.status_code == 412
        assert admin.delete(f"/admin/v2/{NP}/np-admin", params={"force": "true"}).status_code == 204
        assert admin.get("/admin/v2/non-persistent/public/default").json() == []
        assert admin.get("/admin/v2/non-persistent/public/none").status_code == 404


def test_bundle_unload_drops_the_topic_and_clients_reconnect(
    admin_broker: Broker, ws_connect: Connect
) -> None:
    url = admin_broker.ws_url
    consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-unload/sub")
    with httpx.Client(base_url=admin_broker.http_url, timeout=30) as admin:
        assert admin.put("/admin/v2/namespaces/public/default/unload").status_code == 204
        consumer.settimeout(5)
        opcode, frame = consumer.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE
        assert int.from_bytes(frame.data[:2], "big") == 1001  # going away: look the topic up again
        assert admin.get("/admin/v2/non-persistent/public/default").json() == []
    again = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-unload/sub")
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-unload")
    publish_many(producer, ["after"])
    assert unb64(recv_json(again)["payload"]) == b"after"


DROP_RATE_PERIODS = 2
"""Stats periods until a drop shows in the drop rate: the period the drop falls in, then the one that reports
it."""


def test_metrics_rows_with_pulsars_names(cluster: Cluster, ws_connect: Connect) -> None:
    broker = cluster.start_broker(extras=admin_extras, stats_update_interval_s=0.5)
    url = broker.ws_url
    consumer = ws_connect(f"{url}/ws/v2/consumer/{NP}/np-metrics/sub?receiverQueueSize=1")
    producer = ws_connect(f"{url}/ws/v2/producer/{NP}/np-metrics")
    publish_many(producer, ["a", "b", "c"])  # one delivered, two dropped (no permit)
    assert unb64(recv_json(consumer)["payload"]) == b"a"
    topic = {
        "cluster": "standalone",
        "namespace": "public/default",
        "topic": "non-persistent://public/default/np-metrics",
    }
    sub = {**topic, "subscription": "sub"}

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(f"{broker.http_url}/metrics", timeout=30).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def sample(
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
    ) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), -1.0)

    samples = scrape()
    assert sample(samples, "pulsar_in_messages_total", **topic) == 3
    assert sample(samples, "pulsar_out_messages_total", **sub) == 1
    assert sample(samples, "pulsar_storage_size", **topic) == 0
    assert sample(samples, "pulsar_msg_backlog", **topic) == 0
    assert sample(samples, "pulsar_consumers_count", **topic) == 1
    # The drop rate is a per-period rate (stats_update_interval_s): it shows a period's drops for one period,
    # then falls back to 0. The messages published here are dropped too (the consumer never gives a permit
    # back), so every period while the rate is watched has drops, however long a scrape takes.
    period_s = broker.settings.stats_update_interval_s
    periods = 3 * DROP_RATE_PERIODS  # three times the periods it needs: a busy machine's rounds come late
    seen: list[float] = []
    deadline = time.monotonic() + periods * period_s
    while time.monotonic() < deadline and not any(rate > 0 for rate in seen):
        publish_many(producer, ["dropped"])
        seen.append(sample(scrape(), "pulsar_subscription_msg_drop_rate", **sub))
    assert max(seen) > 0, (
        f"no drop rate within {periods} periods of stats_update_interval_s {period_s:g} s "
        f"while messages were dropped: {seen}"
    )


def test_listing_spans_the_brokers_owning_the_namespaces_bundles(
    cluster: Cluster, ws_connect: Connect
) -> None:
    """``getList`` on any broker names every broker's non-persistent topics: each bundle's owner is asked
    (``getListInBundle``), as Pulsar's broker does."""
    first = cluster.start_broker(extras=admin_extras)
    second = cluster.start_broker(extras=admin_extras)

    def bundle(name: str) -> str:
        return first.call(
            first.service.bundle_of,
            parse_topic_name(f"non-persistent://public/default/{name}", allow_non_persistent=True),
        )[1]

    names = ["np-one", *(f"np-two-{i}" for i in range(50))]
    one = names[0]
    two = next(name for name in names[1:] if bundle(name) != bundle(one))
    first.call(first.service.ownership.acquire, "public/default", bundle(one))
    second.call(second.service.ownership.acquire, "public/default", bundle(two))
    ws_connect(f"{first.ws_url}/ws/v2/producer/{NP}/{one}")
    ws_connect(f"{second.ws_url}/ws/v2/producer/{NP}/{two}")
    expected = sorted(f"non-persistent://public/default/{name}" for name in (one, two))
    for broker in (first, second):
        listed = httpx.get(f"{broker.http_url}/admin/v2/non-persistent/public/default", timeout=30).json()
        assert listed == expected
    in_bundle = httpx.get(
        f"{second.http_url}/admin/v2/non-persistent/public/default/{bundle(two)}", timeout=30
    )
    assert in_bundle.json() == [f"non-persistent://public/default/{two}"]
    bad = httpx.get(f"{second.http_url}/admin/v2/non-persistent/public/default/not-a-bundle", timeout=30)
    assert bad.status_code == 412
