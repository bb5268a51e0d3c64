"""Topic and subscription routes over HTTP, served from a real managed ledger (one in-process bookie)."""

from __future__ import annotations

import httpx
import pytest
from fixtures.admin import TOPIC_ML_SETTINGS, TopicServer, run_topic_server
from fixtures.java_admin import messages_from_response

from magnetar.admin.rest.range_read import FrameDecoder, RangeEnd, RangeMessage
from magnetar.broker.wire.entry_format import StoredMessage, encode_batch, encode_message
from magnetar.broker.wire.topic_name import TopicName
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

BASE = "/admin/v2/persistent/public/default"
T0 = 1_700_000_000_000


def message(i: int, *, publish_ms: int | None = None, key: str | None = None) -> bytes:
    props = {"i": str(i)}
    return encode_message(
        StoredMessage(b"m%d" % i, "prod", i, publish_ms or T0 + i * 1000, key=key, properties=props)
    )


def raw_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """Header names as sent (the Java client matches ``X-Pulsar-PROPERTY-`` case-sensitively)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]


async def topic_with(server: TopicServer, name: str, count: int) -> ManagedLedger:
    topic = TopicName.of("public", "default", name)
    ml = await server.factory.open(topic.managed_ledger_name)
    for i in range(count):
        await ml.add_entry(message(i))
    return ml


@pytest.fixture
async def client(topic_server: TopicServer) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=topic_server.server.base_url, timeout=30) as c:
        yield c  # type: ignore[misc]


async def test_create_delete_unload(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    assert (await client.put(f"{BASE}/t1")).status_code == 204
    again = await client.put(f"{BASE}/t1")
    assert (again.status_code, again.json()["reason"]) == (409, "This topic already exists")
    assert (await client.put("/admin/v2/persistent/public/none/t1")).status_code == 404
    assert (await client.put(f"{BASE}/p/partitions", json=2)).status_code == 204
    assert (await client.put(f"{BASE}/p")).status_code == 409
    assert "persistent://public/default/t1" in (await client.get(BASE)).json()

    topic_server.host.producers["persistent://public/default/t1"] = 1
    busy = await client.delete(f"{BASE}/t1")
    assert (busy.status_code, busy.json()["reason"]) == (412, "Topic has active producers/subscriptions")
    assert (await client.delete(f"{BASE}/t1", params={"force": "true"})).status_code == 204
    assert topic_server.host.disconnected == [("persistent://public/default/t1", None)]
    assert (await client.delete(f"{BASE}/t1")).status_code == 404
    assert "persistent://public/default/t1" not in (await client.get(BASE)).json()
    partitioned = await client.delete(f"{BASE}/p")
    assert partitioned.status_code == 409
    assert "delete it with delete-partitioned-topic" in partitioned.json()["reason"]

    await topic_with(topic_server, "t2", 3)
    assert (await client.put(f"{BASE}/t2/unload")).status_code == 204
    assert topic_server.host.unloaded == ["persistent://public/default/t2"]
    assert (await client.put(f"{BASE}/missing/unload")).status_code == 404


async def test_stats_internal_stats_and_last_message_id(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    ml = await topic_with(topic_server, "s", 150)  # ledgers of 100 and 50 entries
    await ml.open_cursor("sub", start_at_earliest=True)
    stats = (await client.get(f"{BASE}/s/stats")).json()
    assert stats["msgRateIn"] == 1.5
    assert stats["storageSize"] == ml.total_size()
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 150
    assert stats["subscriptions"]["sub"]["backlogSize"] == ml.total_size()
    internal = (await client.get(f"{BASE}/s/internalStats")).json()
    assert [(lg["entries"]) for lg in internal["ledgers"]] == [100, 0]  # the open ledger shows 0, as Pulsar
    assert internal["currentLedgerEntries"] == 50
    assert internal["numberOfEntries"] == 150
    assert internal["cursors"]["sub"]["markDeletePosition"].endswith(":-1")
    last = (await client.get(f"{BASE}/s/lastMessageId")).json()
    assert last == {"ledgerId": ml.last_confirmed.ledger_id, "entryId": 49, "partitionIndex": -1}
    assert (await client.get(f"{BASE}/s/subscriptions")).json() == ["sub"]
    assert (await client.get(f"{BASE}/nothing/stats")).status_code == 404
    unknown = await client.get(f"{BASE}/s/stats", params={"nope": "1"})
    assert unknown.status_code == 200  # ignored, as JAX-RS does


async def test_messages_by_id_examine_and_time(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    ml = await topic_with(topic_server, "m", 5)
    batch = [StoredMessage(b"b0", "p", 10, T0 + 10_000), StoredMessage(b"b1", "p", 11, T0 + 10_000, key="k")]
    batch_position = await ml.add_entry(encode_batch(batch))
    first = ml.ledgers.first_position()
    assert first is not None
    got = await client.get(f"{BASE}/m/ledger/{first.ledger_id}/entry/2")
    assert got.status_code == 200
    assert got.content == b"m2"
    assert got.headers["x-pulsar-message-id"] == f"{first.ledger_id}:2"
    assert got.headers["x-pulsar-property-i"] == "2"
    assert got.headers["content-type"] == "application/octet-stream"
    single = messages_from_response(got.status_code, raw_headers(got), got.content)
    assert [(m.entry_id, m.batch_index, m.payload, m.properties) for m in single] == [
        (2, -1, b"m2", {"i": "2"})
    ]
    batched = await client.get(f"{BASE}/m/ledger/{batch_position.ledger_id}/entry/{batch_position.entry_id}")
    assert batched.headers["content-type"] == "application/octet-stream"
    assert batched.headers["x-pulsar-message-id"] == f"{batch_position.ledger_id}:{batch_position.entry_id}"
    assert batched.headers["x-pulsar-num-batch-message"] == "2"
    read = messages_from_response(batched.status_code, raw_headers(batched), batched.content)
    assert [(m.entry_id, m.batch_index, m.payload, m.key, m.sequence_id) for m in read] == [
        (batch_position.entry_id, 0, b"b0", None, 10),
        (batch_position.entry_id, 1, b"b1", "k", 11),
    ]
    assert (await client.get(f"{BASE}/m/ledger/{first.ledger_id}/entry/99")).status_code == 404
    bad = await client.get(f"{BASE}/m/ledger/x/entry/1")
    assert bad.status_code == 400
    assert bad.json()["reason"].startswith('Invalid ledger "x": not a decimal integer')

    earliest = await client.get(f"{BASE}/m/examinemessage", params={"initialPosition": "earliest"})
    assert earliest.content == b"m0"
    second_latest = await client.get(
        f"{BASE}/m/examinemessage", params={"initialPosition": "latest", "messagePosition": 2}
    )
    assert second_latest.content == b"m4"
    assert (await client.get(f"{BASE}/m/examinemessage", params={"messagePosition": 99})).status_code == 404

    by_time = (await client.get(f"{BASE}/m/messageid/{T0 + 2500}")).json()
    assert (by_time["ledgerId"], by_time["entryId"]) == (first.ledger_id, 3)
    assert (await client.get(f"{BASE}/m/messageid/{T0 + 10**9}")).status_code == 404
    last = (await client.get(f"{BASE}/m/lastMessageId")).json()
    assert last["batchIndex"] == 1


async def test_terminate_and_truncate(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    ml = await topic_with(topic_server, "tt", 250)
    cursor = await ml.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(Position(ml.ledgers.infos()[1].ledger_id, 99))
    await cursor.flush()
    assert (await client.delete(f"{BASE}/tt/truncate")).status_code == 204
    assert len(ml.ledgers) == 1  # both consumed closed ledgers went, the current one stays
    terminated = await client.post(f"{BASE}/tt/terminate")
    assert terminated.json() == {"ledgerId": ml.last_confirmed.ledger_id, "entryId": 49, "partitionIndex": -1}
    assert (await client.put(f"{BASE}/pp/partitions", json=2)).status_code == 204
    refused = await client.post(f"{BASE}/pp/terminate")
    assert (refused.status_code, refused.json()["reason"]) == (
        405,
        "Termination of a partitioned topic is not allowed",
    )


async def test_subscription_lifecycle(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    ml = await topic_with(topic_server, "subs", 10)
    sub = f"{BASE}/subs/subscription"
    assert (await client.put(f"{sub}/latest-one")).status_code == 204
    assert (await client.put(f"{sub}/early", json="earliest")).status_code == 204
    first = ml.ledgers.first_position()
    assert first is not None
    at = {"ledgerId": first.ledger_id, "entryId": 4}
    assert (await client.put(f"{sub}/at4", json=at)).status_code == 204
    exists = await client.put(f"{sub}/early", json="earliest")
    assert (exists.status_code, exists.json()["reason"]) == (409, "Subscription already exists for topic")
    assert (await client.put(f"{sub}/bad", json="middle")).status_code == 400
    assert ml.cursors["latest-one"].backlog() == 0
    assert ml.cursors["early"].backlog() == 10
    assert ml.cursors["at4"].backlog() == 6
    assert sorted((await client.get(f"{BASE}/subs/subscriptions")).json()) == ["at4", "early", "latest-one"]

    assert (await client.post(f"{sub}/early/skip/3")).status_code == 204
    assert ml.cursors["early"].backlog() == 7
    peek = await client.get(f"{sub}/early/position/1")
    assert peek.content == b"m3"
    assert (await client.get(f"{sub}/early/position/99")).status_code == 404
    assert (await client.post(f"{sub}/early/skip/-1")).status_code == 412
    assert (await client.post(f"{sub}/early/skip_all")).status_code == 204
    assert ml.cursors["early"].backlog() == 0
    assert (await client.post(f"{sub}/early/resetcursor/{T0 + 5000}")).status_code == 204
    assert ml.cursors["early"].backlog() == 5
    reset_to = {"ledgerId": first.ledger_id, "entryId": 1, "isExcluded": True}  # the older spelling
    assert (await client.post(f"{sub}/early/resetcursor", json=reset_to)).status_code == 204
    assert ml.cursors["early"].backlog() == 8
    assert ("persistent://public/default/subs", "early") in topic_server.host.moved
    # Every message is older than a minute by the wall clock: expiring acknowledges them all.
    assert (await client.post(f"{sub}/early/expireMessages/60")).status_code == 204
    assert ml.cursors["early"].backlog() == 0
    assert (await client.post(f"{BASE}/subs/all_subscription/expireMessages/60")).status_code == 204
    assert ml.cursors["at4"].backlog() == 0
    assert (await client.post(f"{sub}/nobody/skip_all")).status_code == 404

    topic_server.host.consumers[("persistent://public/default/subs", "early")] = 1
    busy = await client.delete(f"{sub}/early")
    assert (busy.status_code, busy.json()["reason"]) == (412, "Subscription has active connected consumers")
    assert (await client.delete(f"{sub}/early", params={"force": "true"})).status_code == 204
    assert (await client.delete(f"{sub}/early")).status_code == 404
    assert (await client.put(f"{BASE}/pp2/partitions", json=2)).status_code == 204
    refused = await client.post(f"{BASE}/pp2/subscription/s/skip/1")
    assert (refused.status_code, refused.json()["reason"]) == (
        405,
        "Skip messages on a partitioned topic is not allowed",
    )


async def test_range_reads_stream_framed_entries(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    ml = await topic_with(topic_server, "range", 120)  # crosses a ledger boundary at 100
    await ml.add_entry(encode_batch([StoredMessage(b"x", "p", 1, T0), StoredMessage(b"y", "p", 2, T0)]))

    async def read(params: dict[str, str]) -> tuple[list[RangeMessage], RangeEnd]:
        decoder = FrameDecoder()
        frames: list[RangeMessage | RangeEnd] = []
        async with client.stream("GET", f"{BASE}/range/entries", params=params) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-magnetar-entries"
            async for chunk in response.aiter_bytes():
                frames.extend(decoder.feed(chunk))
        end = frames.pop()
        assert isinstance(end, RangeEnd)
        assert all(isinstance(f, RangeMessage) for f in frames)
        return frames, end  # type: ignore[return-value]

    messages, end = await read({"maxEntries": "50"})
    assert [m.payload for m in messages] == [b"m%d" % i for i in range(50)]
    assert messages[7].properties == {"i": "7"}
    assert messages[7].publish_time_ms == T0 + 7000
    assert (end.entries_sent, end.complete) == (50, False)
    rest: list[RangeMessage] = []
    while not end.complete:
        more, end = await read({"from": f"{end.next_position[0]}:{end.next_position[1]}", "maxEntries": "30"})
        rest += more
    assert [m.payload for m in rest] == [b"m%d" % i for i in range(50, 120)] + [b"x", b"y"]
    assert (rest[-1].batch_index, rest[-1].batch_size) == (1, 2)
    assert rest[0].batch_index == -1
    first = ml.ledgers.first_position()
    assert first is not None
    bounded, end = await read({"from": f"{first.ledger_id}:10", "to": f"{first.ledger_id}:12"})
    assert [m.payload for m in bounded] == [b"m10", b"m11", b"m12"]
    assert end.complete
    assert (await client.get(f"{BASE}/range/entries", params={"from": "x"})).status_code == 400
    assert (await client.get(f"{BASE}/range/entries", params={"maxEntries": "0"})).status_code == 400
    assert (await client.get(f"{BASE}/range/entries", params={"frameVersion": "4"})).status_code == 400

    # Version 1 (the default) carries no producer name; version 2 adds it and the sequence id.
    assert {(m.producer_name, m.sequence_id) for m in bounded} == {("", -1)}
    lid = first.ledger_id
    v2, end = await read({"from": f"{lid}:10", "to": f"{lid}:11", "frameVersion": "2"})
    assert [(m.payload, m.producer_name, m.sequence_id, m.properties) for m in v2] == [
        (b"m10", "prod", 10, {"i": "10"}),
        (b"m11", "prod", 11, {"i": "11"}),
    ]
    assert end.complete
    # Version 3 forwards the stored entries; they decode to the same messages (a batch entry included).
    v3, end = await read({"from": f"{lid}:10", "to": f"{lid}:11", "frameVersion": "3"})
    assert v3 == v2
    last = ml.last_confirmed
    batch, _ = await read({"from": f"{last.ledger_id}:{last.entry_id}", "frameVersion": "3"})
    assert [(m.payload, m.batch_index, m.batch_size, m.producer_name) for m in batch] == [
        (b"x", 0, 2, "p"),
        (b"y", 1, 2, "p"),
    ]


async def test_non_owner_redirects_to_the_owner(topic_server: TopicServer) -> None:
    # A second broker on the same metadata owns nothing locally: it redirects "moved" to the first one.
    other_store = topic_server.server.metadata
    async with run_topic_server(other_store, TOPIC_ML_SETTINGS) as other:
        other.host.foreign["persistent://public/default/moved"] = topic_server.server.base_url
        await topic_with(topic_server, "moved", 3)
        async with httpx.AsyncClient(base_url=other.server.base_url) as c:
            hop = await c.get(f"{BASE}/moved/lastMessageId")
            assert hop.status_code == 307
            assert hop.headers["location"] == (
                f"{topic_server.server.base_url}{BASE}/moved/lastMessageId?authoritative=true"
            )
            assert hop.json()["reason"] == "Current broker doesn't serve the namespace of this topic"
            followed = await c.get(f"{BASE}/moved/stats", follow_redirects=True)
            assert followed.status_code == 200
            assert followed.json()["storageSize"] > 0


async def test_topic_routes_appear_in_the_document(topic_server: TopicServer) -> None:
    paths = topic_server.server.document["paths"]
    assert isinstance(paths, dict)
    assert (
        "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}/resetcursor" in paths
    )
    assert "/admin/v2/persistent/{tenant}/{namespace}/{topic}/entries" in paths


async def test_names_with_control_characters_are_refused_before_the_store(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    nul = await client.put(f"{BASE}/%00nul")
    assert nul.status_code == 412
    assert "control character U+0000" in nul.json()["reason"]
    assert (await client.put(f"{BASE}/%00nul/partitions", json=2)).status_code == 412
    assert (await client.put(f"{BASE}/%2E%2E")).status_code == 412
    assert (await client.put(f"{BASE}/ok/subscription/a%07b")).status_code == 412
    assert (await client.put(f"{BASE}/ok/subscription/%2E")).status_code == 412
    tenant = await client.put("/admin/v2/tenants/%2E%2E", json={"allowedClusters": ["standalone"]})
    assert tenant.status_code == 412
    assert (await client.put("/admin/v2/namespaces/public/%2E")).status_code == 412
    listed = (await client.get(BASE)).json()
    assert not any("%00" in name or "\x00" in name or name.endswith("/..") for name in listed)
    children = await topic_server.server.metadata.get_children("/managed-ledgers/public/default/persistent")
    assert "%00nul" not in children
    assert ".." not in children


async def test_a_partitioned_topic_whose_partition_names_would_be_too_long_is_refused(
    client: httpx.AsyncClient,
) -> None:
    base = "x" * 1012  # "-partition-9" makes 1024 characters, the most a local name may have
    assert (await client.put(f"{BASE}/{base}/partitions", json=11)).status_code == 412
    assert (await client.put(f"{BASE}/{base}/partitions", json=10)).status_code == 204
    assert (await client.post(f"{BASE}/{base}/partitions", json=11)).status_code == 412
    assert (await client.get(f"{BASE}/{base}/partitions")).json()["partitions"] == 10
