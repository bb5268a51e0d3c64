"""The binary subprotocol ``magnetar.v1`` as a protocol adapter (:mod:`magnetar.broker.protocols.adapter`):
binary frames of :mod:`magnetar.broker.wire.magnetar_v1` on the same endpoints as Pulsar's JSON API, chosen
by a client that offers the subprotocol. Producers in :mod:`.producer`, consumers and readers in
:mod:`.consumer`."""

from __future__ import annotations

from magnetar.broker.core import PartitionRouter
from magnetar.broker.protocols.adapter import (
    ConsumerSession,
    FrameHandler,
    FramesHandler,
    ProducerSession,
    frame_by_frame,
)
from magnetar.broker.protocols.fan import Fan
from magnetar.broker.protocols.magnetar_v1.consumer import BinaryConsumerCommands, BinaryReaderCommands
from magnetar.broker.protocols.magnetar_v1.fan import BinaryConsumerFan, BinaryProducerFan
from magnetar.broker.protocols.magnetar_v1.producer import BinaryFrames, BinaryPublisher
from magnetar.broker.protocols.magnetar_v1.relay_tracking import BinaryConsumerTracker, BinaryProducerTracker
from magnetar.broker.protocols.outbound import OutboundFrames
from magnetar.broker.protocols.relay_tracking import Tracker
from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL


class MagnetarV1Adapter:
    """``magnetar.v1``: SEND frames as publish requests, MESSAGES records as deliveries."""

    subprotocol: str | None = SUBPROTOCOL

    def outbound(self, *, bytes_max: int, messages_max: int) -> OutboundFrames:
        return BinaryFrames(bytes_max=bytes_max, messages_max=messages_max)

    def producer(self, session: ProducerSession) -> FramesHandler:
        """The same rate limits and backlog quotas as JSON publishes, applied to a whole SEND frame (a SEND
        frame carries many messages already: its frames are handled one by one)."""
        publisher = BinaryPublisher(
            session.publisher,
            session.frames,
            session.capacity,
            session.refusal,
            batch_messages_max=session.batch_messages_max,
            batch_bytes_max=session.batch_bytes_max,
        )
        return frame_by_frame(publisher.on_frame, session.frames)

    def consumer(self, session: ConsumerSession) -> FrameHandler:
        commands = BinaryConsumerCommands(session.subscribers, session.flow, session.frames, session.kick)
        return commands.on_frame

    def reader(self, session: ConsumerSession) -> FrameHandler:
        return BinaryReaderCommands(session.subscribers, session.flow, session.frames).on_frame

    def relay_tracker(self, *, producer: bool, pull_mode: bool, reader: bool) -> Tracker:
        if producer:
            return BinaryProducerTracker()
        return BinaryConsumerTracker(pull_mode=pull_mode, reader=reader)

    def producer_fan(self, router: PartitionRouter[int]) -> Fan:
        return BinaryProducerFan(router)

    def consumer_fan(self, partitions: int, *, pull_mode: bool, reader: bool, prefetch: int) -> Fan:
        return BinaryConsumerFan(partitions, pull_mode=pull_mode, reader=reader, prefetch=prefetch)
