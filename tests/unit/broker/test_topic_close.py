"""What a producer is told when its topic closes (unload, broker shutdown) with writes in flight.

The audit's broker answered ``send-error`` ("Broker shutting down") for messages that were stored all the
same, so a client resending them created duplicates: closing failed every message the producer had pending,
the ones already handed to the bookies included. A clean close now writes what it had accepted, answers each
message with its real outcome, and refuses - alone - only what arrives after the close began. The managed
ledger here completes adds only when the test says so, to hold the writes in flight.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from magnetar.bookkeeper.runtime.clock import SystemClock
from magnetar.bookkeeper.runtime.http import CLOSE_GOING_AWAY
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.publish import MESSAGES
from magnetar.broker.core.topic import PersistentTopic
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.protocols.pulsar_ws.messages import PublishRequest
from magnetar.broker.protocols.pulsar_ws.session_io import JsonAcks
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.topic_name import parse_topic_name
from magnetar.managed_ledger.errors import ManagedLedgerFencedError
from magnetar.managed_ledger.position import Position


class HeldLedger:
    """Records each add; :meth:`complete` acknowledges the oldest one (or fails it with ``error``)."""

    def __init__(self) -> None:
        self.adds: list[Any] = []
        self.entries = 0
        self.cursors: dict[str, Any] = {}
        self.is_terminated = False
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    def add_entry_nowait(self, data: bytes, callback: Any, messages: int = 1) -> None:
        self.adds.append(callback)

    def complete(self, error: Exception | None = None) -> None:
        callback = self.adds.pop(0)
        callback(error if error is not None else Position(1, self.entries))
        self.entries += 1


class Frames:
    """A session's outbound frames, as (result, context) pairs."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, str]] = []

    def push(self, frame: bytes) -> None:
        answer = json.loads(frame)
        self.answers.append((answer["result"], answer["context"]))


def topic_with_producer() -> tuple[PersistentTopic, HeldLedger, Producer, Frames, list[int]]:
    ledger = HeldLedger()
    topic = PersistentTopic(
        parse_topic_name("persistent://public/default/closing"),
        ledger,  # type: ignore[arg-type]
        BrokerSettings(),
        SystemClock(),
        TopicMetrics(),
    )
    frames = Frames()
    kicks: list[int] = []
    producer = topic.add_producer(
        "p", lambda: Producer(topic, "p", Capacity(100), partition=-1, clock=SystemClock())
    )
    _acks[producer] = JsonAcks(frames)  # type: ignore[arg-type]
    producer.disconnect = lambda reason: kicks.append(CLOSE_GOING_AWAY)  # as the WebSocket adapter does
    return topic, ledger, producer, frames, kicks


_acks: dict[Producer, JsonAcks] = {}
"""Each producer's completion: the JSON API's acknowledgements into its frames."""


def send(producer: Producer, context: str) -> None:
    request = PublishRequest(b"payload", context=context)
    producer.publish(MESSAGES, request, 1, 7, _acks[producer], context, trio.current_time())


def test_a_clean_close_answers_every_accepted_message_with_its_outcome() -> None:
    async def main() -> None:
        topic, ledger, producer, frames, kicks = topic_with_producer()
        async with trio.open_nursery() as nursery:
            await nursery.start(topic.run)
            send(producer, "0")  # nothing in flight: written at once
            send(producer, "1")  # these two wait in the batch being built
            send(producer, "2")
            assert len(ledger.adds) == 1
            nursery.start_soon(topic.close, "Broker shutting down")
            await trio.testing.wait_all_tasks_blocked()
            assert len(ledger.adds) == 2  # the close wrote the waiting batch
            send(producer, "3")  # arrives once the close began: refused, alone
            assert frames.answers == [("send-error:8", "3")]
            assert kicks == []  # the session stays until the writes in flight are answered
            ledger.complete()
            ledger.complete()
            await trio.testing.wait_all_tasks_blocked()
        assert frames.answers == [("send-error:8", "3"), ("ok", "0"), ("ok", "1"), ("ok", "2")]
        assert kicks == [1001]
        assert ledger.closed

    trio.run(main)


def test_a_failed_write_fails_it_and_what_follows_never_what_came_before() -> None:
    async def main() -> None:
        topic, ledger, producer, frames, _ = topic_with_producer()
        async with trio.open_nursery() as nursery:
            await nursery.start(topic.run)
            for context in "012":
                send(producer, context)
            ledger.complete()  # "0" stored; the batch of "1" and "2" is written next
            ledger.complete(ManagedLedgerFencedError("fenced"))
            topic.stop()
        assert [answer for answer, _ in frames.answers] == ["ok", "send-error:8", "send-error:8"]
        assert [context for _, context in frames.answers] == ["0", "1", "2"]

    trio.run(main)
