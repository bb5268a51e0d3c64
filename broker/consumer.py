"""Consumers and the flow control of one WebSocket consumer/reader session (Pulsar's ``ConsumerHandler``).

Flow control follows the WebSocket handler of Pulsar (PR #3058):

* push mode - at most ``receiverQueueSize`` (``0`` meaning 1) messages pushed and not yet acknowledged or
  negatively acknowledged; every ack/nack releases one;
* pull mode - nothing is pushed without permits; ``{"type":"permit","permitMessages":N}`` adds N, every
  delivery uses one, acks release nothing;
* reader - like push mode, but any frame that is not ``isEndOfTopic`` releases one (it acknowledges nothing).

One session may span several consumers: a consumer of a partitioned topic is one :class:`Consumer` per
partition sharing the session's :class:`FlowControl` and outbound frame queue, so the window holds for the
whole session. A dispatcher asks ``consumer.available()`` before it pushes and pushes synchronously; frames
wait in the session's :class:`OutboundFrames` for the session's sender task, which is the only one that
awaits the socket: a slow client stalls only its own deliveries.

Every one of these is bounded in messages and in bytes, whatever the client grants:

* the outbound queue holds at most ``ws_send_queue_messages_max`` messages and ``ws_send_queue_bytes_max``
  bytes (plus the message that crossed the bound): ``available()`` is 0 while it is full, and the session's
  handler waits for room before it reads the next request (producer acknowledgements and error answers go
  through the same queue);
* pull-mode permits are a number, not a promise of memory: a consumer granting 2,147,483,647 permits gets
  messages as fast as it reads them - the permits a dispatcher may use at once are capped at the room in the
  outbound queue, and the permits held are capped at 2,147,483,647 (Pulsar's ``int``);
* messages pushed and not acknowledged (held for redelivery) are bounded per consumer by
  ``consumer_unacked_messages_max`` (Pulsar's ``maxUnackedMessagesPerConsumer``) and
  ``consumer_unacked_bytes_max`` (payload bytes): a consumer at either bound gets nothing more until it
  acknowledges.

Each consumer keeps its pending (pushed, unacknowledged) messages in push order, for acks, ack-timeout
redelivery (``ackTimeoutMillis``: a message not acked within the timeout is redelivered with
``redeliveryCount + 1``), negative acks (redelivered after ``negativeAckRedeliveryDelay``) and for handing
them back to the subscription when the consumer goes away.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.runtime.http import WebSocket, WebSocketClosed
from magnetar.broker.binary_protocol import message_record, messages_frame
from magnetar.broker.date_format import format_timestamp
from magnetar.broker.entry_format import StoredMessage
from magnetar.broker.message_id import delivered_message_id
from magnetar.broker.rates import Rate
from magnetar.broker.ws_messages import consumer_message_frame

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription

log = logging.getLogger(__name__)

MsgKey = tuple[int, int, int]
"""``(ledgerId, entryId, batchIndex)`` of a message within one topic (partition)."""

_consumer_ids = itertools.count(1)

RECORDS_FRAME_BYTES_MAX = 1024 * 1024
"""Message records in one binary MESSAGES frame (more records start another frame)."""
PERMITS_MAX = 2**31 - 1
"""Pull-mode permits a session may hold (Pulsar's permits are a Java ``int``)."""
OUTBOUND_BYTES_MAX = 1024 * 1024
OUTBOUND_MESSAGES_MAX = 4096
UNACKED_MESSAGES_MAX = 50_000
UNACKED_BYTES_MAX = 16 * 1024 * 1024


@dataclass(slots=True)
class Delivery:
    """One message on its way to a consumer (or waiting for redelivery)."""

    ledger_id: int
    entry_id: int
    batch_index: int
    batch_size: int
    message: StoredMessage
    slot: int = 0
    """Key_Shared slot of the message's key (0 for other subscription types)."""
    sent_at: float = 0.0

    @property
    def key(self) -> MsgKey:
        return (self.ledger_id, self.entry_id, self.batch_index)


class OutboundFrames:
    """Frames waiting for one WebSocket, pushed synchronously, sent by :meth:`run` (the only writer).

    A binary (``magnetar.v1``) consumer session pushes message *records* instead: consecutive records are
    sent as one MESSAGES frame (at most ``records_frame_bytes_max`` bytes of records each), in order with the
    other frames.

    The queue is *full* once it holds ``messages_max`` messages (frames and records) or ``bytes_max`` bytes,
    counted until the socket's send queue took them: pushes still succeed (a dispatcher pushes only while
    :meth:`room` allows, a producer's acknowledgements are bounded by its pending messages), and whoever
    pushes on behalf of the client waits in :meth:`wait_for_room`. Listeners (the dispatchers) are called
    when a full queue has room again."""

    def __init__(
        self,
        *,
        text: bool = True,
        records_frame_bytes_max: int = RECORDS_FRAME_BYTES_MAX,
        bytes_max: int = OUTBOUND_BYTES_MAX,
        messages_max: int = OUTBOUND_MESSAGES_MAX,
    ) -> None:
        self.text = text
        """Text frames (Pulsar's JSON API) or binary frames (the binary subprotocol)."""
        self._frames: deque[bytes] = deque()
        self._records: list[bytes] = []
        self._records_bytes = 0
        self._records_frame_bytes_max = records_frame_bytes_max
        self.bytes = 0
        """Bytes pushed and not yet taken by the socket's send queue."""
        self.messages = 0
        self.bytes_max = bytes_max
        self.messages_max = messages_max
        self._event = trio.Event()
        self._room = trio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._closed = False
        self._finishing = False

    def __len__(self) -> int:
        return len(self._frames) + len(self._records)

    @property
    def full(self) -> bool:
        return self.bytes >= self.bytes_max or self.messages >= self.messages_max

    def room(self) -> int:
        """Messages that may be pushed before the queue is full by count (0 when it is full by bytes)."""
        if self.bytes >= self.bytes_max:
            return 0
        return self.messages_max - self.messages

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    async def wait_for_room(self) -> None:
        """Wait while the queue is full (returns at once when it is not, or once it is closed)."""
        while self.full and not self._closed:
            self._room = trio.Event()
            await self._room.wait()

    def push(self, frame: bytes) -> None:
        if self._closed:
            return
        if self._records:
            self._close_records()
        self._frames.append(frame)
        self.bytes += len(frame)
        self.messages += 1
        self._event.set()

    def push_record(self, record: bytes) -> None:
        """One message of a MESSAGES frame (binary sessions)."""
        if self._closed:
            return
        self._records.append(record)
        size = len(record)
        self._records_bytes += size
        self.bytes += size
        self.messages += 1
        if self._records_bytes >= self._records_frame_bytes_max:
            self._close_records()
        self._event.set()

    def _close_records(self) -> None:
        self._frames.append(messages_frame(self._records))
        self._records = []
        self._records_bytes = 0

    def finish(self) -> None:
        """The session is ending: :meth:`run` returns once the frames queued so far are sent."""
        self._finishing = True
        self._event.set()

    def close(self) -> None:
        self._closed = True
        self._frames.clear()
        self._records = []
        self.bytes = 0
        self.messages = 0
        self._event.set()
        self._room.set()

    def _taken(self, size: int, count: int) -> None:
        """The socket's send queue took ``count`` messages of ``size`` bytes."""
        was_full = self.full
        self.bytes -= size
        self.messages -= count
        if was_full and not self.full:
            self._room.set()
            for listener in self._listeners:
                listener()

    async def run(self, ws: WebSocket) -> None:
        """Send queued frames until the socket or this queue closes (all queued frames in one call)."""
        frames = self._frames
        try:
            while True:
                if self._records:
                    self._close_records()
                if frames:
                    batch = list(frames)
                    frames.clear()
                    size, count = self.bytes, self.messages  # everything queued is in the batch
                    await ws.send_many(batch, text=self.text)
                    if not self._closed:
                        self._taken(size, count)
                    continue
                self._event = trio.Event()
                if self._stopped():
                    return
                await self._event.wait()
        except WebSocketClosed:
            self.close()

    def _stopped(self) -> bool:
        return self._closed or self._finishing


class FlowControl:
    """The delivery window of one session (see the module docstring)."""

    def __init__(self, window: int, *, pull_mode: bool) -> None:
        self.window = window
        self.pull_mode = pull_mode
        self.outstanding = 0
        """Push mode: messages pushed and not released. Pull mode: negative of the remaining permits."""
        self._listeners: list[Callable[[], None]] = []

    def available(self) -> int:
        return (0 if self.pull_mode else self.window) - self.outstanding

    def on_pushed(self) -> None:
        self.outstanding += 1

    def release(self, count: int = 1) -> None:
        """An ack, nack or timeout gave back ``count`` (push mode only)."""
        if self.pull_mode or count <= 0:
            return
        was_full = self.outstanding >= self.window
        self.outstanding = max(0, self.outstanding - count)
        if was_full:
            self.notify()

    def grant(self, permits: int) -> None:
        """Pull mode: ``permit`` command. The permits held are capped at :data:`PERMITS_MAX`."""
        if permits <= 0:
            return
        self.outstanding = max(self.outstanding - permits, -PERMITS_MAX)
        self.notify()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def notify(self) -> None:
        """Wake the dispatchers (the window opened, or a bound that held them back)."""
        for listener in self._listeners:
            listener()


class Consumer:
    """One consumer of one subscription (one partition of a session)."""

    def __init__(
        self,
        subscription: Subscription,
        *,
        name: str,
        priority_level: int,
        partition: int,
        flow: FlowControl,
        frames: OutboundFrames,
        ack_timeout_ms: int = 0,
        nack_delay_ms: int = 60_000,
        track_pending: bool = True,
        binary: bool = False,
        unacked_messages_max: int = UNACKED_MESSAGES_MAX,
        unacked_bytes_max: int = UNACKED_BYTES_MAX,
    ) -> None:
        self.id = next(_consumer_ids)
        self.subscription = subscription
        self.name = name
        self.priority_level = priority_level
        self.partition = partition
        self.flow = flow
        self.frames = frames
        self.ack_timeout_s = ack_timeout_ms / 1000
        self.nack_delay_s = nack_delay_ms / 1000
        self.track_pending = track_pending
        self.binary = binary
        """Deliver ``magnetar.v1`` MESSAGES records instead of Pulsar's ConsumerMessage JSON."""
        self.pending: dict[MsgKey, Delivery] = {}
        self.pending_bytes = 0
        """Payload bytes of ``pending``."""
        self.unacked_messages_max = unacked_messages_max
        self.unacked_bytes_max = unacked_bytes_max
        self._held_by_unacked = False
        """``available()`` answered 0 for an unacked bound: the next acknowledgement wakes the dispatchers
        (in pull mode acknowledging releases no window, so nothing else would)."""
        self.pending_in_order = True
        """Whether ``pending`` (insertion-ordered) is also in position order: true until a message is pushed
        behind one with a later position (a redelivery), and again once nothing is pending."""
        self.nacked: deque[tuple[float, Delivery]] = deque()
        self.closed = False
        self.kick: Callable[[int, str], None] | None = None
        """Closes the consumer's WebSocket session (set by the session)."""
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.rate_out = Rate()
        self.connected_since_ms = 0
        self.address = ""
        self._last_time_ms = -1
        self._last_time_text = b""

    def available(self) -> int:
        """Messages that may be pushed now: the flow-control window (or permits), capped by the room in the
        outbound queue and by the unacknowledged-message bounds."""
        if self.closed:
            return 0
        unacked_room = self.unacked_messages_max - len(self.pending)
        if unacked_room <= 0 or self.pending_bytes >= self.unacked_bytes_max:
            self._held_by_unacked = True
            return 0
        return min(self.flow.available(), self.frames.room(), unacked_room)

    def saturated(self) -> bool:
        """Byte bounds reached. ``available`` counts messages and a few large ones fill the bytes, so a
        dispatcher pushing several at once checks the outbound queue's bytes per message; the unacked bytes
        it checks per round (they exceed their bound by at most one round, itself bounded by the queue)."""
        return self.frames.bytes >= self.frames.bytes_max or self.pending_bytes >= self.unacked_bytes_max

    def push(self, delivery: Delivery, redelivery_count: int, now: float) -> None:
        """Send one message (the caller checked :meth:`available`) at ``now`` (``trio.current_time()``,
        read once by the caller for all the messages it pushes)."""
        message = delivery.message
        if self.binary:
            self.frames.push_record(
                message_record(
                    self.partition,
                    delivery.ledger_id,
                    delivery.entry_id,
                    delivery.batch_index,
                    delivery.batch_size,
                    redelivery_count,
                    message,
                )
            )
        else:
            self.frames.push(self._json_frame(delivery, redelivery_count))
        self.flow.on_pushed()
        size = len(message.payload)
        self.msg_out_counter += 1
        self.bytes_out_counter += size
        if self.track_pending:
            self.pending_bytes += size
            delivery.sent_at = now
            pending = self.pending
            if not pending:
                self.pending_in_order = True
            elif self.pending_in_order and delivery.key < next(reversed(pending)):
                self.pending_in_order = False
            pending[delivery.key] = delivery

    def _json_frame(self, delivery: Delivery, redelivery_count: int) -> bytes:
        """Pulsar's ``ConsumerMessage``; the publish time of consecutive messages is formatted once."""
        message = delivery.message
        event_ms = message.event_time_ms
        return consumer_message_frame(
            delivered_message_id(
                delivery.ledger_id,
                delivery.entry_id,
                self.partition,
                delivery.batch_index,
                delivery.batch_size,
            ),
            message.payload,
            message.properties,
            self._format_time(message.publish_time_ms),
            redelivery_count,
            format_timestamp(event_ms).encode("ascii") if event_ms != 0 else None,
            message.key,
        )

    def _format_time(self, ms: int) -> bytes:
        if ms != self._last_time_ms:
            self._last_time_ms = ms
            self._last_time_text = format_timestamp(ms).encode("ascii")
        return self._last_time_text

    def take_pending(self, key: MsgKey) -> Delivery | None:
        """Remove ``key`` from the pending messages (ack or nack), releasing its place in the window."""
        pending = self.pending
        delivery = pending.pop(key, None)
        if delivery is not None:
            self.pending_bytes = self.pending_bytes - len(delivery.message.payload) if pending else 0
            self.flow.release()
            if self._held_by_unacked:
                self._held_by_unacked = False
                self.flow.notify()
        return delivery

    def clear_pending(self) -> None:
        """Forget every pending message (they will be delivered again from the cursor), releasing the
        window."""
        if self.pending:
            self.flow.release(len(self.pending))
            self.pending.clear()
        self.pending_bytes = 0

    def schedule_nack(self, delivery: Delivery) -> None:
        self.nacked.append((trio.current_time() + self.nack_delay_s, delivery))

    def due_redeliveries(self, now: float) -> tuple[list[Delivery], list[Delivery]]:
        """(negatively acknowledged messages whose delay passed, pending messages past the ack timeout)."""
        nacked: list[Delivery] = []
        while self.nacked and self.nacked[0][0] <= now:
            nacked.append(self.nacked.popleft()[1])
        timed_out: list[Delivery] = []
        if self.ack_timeout_s > 0:
            limit = now - self.ack_timeout_s
            for delivery in self.pending.values():
                if delivery.sent_at > limit:
                    break
                timed_out.append(delivery)
            for delivery in timed_out:
                del self.pending[delivery.key]
                self.pending_bytes -= len(delivery.message.payload)
            if not self.pending:
                self.pending_bytes = 0
            self.flow.release(len(timed_out))
        return nacked, timed_out

    @property
    def needs_timers(self) -> bool:
        return self.ack_timeout_s > 0 or bool(self.nacked)

    def detach(self) -> list[Delivery]:
        """The consumer goes away: everything it holds goes back for redelivery (in position order)."""
        self.closed = True
        held = list(self.pending.values()) + [delivery for _, delivery in self.nacked]
        self.pending.clear()
        self.pending_bytes = 0
        self.nacked.clear()
        held.sort(key=lambda d: d.key)
        return held

    def stats(self) -> dict[str, object]:
        return {
            "consumerName": self.name,
            "msgRateOut": self.rate_out.msgs_per_s,
            "msgThroughputOut": self.rate_out.bytes_per_s,
            "msgOutCounter": self.msg_out_counter,
            "bytesOutCounter": self.bytes_out_counter,
            "availablePermits": max(0, self.flow.available()),
            "unackedMessages": len(self.pending),
            "blockedConsumerOnUnackedMsgs": False,
            "priorityLevel": self.priority_level,
            "address": self.address,
            "connectedSince": format_timestamp(self.connected_since_ms) if self.connected_since_ms else "",
            "metadata": {},
        }
