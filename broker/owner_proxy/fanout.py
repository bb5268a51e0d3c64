"""A proxied session on a PARTITIONED topic: one upstream session per partition, fanned out and in at frame
level - as Pulsar's WebSocket service serves a partitioned topic through its client (a producer or consumer
per partition, each connected to that partition's owner).

When any partition of the topic is not served by this broker, the proxy serves ALL of them through
upstream sessions on ``.../<topic>-partition-<i>`` (same query and subprotocols): a partition this broker
owns gets a loopback session to this broker itself, marked proxied so it is served here. One code path
for every partition; each partition's session is an ordinary :class:`~.relay.Relay` (with its own
:mod:`magnetar.broker.protocols.relay_tracking` tracker) that follows its own partition's moves
independently. The relay's "client" is a
:class:`PartitionPort` of this module instead of the client's WebSocket, so every promise of the relay
holds per partition: a partition whose session ends with an unknown outcome fails back only its own
pending messages (``send-error:8`` / ``SEND_ERROR`` with their own context or request id), the others go on.

What the fan-out changes between the client and the partitions (sans-IO cores, each a
:class:`~magnetar.broker.protocols.fan.Fan`: what a frame routes to, what goes back to the client):

* **producer**: the adapter's own fan
  (:meth:`~magnetar.broker.protocols.adapter.ProtocolAdapter.producer_fan`): a JSON publish request to its
  key's partition, :mod:`magnetar.broker.protocols.pulsar_ws.fan`; a
  ``magnetar.v1`` SEND cut into runs per partition and the answers merged into one RECEIPT or SEND_ERROR,
  :mod:`magnetar.broker.protocols.magnetar_v1.fan` - each routed by the broker's own
  :class:`~magnetar.broker.core.routing.PartitionRouter`;
* **consumer** (:class:`~magnetar.broker.protocols.fan.ConsumerFan`, protocol-neutral; each adapter's
  subclass says only what a frame is:
  :meth:`~magnetar.broker.protocols.adapter.ProtocolAdapter.consumer_fan`): deliveries of every partition
  go to the client;
  acks and negative acks go to the partition their message id names (a binary ACK / ACK_RANGE / NACK is
  split per partition); ``unsubscribe`` goes to every partition and the session ends 1000 once all have
  ended; ``isEndOfTopic`` asks every partition and answers true only if all are at their end (a partition
  that moves meanwhile answers false: :mod:`magnetar.broker.protocols.relay_tracking`). Pull mode
  (``pullMode=true``): the proxy keeps ``ws_proxy_partition_prefetch_messages`` permits granted to each
  partition and holds deliveries beyond the client's own permits (at most that many per partition), so the
  client never gets more than it permitted; each message handed on is granted again to its partition.
* **reader** (only ``earliest`` / ``latest`` starts, as for a local partitioned reader): deliveries fanned
  in; a JSON reader's per-message release goes to the partition its message id names (else to the partition
  of the oldest unreleased delivery); a binary PERMIT releases the oldest deliveries, split per partition.

Errors: the upstream sessions are opened concurrently, ``ws_proxy_partition_opens_max`` at a time; the
first refusal that retrying cannot cure (400, 401, 403, 404, 409, 412:
:data:`~.relay.OPEN_FINAL_STATUSES`) refuses the client's upgrade with the same status and reason, and a
partition whose owner cannot be reached within ``ws_proxy_reconnect_deadline_ms`` makes it 503; either way
the sessions already open are closed. Once running, a partition unreachable within the deadline closes the
client's session with 1001, and any partition session ending for good (a 4xxx session error, or 1000 other
than after an unsubscribe) closes it with that code. The client leaving closes every upstream session.
Bounds: the session's upstream sessions, one per partition, each count in ``ws_proxy_sessions_max`` (a
session that would pass it is refused 503 before any is opened); each port holds
at most ``ws_proxy_buffer_messages_max`` client frames (at least one) waiting for its relay; a JSON
consumer remembers at most ``DELIVERED_IDS_MAX`` delivered ids.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.runtime.http import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    WebSocket,
    WebSocketClosed,
    WsClient,
)
from magnetar.broker.owner_proxy.relay import Connect, Relay, send_frames
from magnetar.broker.protocols.fan import Fan, Frame, Routed
from magnetar.broker.protocols.relay_tracking import Tracker
from magnetar.broker.protocols.ws_errors import WsSessionError

if TYPE_CHECKING:
    from magnetar.broker.owner_proxy.host import RelaySettings
    from magnetar.broker.owner_proxy.metrics import ProxyCounters

log = logging.getLogger(__name__)


# -- the session ---------------------------------------------------------------------------------------------


class PartitionPort:
    """One partition's relay sees the fan-out as its client (:class:`~.relay.ClientSide`): it receives the
    frames routed to its partition (at most ``frames_max`` waiting, plus the permits granted meanwhile, sent
    as one permit frame) and hands what it would send the client to the fan-out."""

    def __init__(self, index: int, session: FanOutSession, frames_max: int) -> None:
        self.index = index
        self._session = session
        self._frames_max = max(1, frames_max)
        self._frames: deque[Frame] = deque()
        self._permits = 0
        self._changed = trio.Event()
        self._closed = False
        self.ended: tuple[int, str] | None = None
        """How the relay ended this partition's session (its close code and reason)."""

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, message: Frame) -> None:
        """Queue a client frame for the partition (waits for room: back-pressure to the client)."""
        while len(self._frames) >= self._frames_max and not self._closed:
            await self._changed.wait()
        if not self._closed:
            self._frames.append(message)
            self._wake()

    def grant(self, count: int) -> None:
        self._permits += count
        self._wake()

    def shut(self) -> None:
        """The client is gone: the relay's next receive ends its session."""
        self._closed = True
        self._wake()

    async def receive_batch(self) -> list[Frame]:
        while True:
            if self._closed:
                raise WebSocketClosed(CLOSE_NORMAL, "the client's session ended")
            if self._frames or self._permits:
                batch: list[Frame] = []
                if self._permits:
                    batch.append(self._session.fan.permit_frame(self._permits))
                    self._permits = 0
                batch.extend(self._frames)
                self._frames.clear()
                self._wake()
                return batch
            await self._changed.wait()

    async def send_many(self, messages: Sequence[bytes], *, text: bool) -> None:
        frames: list[Frame] = [m.decode() for m in messages] if text else list(messages)
        await self._session.from_partition(self.index, frames)

    async def send_text(self, text: str) -> None:
        await self._session.from_partition(self.index, [text])

    async def send_bytes(self, data: bytes) -> None:
        await self._session.from_partition(self.index, [data])

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        self.ended = (code, reason)
        self._closed = True
        self._wake()


class FanOutSession:
    """Runs a client's session over one relay per partition (already connected upstream sessions)."""

    def __init__(
        self,
        ws: WebSocket,
        fan: Fan,
        upstreams: list[WsClient],
        trackers: list[Tracker],
        connects: list[Connect],
        settings: RelaySettings,
        topic: str,
        counters: ProxyCounters | None = None,
    ) -> None:
        self._ws = ws
        self.fan = fan
        self._topic = topic
        frames_max = settings.ws_proxy_buffer_messages_max
        self.ports = [PartitionPort(i, self, frames_max) for i in range(len(upstreams))]
        self.relays = [
            Relay(port, upstream, tracker, connect, settings, f"{topic}-partition-{i}", counters)
            for i, (port, upstream, tracker, connect) in enumerate(
                zip(self.ports, upstreams, trackers, connects, strict=True)
            )
        ]
        self._close: tuple[int, str] | None = None
        self._ended = 0
        self._reader_scope = trio.CancelScope()

    async def run(self) -> None:
        """Until the client leaves or the session ends: then every port is shut, so each relay closes its
        upstream session and ends by itself (none is cancelled midway)."""
        try:
            async with trio.open_nursery() as nursery:
                self._apply(self.fan.opening())
                for index, relay in enumerate(self.relays):
                    nursery.start_soon(self._partition, index, relay)
                nursery.start_soon(self._client_reader)
        finally:
            for port in self.ports:
                port.shut()
        if not self._ws.closed:
            code, reason = self._close or (CLOSE_NORMAL, "")
            with trio.CancelScope(shield=True):
                await self._ws.close(code, reason)

    def _finish(self, close: tuple[int, str] | None) -> None:
        """End the session (``close``: how, unless the client left): stop reading the client, shut every
        port."""
        if self._close is None:
            self._close = close
        self._reader_scope.cancel()
        for port in self.ports:
            port.shut()

    async def _partition(self, index: int, relay: Relay) -> None:
        await relay.run()
        code, reason = self.ports[index].ended or (CLOSE_GOING_AWAY, "")
        if self.ports[index].ended is None or self._ws.closed:
            self._finish(None)  # shut by the fan-out: the session is ending already
            return
        if code == CLOSE_NORMAL and self.fan.unsubscribing:
            self._ended += 1
            if self._ended == len(self.relays):
                self._finish((code, reason))
            return
        log.info("proxy: %s partition %d ended (%s %s): closing the client's session", self._topic, index,
                 code, reason)  # fmt: skip
        self._finish((code, reason))

    async def _client_reader(self) -> None:
        with self._reader_scope:
            try:
                while True:
                    for message in await self._ws.receive_batch():
                        try:
                            routed = self.fan.from_client(message)
                        except WsSessionError as exc:
                            self._finish((exc.close_code, exc.reason))
                            return
                        await self._deliver(routed)
            except WebSocketClosed:
                self._finish(None)  # the client went away: end every upstream session too

    async def from_partition(self, index: int, messages: list[Frame]) -> None:
        await self._deliver(self.fan.from_partition(index, messages))

    async def _deliver(self, routed: Routed) -> None:
        self._apply(routed)
        for partition, frame in routed.partitions:
            await self.ports[partition].put(frame)
        if routed.client:
            await send_frames(self._ws, routed.client)

    def _apply(self, routed: Routed) -> None:
        for partition, count in routed.permits.items():
            self.ports[partition].grant(count)
