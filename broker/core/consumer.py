"""A consumer: one client's place in one subscription (one partition of a session), protocol-neutral.

A dispatcher asks :meth:`Consumer.available` before it pushes and pushes synchronously: the consumer hands the
message - or a run of them, :meth:`Consumer.push_many` - to its session's :class:`~.delivery.DeliverySink`
(the adapter's encoding into the session's outbound queue), whose sender task is the only one that awaits the
connection - a slow client stalls only its own deliveries. Acknowledgements take pending messages back one
at a time or a group at a time (:meth:`Consumer.take_pending_many`: the window released once).

What a consumer may be handed at once is bounded in messages and in bytes, whatever the client grants:

* the session's outbound queue (``ws_send_queue_messages_max`` messages and ``ws_send_queue_bytes_max``
  bytes, plus the message that crossed the bound): ``available()`` is 0 while it is full;
* pull-mode permits are a number, not a promise of memory: a consumer granting 2,147,483,647 permits gets
  messages as fast as it reads them - the permits a dispatcher may use at once are capped at the room in the
  outbound queue, and the permits held are capped at :data:`~.delivery.PERMITS_MAX`;
* messages pushed and not acknowledged (held for redelivery) are bounded per consumer by
  ``consumer_unacked_messages_max`` (Pulsar's ``maxUnackedMessagesPerConsumer``) and
  ``consumer_unacked_bytes_max`` (payload bytes): a consumer at either bound gets nothing more until it
  acknowledges.

Each consumer keeps its pending (pushed, unacknowledged) messages in push order, for acks, ack-timeout
redelivery (``ackTimeoutMillis``: a message not acked within the timeout is redelivered with
``redeliveryCount + 1``), negative acks (redelivered after ``negativeAckRedeliveryDelay``) and for handing
them back to the subscription when the consumer goes away. Acknowledgements arrive through the session's
:class:`~.subscriber.Subscriber`, as positions.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

import trio

from magnetar.broker.core.delivery import (
    UNACKED_BYTES_MAX,
    UNACKED_MESSAGES_MAX,
    Delivery,
    DeliverySink,
    FlowControl,
    MsgKey,
)
from magnetar.broker.core.key_shared import KeySharedPolicy
from magnetar.broker.core.rates import Rate
from magnetar.broker.wire import format_timestamp

_consumer_ids = itertools.count(1)


class Consumer:
    """One consumer of one subscription (one partition of a session)."""

    def __init__(
        self,
        *,
        name: str,
        priority_level: int,
        partition: int,
        flow: FlowControl,
        sink: DeliverySink,
        ack_timeout_ms: int = 0,
        nack_delay_ms: int = 60_000,
        track_pending: bool = True,
        unacked_messages_max: int = UNACKED_MESSAGES_MAX,
        unacked_bytes_max: int = UNACKED_BYTES_MAX,
        whole_entries: bool = False,
        key_shared: KeySharedPolicy | None = None,
    ) -> None:
        self.id = next(_consumer_ids)
        self.name = name
        self.priority_level = priority_level
        self.partition = partition
        self.flow = flow
        self.sink = sink
        self.ack_timeout_s = ack_timeout_ms / 1000
        self.nack_delay_s = nack_delay_ms / 1000
        self.track_pending = track_pending
        """False for a reader: it acknowledges nothing, so nothing is kept for redelivery."""
        self.pending: dict[MsgKey, Delivery] = {}
        self.pending_bytes = 0
        """Payload bytes of ``pending``."""
        self.whole_entries = whole_entries
        """Dispatchers hand this consumer the messages of an entry together, even past its permits
        (:mod:`.dispatcher`)."""
        self.key_shared = key_shared
        """On a Key_Shared subscription: its mode and sticky hash ranges (None: auto-split;
        :mod:`.key_shared`)."""
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
        self.disconnect: Callable[[str], None] | None = None
        """Ends the client's session because the topic or subscription went away, so that the client looks
        the topic up again (set by the adapter, which says it in its own terms: a WebSocket closes with
        1001)."""
        self.wake_timers: Callable[[], None] | None = None
        """Wakes the session's :class:`~.redelivery_timers.RedeliveryTimers` when a negative ack is
        scheduled (set by them)."""
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.rate_out = Rate()
        self.connected_since_ms = 0
        self.address = ""

    def available(self) -> int:
        """Messages that may be pushed now: the flow-control window (or permits), capped by the room in the
        outbound queue and by the unacknowledged-message bounds."""
        if self.closed:
            return 0
        unacked_room = self.unacked_messages_max - len(self.pending)
        if unacked_room <= 0 or self.pending_bytes >= self.unacked_bytes_max:
            self._held_by_unacked = True
            return 0
        return min(self.flow.available(), self.sink.room(), unacked_room)

    def hold_for_unacked(self) -> None:
        """Its subscription stopped on its unacknowledged messages: the next ack wakes the dispatcher (as
        when the consumer's own bound held it)."""
        self._held_by_unacked = True

    def saturated(self) -> bool:
        """Byte bounds reached. ``available`` counts messages and a few large ones fill the bytes, so a
        dispatcher pushing several at once checks the outbound queue's bytes per message; the unacked bytes
        it checks per round (they exceed their bound by at most one round, itself bounded by the queue)."""
        sink = self.sink
        return sink.bytes >= sink.bytes_max or self.pending_bytes >= self.unacked_bytes_max

    def push(self, delivery: Delivery, redelivery_count: int, now: float) -> None:
        """Send one message (the caller checked :meth:`available`) at ``now`` (``trio.current_time()``,
        read once by the caller for all the messages it pushes)."""
        self.sink.deliver(delivery, self.partition, redelivery_count)
        self.flow.on_pushed()
        size = len(delivery.message.payload)
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

    def push_many(self, deliveries: list[Delivery], redelivery_counts: list[int] | None, now: float) -> int:
        """:meth:`push` a run of messages in position order (the caller checked :meth:`available` for all of
        them) with one call into the sink, which renders them in one pass; it stops after the message that
        fills the outbound queue's bytes, so this returns how many were pushed (the first ones)."""
        taken = self.sink.deliver_many(deliveries, self.partition, redelivery_counts)
        if taken < len(deliveries):
            deliveries = deliveries[:taken]
        self.flow.on_pushed(taken)
        size = 0
        if self.track_pending:
            pending = self.pending
            in_order = self.pending_in_order or not pending
            last = next(reversed(pending)) if pending and in_order else None
            for delivery in deliveries:
                size += len(delivery.message.payload)
                delivery.sent_at = now
                key = (delivery.ledger_id, delivery.entry_id, delivery.batch_index)
                if in_order and last is not None and key < last:
                    in_order = False
                last = key
                pending[key] = delivery
            self.pending_in_order = in_order
            self.pending_bytes += size
        else:
            for delivery in deliveries:
                size += len(delivery.message.payload)
        self.msg_out_counter += taken
        self.bytes_out_counter += size
        return taken

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

    def take_pending_many(self, keys: list[MsgKey]) -> list[Delivery | None]:
        """:meth:`take_pending` of each key (a group of acks), the window released once for all found."""
        pending = self.pending
        taken = [pending.pop(key, None) for key in keys]
        found = 0
        size = 0
        for delivery in taken:
            if delivery is not None:
                found += 1
                size += len(delivery.message.payload)
        if found:
            self.pending_bytes = self.pending_bytes - size if pending else 0
            self.flow.release(found)
            if self._held_by_unacked:
                self._held_by_unacked = False
                self.flow.notify()
        return taken

    def clear_pending(self) -> None:
        """Forget every pending message (they will be delivered again from the cursor), releasing the
        window."""
        if self.pending:
            self.flow.release(len(self.pending))
            self.pending.clear()
        self.pending_bytes = 0

    def schedule_nack(self, delivery: Delivery) -> None:
        self.nacked.append((trio.current_time() + self.nack_delay_s, delivery))
        if self.wake_timers is not None:
            self.wake_timers()

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
