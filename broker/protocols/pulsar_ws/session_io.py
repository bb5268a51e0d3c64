"""What the Pulsar JSON API makes of the core's outcomes: producer acknowledgements and ``ConsumerMessage``
frames, pushed into the session's outbound queue (:mod:`magnetar.broker.protocols.outbound`).

:class:`JsonFrames` is a session's queue and its deliveries' encoding (the core's
:class:`~magnetar.broker.core.delivery.DeliverySink`); :class:`JsonAcks` answers a publish request (the core's
:class:`~magnetar.broker.core.publish.PublishCompletion`) with one ``ProducerAck`` per message, carrying the
request's ``context``.
"""

from __future__ import annotations

from binascii import b2a_base64
from typing import cast

from orjson import dumps

from magnetar.broker.core import Delivery, PublishRequest
from magnetar.broker.protocols.outbound import OUTBOUND_BYTES_MAX, OUTBOUND_MESSAGES_MAX, OutboundFrames
from magnetar.broker.protocols.pulsar_ws.messages import (
    PRODUCER_ACK_OK,
    PRODUCER_ACK_OK_CONTEXT,
    consumer_message_frame,
    producer_ack_error,
)
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire import (
    batch_index_field,
    delivered_message_id,
    format_timestamp,
    message_id_parts,
)


class JsonFrames(OutboundFrames):
    """A JSON session's outbound text frames; a delivery becomes Pulsar's ``ConsumerMessage``."""

    def __init__(
        self, *, bytes_max: int = OUTBOUND_BYTES_MAX, messages_max: int = OUTBOUND_MESSAGES_MAX
    ) -> None:
        super().__init__(text=True, bytes_max=bytes_max, messages_max=messages_max)
        self._last_time_ms = -1
        self._last_time_text = b""

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        """Pulsar's ``ConsumerMessage``; the publish time of consecutive messages is formatted once."""
        message = delivery.message
        event_ms = message.event_time_ms
        publish_ms = message.publish_time_ms
        if publish_ms != self._last_time_ms:
            self._last_time_ms = publish_ms
            self._last_time_text = format_timestamp(publish_ms).encode("ascii")
        self.push(
            consumer_message_frame(
                delivered_message_id(
                    delivery.ledger_id,
                    delivery.entry_id,
                    partition,
                    delivery.batch_index,
                    delivery.batch_size,
                ),
                message.payload,
                message.properties,
                self._last_time_text,
                redelivery_count,
                format_timestamp(event_ms).encode("ascii") if event_ms != 0 else None,
                message.key,
            )
        )


class JsonAcks:
    """The producer acknowledgements of one JSON session: a request's ``tag`` is its ``context``.

    One ``ProducerAck`` per message, written from a template. The messages of one batch entry are answered one
    after the other and their ids differ only in the batch index, so the protobuf bytes around it are built
    once per entry (:func:`~magnetar.broker.wire.message_id_parts`): per message there remain the index field,
    one base64 encoding, the context's JSON string and the template."""

    __slots__ = ("_batch_size", "_entry_id", "_frames", "_head", "_ledger_id", "_partition", "_tail")

    def __init__(self, frames: OutboundFrames) -> None:
        self._frames = frames
        self._ledger_id = self._entry_id = self._partition = self._batch_size = -2
        """The entry of the last message acknowledged (-2: none yet; no entry has these)."""
        self._head = b""
        self._tail = b""

    def stored(
        self,
        request: PublishRequest,
        partition: int,
        ledger_id: int,
        entry_id: int,
        first_index: int,
        batch_size: int,
    ) -> None:
        if (
            entry_id != self._entry_id
            or ledger_id != self._ledger_id
            or partition != self._partition
            or batch_size != self._batch_size
        ):
            self._ledger_id, self._entry_id, self._partition, self._batch_size = (
                ledger_id,
                entry_id,
                partition,
                batch_size,
            )
            self._head, self._tail = message_id_parts(ledger_id, entry_id, partition, batch_size)
        # b2a_base64's newline cut off rather than refused by keyword (a keyword argument costs more)
        message_id = b2a_base64(self._head + batch_index_field(first_index) + self._tail)[:-1]
        context = request.tag
        if context is None:
            self._frames.push(PRODUCER_ACK_OK % message_id)
        else:
            self._frames.push(PRODUCER_ACK_OK_CONTEXT % (message_id, dumps(context)))

    def failed(self, request: PublishRequest, reason: str) -> None:
        context = cast("str | None", request.tag)
        self._frames.push(producer_ack_error(WsErrorCode.UNKNOWN_ERROR, reason, context))
