"""Producers: one WebSocket producer session publishing to a topic (or to each partition of one).

Ordering (Pulsar's guarantee for one producer): a producer's messages are stored and acknowledged in send
order - the topic appends them in arrival order and the managed ledger calls back in add order. When a send
fails, that message and *every later message of the producer still pending* fail with it (``send-error:8``
with the cause), so the client never sees "ok" for a message sent after a failed one; callbacks arriving
later for those messages are ignored. The producer then goes on: new sends may succeed (as a Pulsar client
producer keeps working after a failed send). Messages sent *before* a failed one are not failed with it:
they may be in flight, and are answered when their write completes. A message whose write failed may or may
not have been stored (the outcome of a failed add is unknown), as in Pulsar; one refused before it was written
(its topic closing, say) was not stored, so resending it creates no duplicate.

Back-pressure: a producer holds at most ``maxPendingMessages`` unacknowledged messages (capped by the
broker's ``producer_pending_messages_max``); the WebSocket handler waits for room before it reads the next
frame, so TCP slows the client down. Pulsar's WebSocket producer answers an error instead
(``blockIfQueueFull(false)``); waiting loses nothing and needs nothing of the client.

Partitioned topics: :class:`PartitionedProducer` routes each message to one partition's producer - by the
hash of its key (``hashingScheme``: Java's ``String.hashCode`` by default, or Murmur3), else by
``messageRoutingMode``: ``SinglePartition`` (one partition picked at random for the session) or
``RoundRobinPartition`` (the next partition for each message).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from magnetar.broker.binary_protocol import (
    ReceiptRange,
    SendFrame,
    SendMessage,
    SendRun,
    send_messages,
    sub_run,
)
from magnetar.broker.consumer import OutboundFrames
from magnetar.broker.entry_format import StoredMessage
from magnetar.broker.key_hash import partition_for_key
from magnetar.broker.message_id import encode_message_id
from magnetar.broker.rates import Rate
from magnetar.broker.ws_errors import WsErrorCode
from magnetar.broker.ws_messages import PublishRequest, producer_ack_error, producer_ack_ok

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic

Kick = Callable[[int, str], None]


class Capacity:
    """Messages pending across the producers of one session, bounded by ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.count = 0
        self._freed = trio.Event()

    def taken(self, count: int = 1) -> None:
        self.count += count

    def returned(self, count: int = 1) -> None:
        self.count -= count
        if self.count < self.limit:
            self._freed.set()

    async def wait(self) -> None:
        while self.count >= self.limit:
            self._freed = trio.Event()
            await self._freed.wait()

    async def wait_for(self, count: int) -> None:
        """Room for ``count`` messages; a group larger than the limit goes alone (when nothing is pending)."""
        while self.count and self.count + count > self.limit:
            self._freed = trio.Event()
            await self._freed.wait()


@dataclass(slots=True, eq=False)
class PendingMessage:
    producer: Producer
    message: StoredMessage
    context: str | None
    received_at: float
    failed: bool = field(default=False)


class EntryReceipt(Protocol):
    """Where the outcome of a :class:`PendingEntry` goes (a binary SEND frame's receipt)."""

    def stored(self, slot: int, where: ReceiptRange) -> None:
        """Run ``slot`` of the frame is stored ``where``."""
        ...

    def fail(self, reason: str) -> None: ...


@dataclass(slots=True, eq=False)
class PendingEntry:
    """Messages of one binary SEND frame (a run of it), stored in one batch entry - with the runs of the same
    producer that waited beside it (see :mod:`.topic`)."""

    producer: Producer
    run: SendRun
    first_sequence_id: int
    receipt: EntryReceipt
    slot: int
    """Index of this run in its frame's receipt."""
    received_at: float
    failed: bool = field(default=False)


class Producer:
    """One producer on one topic (partition)."""

    def __init__(
        self,
        topic: PersistentTopic,
        name: str,
        frames: OutboundFrames,
        capacity: Capacity,
        *,
        initial_sequence_id: int | None = None,
    ) -> None:
        self.topic = topic
        self.name = name
        self.frames = frames
        self.capacity = capacity
        self.pending: deque[PendingMessage | PendingEntry] = deque()
        self._sequence_id = -1 if initial_sequence_id is None else initial_sequence_id
        self.kick: Kick | None = None
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.rate_in = Rate()
        self.connected_since_ms = topic.now_ms()
        self.address = ""

    def send(self, request: PublishRequest, received_at: float) -> None:
        """Publish one message; its ack (or error) is pushed to the session's frames later."""
        if self.closed:
            self.frames.push(
                producer_ack_error(WsErrorCode.UNKNOWN_ERROR, "Producer is closed", request.context)
            )
            return
        self._sequence_id += 1
        message = StoredMessage(
            request.payload,
            self.name,
            self._sequence_id,
            self.topic.now_ms(),
            request.event_time_ms,
            request.key,
            request.properties,
        )
        pending = PendingMessage(self, message, request.context, received_at)
        self.pending.append(pending)
        self.capacity.taken()
        self.topic.publish(pending)

    def on_stored(
        self, pending: PendingMessage, ledger_id: int, entry_id: int, index: int, size: int
    ) -> None:
        if pending.failed:
            return
        head = self.pending.popleft()
        assert head is pending, "a producer's messages are acknowledged in send order"
        self.capacity.returned()
        self.msg_in_counter += 1
        self.bytes_in_counter += len(pending.message.payload)
        message_id = encode_message_id(ledger_id, entry_id, self.topic.partition, index, size)
        self.frames.push(producer_ack_ok(message_id, pending.context))

    def send_entry(self, run: SendRun, receipt: EntryReceipt, slot: int, received_at: float) -> None:
        """Publish a binary run as (part of) one batch entry; the outcome goes to ``receipt``."""
        if self.closed:
            receipt.fail("Producer is closed")
            return
        first = self._sequence_id + 1
        self._sequence_id += run.messages
        pending = PendingEntry(self, run, first, receipt, slot, received_at)
        self.pending.append(pending)
        self.capacity.taken(run.messages)
        self.topic.publish_entry(pending)

    def on_entry_stored(
        self, pending: PendingEntry, ledger_id: int, entry_id: int, first_index: int, size: int
    ) -> None:
        if pending.failed:
            return
        head = self.pending.popleft()
        assert head is pending, "a producer's messages are acknowledged in send order"
        count = pending.run.messages
        self.capacity.returned(count)
        self.msg_in_counter += count
        self.bytes_in_counter += pending.run.payload_bytes
        where = ReceiptRange(self.topic.partition, ledger_id, entry_id, first_index, count, size)
        pending.receipt.stored(pending.slot, where)

    def on_failed(self, pending: PendingMessage | PendingEntry, reason: str) -> None:
        """``pending`` failed: it and every later pending message of this producer fail. Earlier ones stay
        pending (they may be in flight and get stored: they are answered when their write completes)."""
        if pending.failed:
            return
        queue = self.pending
        try:
            first = queue.index(pending)  # identity: pending items compare by identity
        except ValueError:
            return
        failed = [queue.pop() for _ in range(len(queue) - first)]
        failed.reverse()
        count = 0
        for item in failed:
            item.failed = True
            if isinstance(item, PendingMessage):
                count += 1
                self.frames.push(producer_ack_error(WsErrorCode.UNKNOWN_ERROR, reason, item.context))
            else:
                count += item.run.messages
                item.receipt.fail(reason)
        self.capacity.returned(count)

    def close(self) -> None:
        self.closed = True

    def stats(self) -> dict[str, object]:
        from magnetar.broker.date_format import format_timestamp  # noqa: PLC0415

        return {
            "producerName": self.name,
            "msgRateIn": self.rate_in.msgs_per_s,
            "msgThroughputIn": self.rate_in.bytes_per_s,
            "averageMsgSize": self.bytes_in_counter / self.msg_in_counter if self.msg_in_counter else 0.0,
            "msgInCounter": self.msg_in_counter,
            "bytesInCounter": self.bytes_in_counter,
            "accessMode": "Shared",
            "address": self.address,
            "connectedSince": format_timestamp(self.connected_since_ms),
            "clientVersion": "websocket",
            "metadata": {},
        }


class PartitionedProducer:
    """Routes a session's messages over the producers of a partitioned topic's partitions."""

    def __init__(
        self,
        producers: list[Producer],
        *,
        routing_mode: str,
        hashing_scheme: str | None,
        rng: random.Random,
    ) -> None:
        self.producers = producers
        self._round_robin = routing_mode == "RoundRobinPartition"
        self._hashing_scheme = hashing_scheme
        self._single = rng.randrange(len(producers))
        self._next = rng.randrange(len(producers))

    def route(self, key: str | None) -> Producer:
        count = len(self.producers)
        if key is not None:
            return self.producers[partition_for_key(key, count, self._hashing_scheme)]
        if self._round_robin:
            producer = self.producers[self._next % count]
            self._next += 1
            return producer
        return self.producers[self._single]

    def send(self, request: PublishRequest, received_at: float) -> None:
        self.route(request.key).send(request, received_at)

    def route_frame(self, frame: SendFrame) -> list[tuple[Producer, SendRun]]:
        """Runs of consecutive messages of a binary frame for the same partition: a message with a key goes
        to its key's partition, the others of the frame to one partition picked for the whole frame (as
        Pulsar's batching producer routes batches)."""
        keyless = self.route(None)
        if not frame.keyed:
            return [(keyless, frame.run)]
        count = len(self.producers)
        runs: list[tuple[Producer, list[SendMessage]]] = []
        for message in send_messages(frame.run):
            if message.key is None:
                producer = keyless
            else:
                producer = self.producers[partition_for_key(message.key, count, self._hashing_scheme)]
            if runs and runs[-1][0] is producer:
                runs[-1][1].append(message)
            else:
                runs.append((producer, [message]))
        return [(producer, sub_run(frame.run, messages)) for producer, messages in runs]
