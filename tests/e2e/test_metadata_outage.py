"""A broker whose metadata store is away: publishing and delivery go on past the ledger cap, what needs the
store waits (bounded) and fails with 503, the outage is logged once as it begins and once as it ends, the
figures are metrics, and everything resumes when the store is back."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import httpx
import pytest
import websocket
from fixtures.broker import Cluster, publish, receive

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"
CAP = 5


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_broker_serves_through_an_outage_and_defers_what_needs_the_store(
    cluster: Cluster, ws_connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="magnetar.broker.metadata_outage")
    broker = cluster.start_broker(max_entries_per_ledger=CAP, metadata_wait_timeout_ms=300)
    consumer = ws_connect(
        f"{broker.ws_url}/ws/v2/consumer/{NS}/steady/sub?subscriptionInitialPosition=Earliest"
    )
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/steady")
    before = [publish(producer, f"m{i}") for i in range(3)]
    assert [a["result"] for a in before] == ["ok"] * 3
    assert len(receive(consumer, 3)) == 3

    broker.call_sync(broker.metadata.disconnect)
    during = [publish(producer, f"m{i}") for i in range(3, 3 + 3 * CAP)]
    assert [a["result"] for a in during] == ["ok"] * (3 * CAP)
    delivered = receive(consumer, 3 * CAP)
    assert [base64.b64decode(str(m["payload"])).decode() for m in delivered] == [
        f"m{i}" for i in range(3, 3 + 3 * CAP)
    ]
    # a new topic needs the store: it waits metadata_wait_timeout_ms, then 503
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/brand-new")
    assert refused.value.status_code == 503
    with httpx.Client(base_url=broker.http_url) as http:
        text = http.get("/metrics").text
    assert metric(text, "magnetar_metadata_store_healthy") == 0
    assert metric(text, "magnetar_ledger_rollovers_deferred") == 1
    assert metric(text, "magnetar_ledger_entries_past_cap") >= 2 * CAP
    assert metric(text, "magnetar_rollover_deferred_entries_max") == 50_000

    broker.call_sync(broker.metadata.reconnect)
    after = publish(ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/brand-new"), "first")
    assert after["result"] == "ok"
    assert publish(producer, "m-after")["result"] == "ok"
    outage_lines = [r.getMessage() for r in caplog.records if r.name == "magnetar.broker.metadata_outage"]
    assert len(outage_lines) == 2
    assert outage_lines[0].startswith("metadata store unavailable (disconnected, outage #1)")
    assert "rollover_deferred_entries_max=50000" in outage_lines[0]
    assert outage_lines[1].startswith("metadata store back after")
    assert "1 topics have deferred rollovers" in outage_lines[1]
