"""The owner proxy's promises, without a network: what the trackers owe the client when the owner's session
ends, and the relay's reconnection (bounded buffer, order, deadline) against scripted upstream sessions."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio
import trio.testing
from fixtures.ws_fakes import FakeClient

from magnetar.bookkeeper.runtime.http.ws_client import WsClosed, WsRejected
from magnetar.broker.metrics.exposition import render_text
from magnetar.broker.owner_proxy.metrics import ProxyCounters, ProxyMetrics
from magnetar.broker.owner_proxy.proxy import OwnerProxy
from magnetar.broker.owner_proxy.relay import OPEN_FINAL_STATUSES, GaveUp, Relay, connect_with_retry
from magnetar.broker.protocols.magnetar_v1.relay_tracking import BinaryConsumerTracker, BinaryProducerTracker
from magnetar.broker.protocols.pulsar_ws.relay_tracking import JsonConsumerTracker, JsonProducerTracker
from magnetar.broker.protocols.relay_tracking import FrameKind
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.magnetar_v1 import (
    FrameType,
    encode_permit,
    encode_receipt,
    encode_send,
    message_record,
    messages_frame,
)
from magnetar.broker.wire.message_id import MessageId


def send(context: str) -> str:
    return json.dumps({"payload": "eA==", "context": context})


def ok(context: str) -> str:
    return json.dumps({"result": "ok", "messageId": "CAEQAg==", "context": context})


# -- trackers ----------------------------------------------------------------------------------------------


def test_a_json_producer_owes_an_error_with_the_same_context_for_each_unanswered_message() -> None:
    tracker = JsonProducerTracker()
    for context in ("1", "2", "3"):
        assert tracker.on_client(send(context)) is FrameKind.PUBLISH
        tracker.on_forward(send(context))
    tracker.on_upstream(ok("2"))  # out of order: still matched by context
    assert tracker.pending == 2
    owed = [json.loads(a) for a in tracker.lost("owner gone")]
    assert [(a["result"], a["context"], a["errorMsg"]) for a in owed] == [
        ("send-error:8", "1", "owner gone"),
        ("send-error:8", "3", "owner gone"),
    ]
    assert tracker.lost("again") == []  # owed once
    refused = tracker.refused(send("9"), "buffer full")
    assert refused is not None
    assert json.loads(refused)["context"] == "9"


def test_a_binary_producer_owes_a_send_error_per_unanswered_send() -> None:
    tracker = BinaryProducerTracker()
    for request_id in (7, 8):
        tracker.on_forward(encode_send(request_id, [b"x"]))
    tracker.on_upstream(encode_receipt(7, []))
    owed = tracker.lost("owner gone")
    assert len(owed) == 1
    frame = owed[0]
    assert isinstance(frame, bytes)
    assert frame[0] == FrameType.SEND_ERROR
    assert struct.unpack_from("<QH", frame, 1) == (8, 8)


def test_a_pull_consumer_gets_its_permits_again_and_a_reader_restarts_after_its_last_message() -> None:
    json_consumer = JsonConsumerTracker(pull_mode=True, reader=False)
    assert json_consumer.on_client(json.dumps({"type": "permit", "permitMessages": 5})) is FrameKind.PERMIT
    json_consumer.on_upstream('{"messageId":"CAEQAg==","payload":"eA=="}')
    assert json.loads(cast(str, json_consumer.regrant()[0])) == {"type": "permit", "permitMessages": 4}

    binary_consumer = BinaryConsumerTracker(pull_mode=True, reader=False)
    assert binary_consumer.on_client(encode_permit(3)) is FrameKind.PERMIT
    record = message_record(-1, 4, 9, -1, 0, 0, StoredMessage(b"x", "p", 0, 0, 0, None))
    binary_consumer.on_upstream(messages_frame([record, record]))
    assert binary_consumer.regrant() == [encode_permit(1)]

    reader = JsonConsumerTracker(pull_mode=False, reader=True)
    assert reader.query_overrides() == {}
    reader.on_upstream('{"messageId":"CAEQAg==","payload":"eA=="}')
    assert reader.query_overrides() == {"messageId": "CAEQAg=="}
    binary_reader = BinaryConsumerTracker(pull_mode=False, reader=True)
    binary_reader.on_upstream(messages_frame([record]))
    started_after = MessageId.from_base64(binary_reader.query_overrides()["messageId"])
    assert (started_after.ledger_id, started_after.entry_id) == (4, 9)


# -- the relay ---------------------------------------------------------------------------------------------


class FakeUpstream:
    """An owner's session: answers every publish, or ends (1001) after ``answer_max`` answers."""

    def __init__(self, name: str, answer_max: int = 1_000) -> None:
        self.peer = name
        self.received: list[str] = []
        self.answer_max = answer_max
        self._to_proxy_send, self._to_proxy = trio.open_memory_channel[str](100)

    async def send(self, message: str | bytes) -> None:
        assert isinstance(message, str)
        self.received.append(message)
        if len(self.received) <= self.answer_max:
            await self._to_proxy_send.send(ok(json.loads(message)["context"]))
        elif len(self.received) == self.answer_max + 1:
            self._to_proxy_send.close()

    async def send_many(self, messages: list[str | bytes]) -> None:
        for message in messages:
            await self.send(message)

    async def receive_batch(self) -> list[str | bytes]:
        try:
            return [await self._to_proxy.receive()]
        except trio.EndOfChannel:
            raise WsClosed(1001, "Topic unloaded") from None

    async def aclose(self) -> None:
        pass


def settings(**overrides: Any) -> BrokerSettings:
    values: dict[str, Any] = {
        "ws_proxy_reconnect_backoff_initial_ms": 10,
        "ws_proxy_reconnect_backoff_max_ms": 20,
        "ws_proxy_reconnect_deadline_ms": 500,
        **overrides,
    }
    return BrokerSettings(**values)


async def test_the_relay_answers_the_lost_message_and_forwards_what_came_during_the_move_in_order() -> None:
    client = FakeClient()
    first = FakeUpstream("owner-a", answer_max=2)
    second = FakeUpstream("owner-b")
    gate = trio.Event()

    async def connect(overrides: dict[str, str]) -> Any:
        await gate.wait()  # the move takes a while: the client's next messages wait in the buffer
        return second

    counters = ProxyCounters()
    relay = Relay(
        cast(Any, client), cast(Any, first), JsonProducerTracker(), connect, settings(), "t", counters
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        for context in ("0", "1", "2"):  # "2" reaches the owner, which goes away without answering it
            await client.inbox_send.send(send(context))
        await trio.testing.wait_all_tasks_blocked()
        for context in ("3", "4"):
            await client.inbox_send.send(send(context))
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        await client.inbox_send.aclose()
    answers = [(json.loads(a)["context"], json.loads(a)["result"]) for a in client.sent]
    assert answers == [("0", "ok"), ("1", "ok"), ("2", "send-error:8"), ("3", "ok"), ("4", "ok")]
    assert [json.loads(m)["context"] for m in second.received] == ["3", "4"]
    assert relay.moves == 1
    assert (counters.moves, counters.failed_back, counters.gave_up) == (1, 1, 0)
    assert (counters.frames_to_owner, counters.frames_to_client) == (5, 5)


async def test_a_full_buffer_answers_an_error_and_a_passed_deadline_closes_the_client_with_1001() -> None:
    client = FakeClient()
    first = FakeUpstream("owner-a", answer_max=0)
    attempts = 0

    async def connect(overrides: dict[str, str]) -> Any:
        nonlocal attempts
        attempts += 1
        raise WsRejected(503, b'{"reason": "bundle not ready"}')

    proxy_settings = settings(ws_proxy_buffer_messages_max=1, ws_proxy_reconnect_deadline_ms=300)
    counters = ProxyCounters()
    relay = Relay(
        cast(Any, client), cast(Any, first), JsonProducerTracker(), connect, proxy_settings, "t", counters
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            await client.inbox_send.send(send("0"))  # ends the owner's session unanswered
            await trio.testing.wait_all_tasks_blocked()
            await client.inbox_send.send(send("1"))  # buffered
            await client.inbox_send.send(send("2"))  # the buffer is full: answered at once
    contexts = [(json.loads(a)["context"], json.loads(a)["result"]) for a in client.sent]
    assert contexts == [("0", "send-error:8"), ("2", "send-error:8")]
    assert client.close_code == 1001
    assert attempts >= 2
    assert (counters.moves, counters.failed_back, counters.gave_up) == (0, 2, 1)


def test_the_proxy_counters_are_exposed_under_their_metric_names() -> None:
    counters = ProxyCounters(sessions=2, sessions_opened=5, moves=3, failed_back=1, frames_to_client=40)
    text = render_text([ProxyMetrics("c1", counters)])
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    assert 'magnetar_ws_proxy_sessions{cluster="c1"} 2.0' in lines
    assert 'magnetar_ws_proxy_sessions_opened_total{cluster="c1"} 5.0' in lines
    assert 'magnetar_ws_proxy_moves_total{cluster="c1"} 3.0' in lines
    assert 'magnetar_ws_proxy_failed_back_total{cluster="c1"} 1.0' in lines
    assert 'magnetar_ws_proxy_frames_to_client_total{cluster="c1"} 40.0' in lines
    assert 'magnetar_ws_proxy_gave_up_total{cluster="c1"} 0.0' in lines


@pytest.mark.parametrize("code", [1000, 4003])
async def test_an_owner_that_ends_the_session_for_good_ends_the_clients_too(code: int) -> None:
    client = FakeClient()

    class Ending(FakeUpstream):
        async def receive_batch(self) -> list[str | bytes]:
            raise WsClosed(code, "done")

    async def connect(overrides: dict[str, str]) -> Any:
        raise AssertionError("no reconnect after a final close")

    relay = Relay(cast(Any, client), cast(Any, Ending("a")), JsonProducerTracker(), connect, settings(), "t")
    with trio.fail_after(5):
        await relay.run()
    assert client.close_code == code


def test_the_proxy_settings_are_bounded_and_related() -> None:
    with pytest.raises(ValueError, match="ws_proxy_reconnect_backoff_initial_ms"):
        BrokerSettings(ws_proxy_reconnect_backoff_initial_ms=5_000, ws_proxy_reconnect_backoff_max_ms=1_000)
    with pytest.raises(ValueError, match="ws_proxy_reconnect_backoff_max_ms"):
        BrokerSettings(ws_proxy_reconnect_backoff_max_ms=10_000, ws_proxy_reconnect_deadline_ms=5_000)
    with pytest.raises(ValueError, match="ws_proxy_buffer_messages_max"):
        BrokerSettings(ws_proxy_buffer_messages_max=-1)
    assert BrokerSettings().ws_proxy_reconnect_deadline_ms == 60_000


async def test_ws_proxy_sessions_max_bounds_upstream_sessions_one_per_partition() -> None:
    """A session on a partitioned topic holds one upstream session per partition: each counts in the bound,
    and a session that would pass it is answered 503 naming the setting (the client session counts once in
    the sessions metric)."""

    class Request:
        def __init__(self) -> None:
            self.rejected: list[Any] = []

        async def reject(self, response: Any) -> None:
            self.rejected.append(response)

    service = SimpleNamespace(settings=settings(ws_proxy_sessions_max=5))
    proxy = OwnerProxy(cast(Any, service))
    request = Request()
    assert await proxy._admit(cast(Any, request), 4)  # a 4-partition session
    assert not await proxy._admit(cast(Any, request), 2)  # 4 + 2 > 5
    [refusal] = request.rejected
    assert refusal.status == 503
    assert b"ws_proxy_sessions_max=5" in refusal.body
    assert (proxy.counters.sessions, proxy.counters.upstreams, proxy.counters.sessions_refused) == (1, 4, 1)
    assert await proxy._admit(cast(Any, request), 1)
    proxy._release(4)
    proxy._release(1)
    assert (proxy.counters.sessions, proxy.counters.upstreams) == (0, 0)


@pytest.mark.parametrize(("status", "final"), [(409, True), (429, True), (503, False), (500, False)])
async def test_an_owner_refusal_at_open_is_passed_on_at_once_or_retried(
    status: int, final: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """At open, a conflict or 'too many' is the client's answer (no minute of retries before a 503); an
    unavailable owner is retried until the deadline."""
    settings = BrokerSettings(ws_proxy_reconnect_deadline_ms=2_000)
    attempts = 0

    async def refuse(overrides: dict[str, str]) -> Any:
        nonlocal attempts
        attempts += 1
        raise WsRejected(status, b"refused by the owner")

    if final:
        with pytest.raises(WsRejected) as refused:
            await connect_with_retry(refuse, dict, settings, "test", final_statuses=OPEN_FINAL_STATUSES)
        assert refused.value.status == status
        assert attempts == 1
    else:
        with pytest.raises(GaveUp, match=f"{status} refused by the owner"):
            await connect_with_retry(refuse, dict, settings, "test", final_statuses=OPEN_FINAL_STATUSES)
        assert attempts > 1
