"""The delivery path's vocabulary: a message on its way to a consumer, where it goes, and the permits.

The core hands messages to consumers and never sees a frame. A :class:`Delivery` is one message with its
position ``(ledgerId, entryId, batchIndex)``; a consumer pushes it into its session's :class:`DeliverySink`,
which a protocol adapter implements - Pulsar's JSON ``ConsumerMessage`` frame, a ``magnetar.v1`` MESSAGES
record, tomorrow a binary-protocol ``CommandMessage`` or a frame forwarded to a proxy. The sink is also the
session's bounded outbound queue: the core pushes only while it has room (:meth:`DeliverySink.room`, and its
bytes checked per message) and is called back when a full sink has room again. A run of messages for one
consumer goes in one call (:meth:`DeliverySink.deliver_many`), so that an adapter renders the run in one
pass; the sink stops after the message that fills its bytes, as the one-at-a-time loop did.

Flow control (:class:`FlowControl`) follows Pulsar's WebSocket handler (PR #3058), and Pulsar's binary
protocol's permits fit it too:

* push mode - at most ``window`` messages pushed and not yet acknowledged or negatively acknowledged (the
  JSON API's ``receiverQueueSize``, ``0`` meaning 1); every ack/nack releases one;
* pull mode - nothing is pushed without permits; a grant adds N (capped at :data:`PERMITS_MAX`, Pulsar's
  ``int``), every delivery uses one, acks release nothing;
* reader - like push mode, but the client releases the window itself (it acknowledges nothing).

One flow control may span several consumers: a session consuming a partitioned topic has one consumer per
partition sharing it, so the window holds for the whole session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.wire import StoredMessage

MsgKey = tuple[int, int, int]
"""``(ledgerId, entryId, batchIndex)`` of a message within one topic (partition)."""

PERMITS_MAX = 2**31 - 1
"""Pull-mode permits a session may hold (Pulsar's permits are a Java ``int``)."""
UNACKED_MESSAGES_MAX = 50_000
"""Default of ``consumer_unacked_messages_max``."""
UNACKED_BYTES_MAX = 16 * 1024 * 1024
"""Default of ``consumer_unacked_bytes_max``."""


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
    deliver_at_ms: int = 0
    """The entry's deliver-at time (epoch ms; 0: not delayed), for the protocols that show it (the binary
    MESSAGE's ``deliver_at_time``)."""

    @property
    def key(self) -> MsgKey:
        return (self.ledger_id, self.entry_id, self.batch_index)


class DeliverySink(Protocol):
    """Where one session's consumers push messages: the adapter's encoding into the session's bounded
    outbound queue. ``bytes`` and ``bytes_max`` are read per message on the hot path: plain attributes
    where the adapter can keep them so (the protocol asks only that they can be read)."""

    @property
    def bytes(self) -> int:
        """Bytes queued and not yet taken by the connection."""
        ...

    @property
    def bytes_max(self) -> int:
        """The queue is full from this many bytes on."""
        ...

    def room(self) -> int:
        """Messages that may be pushed before the queue is full by count (0 when it is full by bytes)."""
        ...

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever a full queue has room again."""
        ...

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        """Queue one message for the client (``partition``: the consumer's, -1 for a non-partitioned
        topic). Never blocks: the caller checked :meth:`room`."""
        ...

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        """Queue ``deliveries`` in order (the caller checked :meth:`room` for all of them), stopping after
        the message that takes the queue to ``bytes_max``; returns how many were queued. One call per run of
        messages to one consumer: an adapter renders them in one pass (:func:`deliver_each` is the plain
        loop). ``redelivery_counts``: each message's, or None when all are 0."""
        ...


def deliver_each(
    sink: DeliverySink,
    deliveries: Sequence[Delivery],
    partition: int,
    redelivery_counts: Sequence[int] | None,
) -> int:
    """:meth:`DeliverySink.deliver_many` as a loop of :meth:`DeliverySink.deliver` (a sink with no faster way
    of rendering a run of messages)."""
    taken = 0
    for delivery in deliveries:
        sink.deliver(delivery, partition, redelivery_counts[taken] if redelivery_counts is not None else 0)
        taken += 1
        if sink.bytes >= sink.bytes_max:
            break
    return taken


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

    def on_pushed(self, count: int = 1) -> None:
        self.outstanding += count

    def release(self, count: int = 1) -> None:
        """An ack, nack or timeout gave back ``count`` (push mode only)."""
        if self.pull_mode or count <= 0:
            return
        was_full = self.outstanding >= self.window
        self.outstanding = max(0, self.outstanding - count)
        if was_full:
            self.notify()

    def grant(self, permits: int) -> None:
        """Pull mode: the client grants ``permits``. The permits held are capped at :data:`PERMITS_MAX`."""
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
