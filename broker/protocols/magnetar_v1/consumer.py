"""The consumer and reader side of the binary subprotocol ``magnetar.v1`` (frames in
:mod:`magnetar.broker.wire.magnetar_v1`).

Deliveries are encoded by the session's :class:`~.producer.BinaryFrames` (the core's delivery sink): message
records, sent as MESSAGES frames. This module handles what the client sends: acknowledgements (by id, as the
JSON API, or by range: every message delivered to the session
and still unacknowledged within the range), negative acks, permits, unsubscribe and the end-of-topic query,
with the JSON API's semantics (:mod:`magnetar.broker.protocols.pulsar_ws.adapter`), as calls on the
session's :class:`~magnetar.broker.core.subscriber.Subscriber` handles (positions). A malformed frame closes
the session with 4003.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.bookkeeper.runtime.http import CLOSE_NORMAL
from magnetar.broker.core import FlowControl, ServiceError, Subscriber
from magnetar.broker.protocols.outbound import OutboundFrames
from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError
from magnetar.broker.wire import MessageId
from magnetar.broker.wire.magnetar_v1 import (
    BinaryFrameError,
    ConsumerFrame,
    FrameType,
    end_of_topic_frame,
    parse_consumer_frame,
)

Kick = Callable[[int, str], None]


def _parse(message: str | bytes) -> ConsumerFrame:
    if isinstance(message, str):
        raise WsSessionError(
            WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, "a magnetar.v1 session carries binary frames only"
        )
    try:
        return parse_consumer_frame(message)
    except BinaryFrameError as exc:
        raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, str(exc)) from None


def _end_of_topic(consumers: list[Subscriber]) -> bytes:
    return end_of_topic_frame(all(subscriber.end_of_topic() for subscriber in consumers))


class BinaryConsumerCommands:
    """Applies one binary consumer session's frames to its consumers (one per partition)."""

    def __init__(
        self,
        consumers: list[Subscriber],
        flow: FlowControl,
        frames: OutboundFrames,
        kick: Kick,
    ) -> None:
        self._consumers = consumers
        self._flow = flow
        self._by_partition = {c.partition: c for c in consumers}
        self._frames = frames
        self._kick = kick

    async def on_frame(self, message: str | bytes) -> None:
        frame = _parse(message)
        kind = frame.type
        if kind is FrameType.ACK_RANGE:
            for partition, first, last in frame.ranges:
                subscriber = self._by_partition.get(partition)
                if subscriber is not None:
                    subscriber.ack_range(first, last)
        elif kind is FrameType.ACK:
            for partition, ledger_id, entry_id, batch_index, _ in frame.ids:
                subscriber = self._by_partition.get(partition)
                if subscriber is not None:
                    subscriber.ack_fields(partition, ledger_id, entry_id, batch_index)
        elif kind is FrameType.NACK:
            self._nack(frame)
        elif kind is FrameType.PERMIT:
            self._flow.grant(frame.count)
        elif kind is FrameType.IS_END_OF_TOPIC:
            self._frames.push(_end_of_topic(self._consumers))
        else:
            await self._unsubscribe()

    def _nack(self, frame: ConsumerFrame) -> None:
        for partition, ledger_id, entry_id, batch_index, batch_size in frame.ids:
            subscriber = self._by_partition.get(partition)
            if subscriber is None:
                continue
            try:
                message_id = MessageId(ledger_id, entry_id, partition, batch_index, batch_size)
            except ValueError:
                continue  # out of range: an id no broker wrote; ignored like unknown ids
            subscriber.nack(message_id)

    async def _unsubscribe(self) -> None:
        try:
            for subscriber in self._consumers:
                await subscriber.unsubscribe()
        except ServiceError as exc:
            raise WsSessionError(WsErrorCode.UNKNOWN_ERROR, f"Unsubscribe failed: {exc}") from None
        self._kick(CLOSE_NORMAL, "Unsubscribed")


class BinaryReaderCommands:
    """A binary reader session: PERMIT releases messages of the window; IS_END_OF_TOPIC is answered."""

    def __init__(self, consumers: list[Subscriber], flow: FlowControl, frames: OutboundFrames) -> None:
        self._consumers = consumers
        self._flow = flow
        self._frames = frames

    async def on_frame(self, message: str | bytes) -> None:
        frame = _parse(message)
        if frame.type is FrameType.PERMIT:
            self._flow.release(frame.count)
        elif frame.type is FrameType.IS_END_OF_TOPIC:
            self._frames.push(_end_of_topic(self._consumers))
        else:
            raise WsSessionError(
                WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, f"a reader does not take {frame.type.name}"
            )
