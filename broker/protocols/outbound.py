"""The outbound frame queue of one WebSocket session, shared by the protocol adapters.

Frames are pushed synchronously - a producer's acknowledgements, a consumer's deliveries, answers - and one
task per session, :meth:`OutboundFrames.run`, is the only one that awaits the socket: a slow client stalls
only its own session. The queue is bounded in messages and bytes (``ws_send_queue_messages_max``,
``ws_send_queue_bytes_max``): deliveries stop at the bound (the core's
:class:`~magnetar.broker.core.delivery.DeliverySink` reads :meth:`OutboundFrames.room` and the bytes), and the
session reads no further request while answers wait for the client to read, so TCP carries the back-pressure
to a client that sends without reading. Each adapter subclasses it with its own encoding of a delivery
(:meth:`OutboundFrames.deliver`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import trio

from magnetar.bookkeeper.runtime.http import WebSocket, WebSocketClosed
from magnetar.broker.core import Delivery, deliver_each
from magnetar.broker.wire.magnetar_v1 import messages_frame

RECORDS_FRAME_BYTES_MAX = 1024 * 1024
"""Message records in one binary MESSAGES frame (more records start another frame)."""
OUTBOUND_BYTES_MAX = 1024 * 1024
OUTBOUND_MESSAGES_MAX = 4096


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
                    await ws.send_many(batch, text=self.text, now=True)
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

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        """Queue one message for the client, in the adapter's encoding (see the subclasses)."""
        raise NotImplementedError(f"{type(self).__name__} carries no deliveries")

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        """Queue a run of messages (the core's :meth:`~magnetar.broker.core.delivery.DeliverySink.
        deliver_many`): one :meth:`deliver` each, unless the subclass renders a run at once."""
        return deliver_each(self, deliveries, partition, redelivery_counts)
