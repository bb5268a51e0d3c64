"""``partitioned-stats`` and ``partitioned-internalStats``: a partitioned topic's figures added up over its
partitions, each from the broker that owns it (here: this one, or a second admin server over HTTP)."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import pytest
import trio
from fixtures.admin import TOPIC_ML_SETTINGS, TopicServer, initialized_store, run_topic_server

from magnetar.admin.cli.admin_client import admin_main
from magnetar.broker.wire.entry_format import StoredMessage, encode_message
from magnetar.broker.wire.topic_name import TopicName

BASE = "/admin/v2/persistent/public/default"
T0 = 1_700_000_000_000


async def fill(server: TopicServer, local: str, count: int, backlog: int) -> None:
    ml = await server.factory.open(TopicName.of("public", "default", local).managed_ledger_name)
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    for i in range(count):
        await ml.add_entry(encode_message(StoredMessage(b"x" * 10, "p", i, T0 + i)))
    cursor.skip(count - backlog)


@pytest.fixture
async def client(topic_server: TopicServer) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=topic_server.server.base_url, timeout=30) as c:
        yield c  # type: ignore[misc]


async def test_stats_are_added_up_over_the_partitions(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    assert (await client.put(f"{BASE}/p/partitions", json=3)).status_code == 204
    await fill(topic_server, "p-partition-0", 5, backlog=2)
    await fill(topic_server, "p-partition-1", 7, backlog=7)  # partition 2 was never used
    answer = await client.get(f"{BASE}/p/partitioned-stats")
    assert answer.status_code == 200
    stats = answer.json()
    assert stats["metadata"]["partitions"] == 3
    names = [f"persistent://public/default/p-partition-{i}" for i in (0, 1)]
    assert sorted(stats["partitions"]) == names
    per = [stats["partitions"][name] for name in names]
    assert stats["storageSize"] == per[0]["storageSize"] + per[1]["storageSize"] > 0
    assert stats["msgInCounter"] == 20  # the test host reports 10 per partition
    assert stats["msgRateIn"] == 3.0
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 9
    assert stats["averageMsgSize"] == (per[0]["averageMsgSize"] + per[1]["averageMsgSize"]) / 2
    assert stats["ownerBroker"] is None
    flat = (await client.get(f"{BASE}/p/partitioned-stats", params={"perPartition": "false"})).json()
    assert flat["partitions"] == {}
    assert flat["subscriptions"]["sub"]["msgBacklog"] == 9

    internal = (await client.get(f"{BASE}/p/partitioned-internalStats")).json()
    assert internal["metadata"]["partitions"] == 3
    assert sorted(internal["partitions"]) == names
    assert internal["partitions"][names[1]]["entriesAddedCounter"] == 7


async def test_unused_and_unpartitioned_topics(client: httpx.AsyncClient) -> None:
    assert (await client.put(f"{BASE}/fresh/partitions", json=2)).status_code == 204
    fresh = (await client.get(f"{BASE}/fresh/partitioned-stats")).json()
    assert list(fresh["partitions"]) == ["persistent://public/default/fresh"]
    assert fresh["msgInCounter"] == 0
    assert fresh["partitions"]["persistent://public/default/fresh"]["storageSize"] == 0
    none = await client.get(f"{BASE}/fresh/partitioned-internalStats")
    assert (none.status_code, none.json()["reason"]) == (404, "Internal topics have not been generated yet")
    assert (await client.put(f"{BASE}/plain")).status_code == 204
    for what in ("partitioned-stats", "partitioned-internalStats"):
        plain = await client.get(f"{BASE}/plain/{what}")
        assert (plain.status_code, plain.json()["reason"]) == (404, "Partitioned Topic not found")
    assert (await client.get(f"{BASE}/%00/partitioned-stats")).status_code == 412


async def test_partitions_owned_elsewhere_are_asked_over_http(
    topic_server: TopicServer, client: httpx.AsyncClient
) -> None:
    assert (await client.put(f"{BASE}/spread/partitions", json=3)).status_code == 204
    await fill(topic_server, "spread-partition-0", 4, backlog=1)
    other_store = await initialized_store()
    async with run_topic_server(other_store, TOPIC_ML_SETTINGS) as other:
        await fill(other, "spread-partition-1", 6, backlog=6)
        topic_server.host.foreign["persistent://public/default/spread-partition-1"] = other.server.base_url
        topic_server.host.foreign["persistent://public/default/spread-partition-2"] = "http://127.0.0.1:9"
        stats = (await client.get(f"{BASE}/spread/partitioned-stats")).json()
        internal = (await client.get(f"{BASE}/spread/partitioned-internalStats")).json()
    await other_store.aclose()
    remote = stats["partitions"]["persistent://public/default/spread-partition-1"]
    assert remote["storageSize"] > 0
    assert sorted(stats["partitions"]) == [
        f"persistent://public/default/spread-partition-{i}" for i in (0, 1)
    ]
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 7  # 1 here + 6 on the other broker
    assert (
        internal["partitions"]["persistent://public/default/spread-partition-1"]["entriesAddedCounter"] == 6
    )


async def test_the_admin_command_line_verbs(topic_server: TopicServer, client: httpx.AsyncClient) -> None:
    assert (await client.put(f"{BASE}/cli/partitions", json=2)).status_code == 204
    await fill(topic_server, "cli-partition-1", 3, backlog=3)

    async def run(*argv: str) -> Any:
        out, err = io.StringIO(), io.StringIO()
        args = ["--admin-url", topic_server.server.base_url, "topics", *argv]
        code = await trio.to_thread.run_sync(lambda: admin_main(args, out, err))
        assert code == 0, err.getvalue()
        return json.loads(out.getvalue())

    flat = await run("partitioned-stats", "public/default/cli")
    assert (flat["metadata"]["partitions"], flat["partitions"]) == (2, {})
    assert flat["subscriptions"]["sub"]["msgBacklog"] == 3
    per = await run("partitioned-stats", "public/default/cli", "--per-partition")
    assert list(per["partitions"]) == ["persistent://public/default/cli-partition-1"]
    for verb in ("partitioned-internal-stats", "partitioned-stats-internal"):
        internal = await run(verb, "public/default/cli")
        assert list(internal["partitions"]) == ["persistent://public/default/cli-partition-1"]
