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
wait in the session's :class:`OutboundFrames` (never more than the window) for the session's sender task,
which is the only one that awaits the socket: a slow client stalls only its own deliveries.

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
    other frames."""

    def __init__(self, *, text: bool = True, records_frame_bytes_max: int = RECORDS_FRAME_BYTES_MAX) -> None:
        self.text = text
        """Text frames (Pulsar's JSON API) or binary frames (the binary subprotocol)."""
        self._frames: deque[bytes] = deque()
        self._records: list[bytes] = []
        self._records_bytes = 0
        self._records_frame_bytes_max = records_frame_bytes_max
        self._event = trio.Event()
        self._closed = False
        self._finishing = False

    def __len__(self) -> int:
        return len(self._frames) + len(self._records)

    def push(self, frame: bytes) -> None:
        if self._closed:
            return
        if self._records:
            self._close_records()
        self._frames.append(frame)
        self._event.set()

    def push_record(self, record: bytes) -> None:
        """One message of a MESSAGES frame (binary sessions)."""
        if self._closed:
            return
        self._records.append(record)
        self._records_bytes += len(record)
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
        self._event.set()

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
                    await ws.send_many(batch, text=self.text)
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
            self._notify()

    def grant(self, permits: int) -> None:
        """Pull mode: ``permit`` command."""
        if permits <= 0:
            return
        self.outstanding -= permits
        self._notify()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _notify(self) -> None:
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
        return self.flow.available() if not self.closed else 0

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
        self.msg_out_counter += 1
        self.bytes_out_counter += len(message.payload)
        if self.track_pending:
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
        delivery = self.pending.pop(key, None)
        if delivery is not None:
            self.flow.release()
        return delivery

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
