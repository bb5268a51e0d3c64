"""What a protocol adapter gives the session front door (:mod:`magnetar.broker.sessions`), and what it gets.

The front door does everything that is the same whatever the client speaks: the upgrade, authentication and
authorization, binding the session to its topic (producers, subscriptions, readers: the core's objects), the
read loop, the redelivery timers, close and drain, and the answer to a refused upgrade. An adapter does the
rest, in its own terms:

* :meth:`ProtocolAdapter.outbound` - the session's outbound queue, with the adapter's encoding of a
  delivery (the core's :class:`~magnetar.broker.core.delivery.DeliverySink`);
* :meth:`ProtocolAdapter.producer`, :meth:`~ProtocolAdapter.consumer`, :meth:`~ProtocolAdapter.reader` - the
  frame handler of a bound session: it parses each frame the client sends into calls on the core (a publish,
  an acknowledgement, a permit...) and pushes its answers into the outbound queue. A frame that ends the
  session raises :class:`~magnetar.broker.protocols.ws_errors.WsSessionError`; an ``unsubscribe`` that
  succeeded calls the session's ``kick``. A producer's handler takes the frames of one read at once
  (:data:`FramesHandler`): it may do per read what would otherwise be done per frame, and it holds the
  session's back-pressure itself (:func:`frame_by_frame` wraps a per-frame handler);
* :meth:`ProtocolAdapter.relay_tracker` - what the owner proxy (:mod:`magnetar.broker.owner_proxy`) must
  know of the adapter's frames to relay a session across a change of owner without knowing the protocol
  (:mod:`.relay_tracking`).

An adapter imports only the core, the wire formats and the shared helpers of this package (this module,
:mod:`.outbound`, :mod:`.ws_errors`, :mod:`.relay_tracking`); the architecture test holds it to that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar.broker.core import Capacity, FlowControl, PartitionRouter, Producer, Subscriber
from magnetar.broker.protocols.fan import Fan
from magnetar.broker.protocols.outbound import OutboundFrames
from magnetar.broker.protocols.relay_tracking import Tracker

FrameHandler = Callable[[str | bytes], Awaitable[None]]
"""Handles one frame the client sent (text or binary)."""
FramesHandler = Callable[[Sequence[str | bytes]], Awaitable[None]]
"""Handles the frames of one read from the client, in order
(:meth:`~magnetar.bookkeeper.runtime.http.WebSocket.receive_batch`). A producer's: after pushing an answer
into a full outbound queue it waits for room (:meth:`~.outbound.OutboundFrames.wait_for_room`) before it
handles the next frame, so a client that sends without reading is slowed down by TCP."""
PublishesUnrestricted = Callable[[], bool]
"""True when no publish rate limit applies to the session and no backlog quota is exceeded: the
:data:`PublishRefusal` of any message would be None without waiting, so a publish need not ask it. Other
tasks change it, so the answer holds until the handler next awaits."""


@runtime_checkable
class FrameGroups(Protocol):
    """A consumer's frame handler that also takes the frames of a received group that need no await and
    answer nothing (acknowledgements) in one pass: the front door hands it each group first, and the
    frames it leaves to the handler one by one."""

    def __call__(self, message: str | bytes) -> Awaitable[None]: ...

    def take_group(self, messages: Sequence[str | bytes], start: int) -> int:
        """Apply the frames from ``start`` on up to the first it does not take; returns that one's index
        (``len(messages)`` when it took them all). It raises nothing: a frame it cannot apply as it is, it
        leaves to the handler."""
        ...


Kick = Callable[[int, str], None]
"""Ends the session with a WebSocket close code and reason, once what is queued went out."""
PublishRefusal = Callable[[int], Awaitable[str | None]]
"""Why N messages may not be published now (publish rate limits, then backlog quotas, which wait while
held), or None."""


@dataclass(frozen=True, slots=True)
class ProducerSession:
    """A bound producer session: what its frame handler publishes to and through."""

    frames: OutboundFrames
    publisher: Producer | PartitionRouter[Producer]
    """The topic's producer, or a router over one producer per partition."""
    capacity: Capacity
    """The session's pending messages (``maxPendingMessages``): a publish waits for room."""
    refusal: PublishRefusal
    batch_messages_max: int
    """``publish_batch_messages_max``: the most messages of one publish request."""
    batch_bytes_max: int
    """``publish_batch_bytes_max``: the most payload bytes of one publish request."""
    unrestricted: PublishesUnrestricted
    """Whether a publish may skip ``refusal`` now (no rate limit applies, no backlog quota is exceeded)."""


@dataclass(frozen=True, slots=True)
class ConsumerSession:
    """A bound consumer or reader session: one subscriber per partition, sharing one flow control."""

    frames: OutboundFrames
    subscribers: list[Subscriber]
    flow: FlowControl
    kick: Kick


class ProtocolAdapter(Protocol):
    """One client protocol served on the WebSocket endpoints, chosen by the subprotocol the client offers
    (:mod:`magnetar.broker.sessions.registry`)."""

    @property
    def subprotocol(self) -> str | None:
        """The WebSocket subprotocol that selects this adapter and that the upgrade answers with; None for
        the adapter of a client that offers none of the registered ones."""
        ...

    def outbound(self, *, bytes_max: int, messages_max: int) -> OutboundFrames:
        """A new session's outbound queue (``ws_send_queue_bytes_max``, ``ws_send_queue_messages_max``)."""
        ...

    def producer(self, session: ProducerSession) -> FramesHandler: ...

    def consumer(self, session: ConsumerSession) -> FrameHandler: ...

    def reader(self, session: ConsumerSession) -> FrameHandler: ...

    def relay_tracker(self, *, producer: bool, pull_mode: bool, reader: bool) -> Tracker:
        """A new tracker of a relayed producer session, or of a consumer (``pull_mode`` as the client asked)
        or reader session."""
        ...

    def producer_fan(self, router: PartitionRouter[int]) -> Fan:
        """The owner proxy's core for a producer session fanned out over a partitioned topic's partitions
        (``router`` picks a message's partition): what a publish request routes to, how answers merge."""
        ...

    def consumer_fan(self, partitions: int, *, pull_mode: bool, reader: bool, prefetch: int) -> Fan:
        """The owner proxy's core for a consumer or reader session fanned out over ``partitions``: what a
        client frame asks and what a partition's frame is, in this protocol's terms
        (:class:`~.fan.ConsumerFan`)."""
        ...


def frame_by_frame(on_frame: FrameHandler, frames: OutboundFrames) -> FramesHandler:
    """A producer's :data:`FramesHandler` from a per-frame handler: each frame in turn, waiting for room in
    the outbound queue after any frame that left it full."""

    async def on_frames(batch: Sequence[str | bytes]) -> None:
        for message in batch:
            await on_frame(message)
            if frames.full:
                await frames.wait_for_room()

    return on_frames
