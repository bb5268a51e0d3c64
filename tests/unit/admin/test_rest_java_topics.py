"""``TopicsImpl`` calls that failed before, sent exactly as the Java admin client sends them.

The requests follow the client's source: ``topicPath(tn, parts...)`` with the query parameters each method
adds (``force``, ``deleteSchema=true`` on deletes, ``replicated`` on createSubscription), the bodies its
Jackson writes (``ResetCursorData`` with ``excluded``, a ``MessageIdImpl``, ``PartitionedTopicMetadata``), an
empty JSON entity for the POSTs and PUTs without one. A partitioned topic is addressed by its base name, and
the calls are applied to every partition - including a partition another broker owns, asked over HTTP.
"""

from __future__ import annotations

import httpx
import pytest
from fixtures.admin import TOPIC_ML_SETTINGS, TopicServer, initialized_store, run_topic_server
from fixtures.java_admin import EARLIEST, LATEST, message_id_impl, reset_cursor_data

from magnetar.broker.entry_format import StoredMessage, encode_message
from magnetar.broker.topic_name import TopicName
from magnetar.managed_ledger.ledger import ManagedLedger

BASE = "/admin/v2/persistent/public/default"
T0 = 1_700_000_000_000
EMPTY = {"content": b"", "headers": {"content-type": "application/json"}}
"""``Entity.entity("", MediaType.APPLICATION_JSON)``: what the client posts when a call has no body."""


@pytest.fixture
async def client(topic_server: TopicServer) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=topic_server.server.base_url, timeout=30) as c:
        yield c  # type: ignore[misc]


async def fill(server: TopicServer, local: str, count: int) -> ManagedLedger:
    ml = await server.factory.open(TopicName.of("public", "default", local).managed_ledger_name)
    for i in range(count):
        await ml.add_entry(encode_message(StoredMessage(b"m%d" % i, "p", i, T0 + i * 1000)))
    return ml


def backlogs(server: TopicServer, local: str, partitions: int, sub: str) -> list[int | None]:
    out: list[int | None] = []
    for i in range(partitions):
        ml = server.factory.get(
            TopicName.of("public", "default", f"{local}-partition-{i}").managed_ledger_name
        )
        cursor = ml.cursors.get(sub) if ml is not None else None
        out.append(cursor.backlog() if cursor is not None else None)
    return out


async def test_subscription_calls_on_a_partitioned_topic_apply_to_every_partition(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    assert (await client.put(f"{BASE}/orders/partitions", json=3)).status_code == 204
    await fill(topic_server, "orders-partition-0", 4)
    await fill(topic_server, "orders-partition-1", 2)  # partition 2 was never used: it gets created
    sub = f"{BASE}/orders/subscription"
    # createSubscription(topic, "s", MessageId.earliest): the MessageIdImpl is the body
    created = await client.put(f"{sub}/s", params={"replicated": "false"}, json=message_id_impl(*EARLIEST))
    assert created.status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [4, 2, 0]
    again = await client.put(f"{sub}/s", params={"replicated": "false"}, json=message_id_impl(*EARLIEST))
    assert (again.status_code, again.json()["reason"]) == (409, "Subscription already exists for topic")
    latest = await client.put(f"{sub}/late", params={"replicated": "false"}, json=message_id_impl(*LATEST))
    assert latest.status_code == 204
    assert backlogs(topic_server, "orders", 3, "late") == [0, 0, 0]
    # getSubscriptions: the union over the partitions
    assert (await client.get(f"{BASE}/orders/subscriptions")).json() == ["late", "s"]
    # resetCursor(topic, "s", timestamp) on every partition: messages published from T0 + 1 s on
    assert (await client.post(f"{sub}/s/resetcursor/{T0 + 1000}", **EMPTY)).status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [3, 1, 0]
    # skipAllMessages, then resetCursor to the start again, then expireMessages(topic, "s", 60)
    assert (await client.post(f"{sub}/s/skip_all", **EMPTY)).status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [0, 0, 0]
    assert (await client.post(f"{sub}/s/resetcursor/0", **EMPTY)).status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [4, 2, 0]
    assert (await client.post(f"{sub}/s/expireMessages/60", **EMPTY)).status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [0, 0, 0]
    # expireMessagesForAllSubscriptions
    assert (await client.post(f"{sub}/late/resetcursor/0", **EMPTY)).status_code == 204
    assert (
        await client.post(f"{BASE}/orders/all_subscription/expireMessages/60", **EMPTY)
    ).status_code == 204
    assert backlogs(topic_server, "orders", 3, "late") == [0, 0, 0]
    # what Pulsar refuses on a partitioned topic, it refuses with its own reason
    by_id = await client.post(f"{sub}/s/resetcursor", json=reset_cursor_data(*EARLIEST))
    assert (by_id.status_code, by_id.json()["reason"]) == (
        405,
        "Reset-cursor at position is not allowed for partitioned-topic",
    )
    expire_by_id = await client.post(f"{sub}/s/expireMessages", json=reset_cursor_data(*LATEST))
    assert (expire_by_id.status_code, expire_by_id.json()["reason"]) == (
        405,
        "Expire message at position is not supported for partitioned-topic",
    )
    missing = await client.post(f"{sub}/nobody/skip_all", **EMPTY)
    assert (missing.status_code, missing.json()["reason"]) == (404, "Subscription not found")
    # deleteSubscription: 412 while a partition has consumers, force disconnects them
    topic_server.host.consumers[("persistent://public/default/orders-partition-1", "s")] = 1
    busy = await client.delete(f"{sub}/s", params={"force": "false"})
    assert (busy.status_code, busy.json()["reason"]) == (412, "Subscription has active connected consumers")
    assert (await client.delete(f"{sub}/s", params={"force": "true"})).status_code == 204
    assert backlogs(topic_server, "orders", 3, "s") == [None, None, None]
    assert (await client.get(f"{BASE}/orders/subscriptions")).json() == ["late"]
    assert (await client.delete(f"{sub}/s", params={"force": "false"})).status_code == 404


async def test_delete_partitioned_topic_without_clients_and_with_force(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    assert (await client.put(f"{BASE}/gone/partitions", json=2)).status_code == 204
    await fill(topic_server, "gone-partition-0", 3)
    await fill(topic_server, "gone-partition-1", 1)
    assert (
        await client.put(f"{BASE}/gone/subscription/s", json=message_id_impl(*EARLIEST))
    ).status_code == 204
    # deletePartitionedTopic(topic): force=false, deleteSchema=true; nobody is connected
    deleted = await client.delete(
        f"{BASE}/gone/partitions", params={"force": "false", "deleteSchema": "true"}
    )
    assert deleted.status_code == 204
    assert (await client.get(f"{BASE}/gone/partitions")).json()["partitions"] == 0
    assert "persistent://public/default/gone-partition-0" not in (await client.get(BASE)).json()
    for i in (0, 1):
        name = TopicName.of("public", "default", f"gone-partition-{i}").managed_ledger_name
        assert not await topic_server.factory.exists(name)

    assert (await client.put(f"{BASE}/held/partitions", json=2)).status_code == 204
    await fill(topic_server, "held-partition-1", 2)
    topic_server.host.producers["persistent://public/default/held-partition-1"] = 1
    busy = await client.delete(f"{BASE}/held/partitions", params={"force": "false", "deleteSchema": "true"})
    assert (busy.status_code, busy.json()["reason"]) == (412, "Topic has active producers/subscriptions")
    assert (await client.get(f"{BASE}/held/partitions")).json()["partitions"] == 2  # nothing deleted
    forced = await client.delete(f"{BASE}/held/partitions", params={"force": "true", "deleteSchema": "true"})
    assert forced.status_code == 204
    assert ("persistent://public/default/held-partition-1", None) in topic_server.host.disconnected
    assert (await client.delete(f"{BASE}/held/partitions")).status_code == 404


async def test_reset_and_expire_to_a_message_id(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    ml = await fill(topic_server, "ids", 6)
    ledger = ml.last_confirmed.ledger_id
    sub = f"{BASE}/ids/subscription/s"
    assert (await client.put(sub, json=message_id_impl(*EARLIEST))).status_code == 204
    cursor = ml.cursors["s"]
    # resetCursor(topic, "s", MessageIdImpl(ledger, 2), isExcluded=true): from entry 3 on
    excluded = await client.post(f"{sub}/resetcursor", json=reset_cursor_data(ledger, 2, excluded=True))
    assert excluded.status_code == 204
    assert cursor.backlog() == 3
    included = await client.post(f"{sub}/resetcursor", json=reset_cursor_data(ledger, 2))
    assert included.status_code == 204
    assert cursor.backlog() == 4
    # expireMessages(topic, "s", MessageIdImpl(ledger, 3), isExcluded): up to 3, or up to 2 when excluded
    assert (
        await client.post(f"{sub}/expireMessages", json=reset_cursor_data(ledger, 3, excluded=True))
    ).status_code == 204
    assert cursor.backlog() == 3
    assert (await client.post(f"{sub}/expireMessages", json=reset_cursor_data(ledger, 3))).status_code == 204
    assert cursor.backlog() == 2
    assert (await client.post(f"{sub}/expireMessages", json=reset_cursor_data(ledger, 0))).status_code == 204
    assert cursor.backlog() == 2  # never backwards
    assert (await client.post(f"{sub}/expireMessages", json=reset_cursor_data(*LATEST))).status_code == 204
    assert cursor.backlog() == 0  # beyond the last message: everything
    assert ("persistent://public/default/ids", "s") in topic_server.host.moved
    missing = await client.post(
        f"{BASE}/ids/subscription/x/expireMessages", json=reset_cursor_data(ledger, 1)
    )
    assert missing.status_code == 404
    assert (await client.post(f"{sub}/expireMessages", **EMPTY)).status_code == 400  # the body is required


async def test_topic_properties(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    # createNonPartitionedTopic(topic, {"owner": "team-a"}): the properties are the body
    assert (await client.put(f"{BASE}/props", json={"owner": "team-a"})).status_code == 204
    assert (await client.get(f"{BASE}/props/properties")).json() == {"owner": "team-a"}
    # updateProperties adds and replaces, keeping the others; removeProperties(topic, key)
    assert (
        await client.put(f"{BASE}/props/properties", json={"tier": "gold", "owner": "b"})
    ).status_code == 204
    assert (await client.get(f"{BASE}/props/properties")).json() == {"owner": "b", "tier": "gold"}
    assert (await client.delete(f"{BASE}/props/properties", params={"key": "owner"})).status_code == 204
    assert (await client.get(f"{BASE}/props/properties")).json() == {"tier": "gold"}
    # stored with the managed ledger: a fresh open reads them back
    await topic_server.factory.close_ledger(TopicName.of("public", "default", "props").managed_ledger_name)
    assert (await client.get(f"{BASE}/props/properties")).json() == {"tier": "gold"}
    assert (await client.get(f"{BASE}/nothing/properties")).status_code == 404

    # createPartitionedTopic(topic, 2, {"k": "v"}): PartitionedTopicMetadata in its own media type
    metadata = {"partitions": 2, "properties": {"k": "v"}}
    created = await client.put(
        f"{BASE}/pprops/partitions",
        params={"createLocalTopicOnly": "false"},
        json=metadata,
        headers={"content-type": "application/vnd.partitioned-topic-metadata+json"},
    )
    assert created.status_code == 204
    assert (await client.get(f"{BASE}/pprops/partitions")).json() == {
        "partitions": 2,
        "deleted": False,
        "properties": {"k": "v"},
    }
    assert (await client.get(f"{BASE}/pprops/properties")).json() == {"k": "v"}
    await fill(topic_server, "pprops-partition-0", 1)
    assert (await client.put(f"{BASE}/pprops/properties", json={"x": "1"})).status_code == 204
    assert (await client.get(f"{BASE}/pprops/properties")).json() == {"k": "v", "x": "1"}
    assert (await client.get(f"{BASE}/pprops-partition-0/properties")).json() == {"x": "1"}


async def test_compaction_is_answered_as_not_supported(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    await fill(topic_server, "compacted", 1)
    trigger = await client.put(f"{BASE}/compacted/compaction", **EMPTY)
    assert (trigger.status_code, trigger.json()["reason"]) == (405, "Topic compaction is not supported")
    status = await client.get(f"{BASE}/compacted/compaction")
    assert status.json() == {"status": "NOT_RUN", "lastError": ""}  # LongRunningProcessStatus
    assert (await client.put(f"{BASE}/none/compaction", **EMPTY)).status_code == 404


async def test_partitions_owned_by_another_broker_get_the_call_over_http(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    assert (await client.put(f"{BASE}/spread/partitions", json=2)).status_code == 204
    await fill(topic_server, "spread-partition-0", 2)
    other_store = await initialized_store()
    async with run_topic_server(other_store, TOPIC_ML_SETTINGS) as other:
        await fill(other, "spread-partition-1", 5)
        topic_server.host.foreign["persistent://public/default/spread-partition-1"] = other.server.base_url
        sub = f"{BASE}/spread/subscription/s"
        assert (await client.put(sub, json=message_id_impl(*EARLIEST))).status_code == 204
        assert backlogs(topic_server, "spread", 1, "s") == [2]
        assert backlogs(other, "spread", 2, "s")[1] == 5
        assert (await client.get(f"{BASE}/spread/subscriptions")).json() == ["s"]
        assert (await client.post(f"{sub}/skip_all", **EMPTY)).status_code == 204
        assert backlogs(other, "spread", 2, "s")[1] == 0
        assert (await client.delete(sub, params={"force": "false"})).status_code == 204
        assert backlogs(other, "spread", 2, "s")[1] is None
        deleted = await client.delete(f"{BASE}/spread/partitions", params={"force": "false"})
        assert deleted.status_code == 204
        name = TopicName.of("public", "default", "spread-partition-1").managed_ledger_name
        assert not await other.factory.exists(name)
        topic_server.host.foreign["persistent://public/default/x-partition-1"] = "http://127.0.0.1:9"
        assert (await client.put(f"{BASE}/x/partitions", json=2)).status_code == 204
        unreachable = await client.put(f"{BASE}/x/subscription/s", json=message_id_impl(*EARLIEST))
        assert unreachable.status_code == 503
        assert "could not be reached" in unreachable.json()["reason"]
    await other_store.aclose()


async def test_stats_and_position_calls_on_a_partitioned_topic_as_the_java_client_sends_them(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    """``getPartitionedStats(topic, perPartition, false, false, false)`` sends all four flags (the client
    clears ``partitions`` itself when ``perPartition`` is false), ``getPartitionedInternalStats`` none;
    ``getStats``/``getInternalStats`` on one partition send theirs; ``resetCursor`` to a message id is
    refused on the base name (405, as Pulsar) but works on a partition's name, whose ``MessageIdImpl``
    carries the partition index."""
    assert (await client.put(f"{BASE}/st/partitions", json=2)).status_code == 204
    ml = await fill(topic_server, "st-partition-0", 3)
    await fill(topic_server, "st-partition-1", 2)
    created = await client.put(
        f"{BASE}/st/subscription/s", params={"replicated": "false"}, json=message_id_impl(*EARLIEST)
    )
    assert created.status_code == 204
    names = [f"persistent://public/default/st-partition-{i}" for i in (0, 1)]
    for per_partition in ("true", "false"):
        query = {
            "perPartition": per_partition,
            "getPreciseBacklog": "false",
            "subscriptionBacklogSize": "false",
            "getEarliestTimeInBacklog": "false",
        }
        answer = await client.get(f"{BASE}/st/partitioned-stats", params=query)
        assert answer.status_code == 200
        stats = answer.json()
        assert stats["metadata"]["partitions"] == 2
        assert sorted(stats["partitions"]) == (names if per_partition == "true" else [])
        assert stats["subscriptions"]["s"]["msgBacklog"] == 5
        assert isinstance(stats["msgInCounter"], int)
    internal = await client.get(f"{BASE}/st/partitioned-internalStats")
    assert internal.status_code == 200
    assert internal.json()["metadata"]["partitions"] == 2
    assert sorted(internal.json()["partitions"]) == names
    assert "s" in internal.json()["partitions"][names[0]]["cursors"]
    one = await client.get(
        f"{BASE}/st-partition-0/stats",
        params={
            "getPreciseBacklog": "false",
            "subscriptionBacklogSize": "false",
            "getEarliestTimeInBacklog": "false",
        },
    )
    assert (one.status_code, one.json()["subscriptions"]["s"]["msgBacklog"]) == (200, 3)
    one_internal = await client.get(f"{BASE}/st-partition-0/internalStats", params={"metadata": "false"})
    assert one_internal.status_code == 200
    ledger = ml.last_confirmed.ledger_id
    refused = await client.post(f"{BASE}/st/subscription/s/resetcursor", json=reset_cursor_data(ledger, 1))
    assert (refused.status_code, refused.json()["reason"]) == (
        405,
        "Reset-cursor at position is not allowed for partitioned-topic",
    )
    on_partition = await client.post(
        f"{BASE}/st-partition-0/subscription/s/resetcursor",
        json=reset_cursor_data(ledger, 1, partition_index=0, excluded=True),
    )
    assert on_partition.status_code == 204
    assert backlogs(topic_server, "st", 2, "s") == [1, 2]
    # updateProperties(topic, null) sends an empty map: nothing changes
    assert (await client.put(f"{BASE}/st/properties", json={})).status_code == 204
    assert (await client.get(f"{BASE}/st/properties")).json() == {}
