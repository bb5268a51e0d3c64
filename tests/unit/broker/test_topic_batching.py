"""How a topic cuts arriving messages into entries (server-side batching), against a managed ledger whose
adds complete only when the test says so: the exact interleavings a real bookie cannot be made to produce."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from magnetar.bookkeeper.runtime.clock import SystemClock
from magnetar.broker.core.publish import COMPACT_ALONE, MESSAGES, CompactLayout, EntryLayout, PublishRequest
from magnetar.broker.core.topic import PersistentTopic
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.entry_format import StoredMessage, decode_entry
from magnetar.broker.wire.magnetar_v1 import encode_send, parse_send
from magnetar.broker.wire.topic_name import parse_topic_name
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.position import Position

AddCallback = Callable[[Any], None]


@dataclass
class HeldLedger:
    """Records each add; :meth:`complete` acknowledges the oldest one."""

    adds: list[tuple[bytes, AddCallback]] = field(default_factory=list)
    entries: int = 0

    async def close(self) -> None:
        pass

    def add_entry_nowait(self, data: bytes, callback: AddCallback, messages: int = 1) -> None:
        self.adds.append((bytes(data), callback))

    def complete(self) -> None:
        _, callback = self.adds.pop(0)
        callback(Position(1, self.entries))
        self.entries += 1

    def sizes(self) -> list[int]:
        """Messages per entry of the adds still in flight."""
        return [len(decode_entry(data).messages) for data, _ in self.adds]


@dataclass
class Acks:
    stored: list[tuple[int, int, int]] = field(default_factory=list)
    name: str = "p"

    def on_stored(
        self, request: PublishRequest, ledger_id: int, entry_id: int, index: int, size: int
    ) -> None:
        self.stored.append((entry_id, index, size))

    def on_failed(self, request: PublishRequest, reason: str) -> None:
        raise AssertionError(reason)


def held_topic(ledger: HeldLedger, settings: dict[str, Any]) -> PersistentTopic:
    return PersistentTopic(
        parse_topic_name("persistent://public/default/batching"),
        ledger,  # type: ignore[arg-type]
        BrokerSettings(**settings),
        SystemClock(),
        TopicMetrics(),
    )


def scenario(
    steps: Callable[[PersistentTopic, HeldLedger, Callable[[int], None]], None], **settings: Any
) -> Acks:
    acks = Acks()

    async def main() -> None:
        ledger = HeldLedger()
        topic = held_topic(ledger, settings)
        sequence = iter(range(1_000_000))

        def publish(count: int) -> None:
            for _ in range(count):
                seq = next(sequence)
                message = StoredMessage(b"m%d" % seq, "p", seq, 0)
                size = len(message.payload)
                now = trio.current_time()
                request = PublishRequest(acks, MESSAGES, message, 1, size, seq, 0, None, str(seq), now)  # type: ignore[arg-type]
                topic.publish(request)

        steps(topic, ledger, publish)

    trio.run(main)
    return acks


def test_small_batches_wait_for_the_entry_in_flight_and_big_ones_are_pipelined() -> None:
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger, publish: Callable[[int], None]) -> None:
        publish(1)  # nothing in flight: written at once, alone
        publish(5)  # a small batch waits for the entry in flight
        seen.append(ledger.sizes())
        publish(3)  # the batch reaches the pipelining minimum (8): written next to the one in flight
        seen.append(ledger.sizes())
        publish(2)  # a new small batch waits again
        seen.append(ledger.sizes())
        ledger.complete()  # the first entry completes: one still in flight, the batch of 2 is small
        seen.append(ledger.sizes())
        ledger.complete()  # nothing in flight: the batch is written
        seen.append(ledger.sizes())
        ledger.complete()

    acks = scenario(steps, publish_inflight_entries_max=4, publish_pipeline_batch_messages_min=8)
    assert seen == [[1], [1, 8], [1, 8], [8], [2]]
    assert [entry for entry, _, _ in acks.stored] == [0] + [1] * 8 + [2] * 2
    assert acks.stored[1:3] == [(1, 0, 8), (1, 1, 8)]


def test_one_entry_in_flight_makes_one_batch_per_round_trip() -> None:
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger, publish: Callable[[int], None]) -> None:
        publish(1)
        publish(100)  # above the pipelining minimum, but the pipeline holds one entry
        seen.append(ledger.sizes())
        ledger.complete()
        seen.append(ledger.sizes())
        ledger.complete()

    acks = scenario(steps, publish_inflight_entries_max=1, publish_pipeline_batch_messages_min=8)
    assert seen == [[1], [100]]
    assert len(acks.stored) == 101


def test_a_full_batch_is_written_even_when_the_pipeline_is_full() -> None:
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger, publish: Callable[[int], None]) -> None:
        publish(1)
        publish(25)  # publish_batch_messages_max 10: cut into full batches, the rest waits
        seen.append(ledger.sizes())
        for _ in range(3):
            ledger.complete()
        seen.append(ledger.sizes())
        while ledger.adds:
            ledger.complete()

    acks = scenario(
        steps,
        publish_inflight_entries_max=1,
        publish_pipeline_batch_messages_min=8,
        publish_batch_messages_max=10,
    )
    assert seen == [[1, 10, 10], [5]]
    assert len(acks.stored) == 26


@dataclass
class BinaryProducer:
    """A binary producer's side of the topic: records where its runs were stored."""

    name: str
    stored: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(slot, entry_id, first_index, batch_size) per run."""
    failed: list[int] = field(default_factory=list)
    next_sequence_id: int = 0
    layout: EntryLayout = field(default_factory=CompactLayout)
    schema_version: int = -1

    def run(self, slot: int, count: int) -> PublishRequest:
        payloads = [b"%s%02d" % (self.name.encode()[:2], self.next_sequence_id + i) for i in range(count)]
        run = parse_send(encode_send(slot, payloads)).run
        request = PublishRequest(
            self,
            self.layout,
            run.body,
            run.messages,
            run.payload_bytes,
            self.next_sequence_id,
            0,
            None,  # type: ignore[arg-type]
            slot,
            trio.current_time(),
        )
        self.next_sequence_id += count
        return request

    def on_stored(
        self, request: PublishRequest, ledger_id: int, entry_id: int, first_index: int, size: int
    ) -> None:
        assert isinstance(request.tag, int)
        self.stored.append((request.tag, entry_id, first_index, size))

    def on_failed(self, request: PublishRequest, reason: str) -> None:
        assert isinstance(request.tag, int)
        self.failed.append(request.tag)


def binary_scenario(steps: Callable[[PersistentTopic, HeldLedger], None], **settings: Any) -> None:
    async def main() -> None:
        ledger = HeldLedger()
        steps(held_topic(ledger, settings), ledger)

    trio.run(main)


def test_binary_runs_that_wait_for_the_entry_in_flight_share_one_entry() -> None:
    producer = BinaryProducer("p1")
    seen: list[list[int]] = []
    written: list[bytes] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger) -> None:
        topic.publish(producer.run(0, 3))  # nothing in flight: written at once
        topic.publish(producer.run(1, 2))  # these two wait for it ...
        topic.publish(producer.run(2, 4))
        seen.append(ledger.sizes())
        ledger.complete()  # ... and are written together
        seen.append(ledger.sizes())
        written.append(ledger.adds[0][0])
        ledger.complete()

    binary_scenario(steps, publish_inflight_entries_max=1)
    assert seen == [[3], [6]]
    assert producer.stored == [(0, 0, 0, 3), (1, 1, 0, 6), (2, 1, 2, 6)]
    entry = decode_entry(written[0])
    assert [m.sequence_id for m in entry.messages] == [3, 4, 5, 6, 7, 8]  # consecutive across the runs
    assert [m.payload for m in entry.messages] == [b"p1%02d" % i for i in range(3, 9)]


def test_requests_that_stand_alone_are_pipelined_each_in_its_own_entry() -> None:
    """A Pulsar binary SEND (``COMPACT_ALONE``) is an entry of its own, written at once however many are in
    flight - one unbatched producer once wrote one message per bookie round trip - and still in arrival order
    behind a group of another layout that waits for its turn."""
    alone = BinaryProducer("a1", layout=COMPACT_ALONE)
    gathering = BinaryProducer("g1")
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger) -> None:
        for slot in range(5):
            topic.publish(alone.run(slot, 1 + slot % 2))
        seen.append(ledger.sizes())  # five entries in flight, beyond publish_inflight_entries_max
        topic.publish(gathering.run(0, 2))  # waits for the pipeline ...
        topic.publish(alone.run(5, 1))  # ... and the next SEND waits behind it (arrival order)
        seen.append(ledger.sizes())
        while ledger.adds:
            ledger.complete()
        topic.publish(alone.run(6, 3))  # nothing in flight: at once
        seen.append(ledger.sizes())
        ledger.complete()

    binary_scenario(steps, publish_inflight_entries_max=1)
    assert seen == [[1, 2, 1, 2, 1], [1, 2, 1, 2, 1], [3]]
    assert alone.stored == [
        (0, 0, 0, 1), (1, 1, 0, 2), (2, 2, 0, 1), (3, 3, 0, 2), (4, 4, 0, 1), (5, 6, 0, 1), (6, 7, 0, 3)
    ]  # fmt: skip
    assert gathering.stored == [(0, 5, 0, 2)]


def test_runs_of_different_producers_get_entries_of_their_own_in_arrival_order() -> None:
    first, second = BinaryProducer("p1"), BinaryProducer("p2")
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger) -> None:
        topic.publish(first.run(0, 1))
        topic.publish(first.run(1, 2))
        topic.publish(second.run(0, 3))
        topic.publish(first.run(2, 4))
        ledger.complete()
        seen.append(ledger.sizes())
        while ledger.adds:
            ledger.complete()

    binary_scenario(steps, publish_inflight_entries_max=1)
    assert seen == [[2]]  # one entry per producer's runs; the others wait for the pipeline
    assert first.stored == [(0, 0, 0, 1), (1, 1, 0, 2), (2, 3, 0, 4)]
    assert second.stored == [(0, 2, 0, 3)]


def test_merged_runs_respect_the_batch_limit() -> None:
    producer = BinaryProducer("p1")
    seen: list[list[int]] = []

    def steps(topic: PersistentTopic, ledger: HeldLedger) -> None:
        topic.publish(producer.run(0, 1))
        for slot in range(1, 5):
            topic.publish(producer.run(slot, 3))  # 12 waiting, the limit is 10
        seen.append(ledger.sizes())
        ledger.complete()
        seen.append(ledger.sizes())
        while ledger.adds:
            ledger.complete()

    binary_scenario(
        steps,
        publish_inflight_entries_max=1,
        publish_batch_messages_max=10,
        publish_pipeline_batch_messages_min=32,
    )
    # the fourth run brought the queue over the limit: the full group (9 + 3 would exceed 10) is written at
    # once, the rest waits for the pipeline
    assert seen == [[1, 9], [9]]
    assert [entry for _, entry, _, _ in producer.stored] == [0, 1, 1, 1, 2]


def test_a_failed_entry_fails_every_run_merged_into_it() -> None:
    producer = BinaryProducer("p1")

    def steps(topic: PersistentTopic, ledger: HeldLedger) -> None:
        topic.publish(producer.run(0, 1))
        topic.publish(producer.run(1, 2))
        topic.publish(producer.run(2, 2))
        ledger.complete()
        _, callback = ledger.adds.pop(0)
        callback(ManagedLedgerError("bookies gone"))

    binary_scenario(steps, publish_inflight_entries_max=1)
    assert producer.stored == [(0, 0, 0, 1)]
    assert producer.failed == [1, 2]
