"""What the Pulsar JSON API makes of the core's outcomes: producer acknowledgements and ``ConsumerMessage``
frames, pushed into the session's outbound queue (:mod:`magnetar.broker.protocols.outbound`).

:class:`JsonFrames` is a session's queue and its deliveries' encoding (the core's
:class:`~magnetar.broker.core.delivery.DeliverySink`); :class:`JsonAcks` answers a publish request (the core's
:class:`~magnetar.broker.core.publish.PublishCompletion`) with one ``ProducerAck`` per message, carrying the
request's ``context``.

The delivery fast path (docs/architecture.md §2.2). The dispatcher hands :meth:`JsonFrames.deliver_many` a run
of messages for one consumer - usually whole batch entries read together - and the run is rendered in one
pass: the run's message ids first (:func:`~magnetar.broker.wire.delivered_message_ids`: the protobuf fields
of the ledger, entry and partition written once per entry, each id remembered for the ack that will bring it
back), then one ``ConsumerMessage`` per message - for a message without properties, key and event time the
template :data:`~.messages.CONSUMER_MESSAGE_PLAIN` filled with the id, the payload in base64 (``pybase64``)
and the publish time (its date and time formatted once per second; the template itself made once per
publish time, for messages delivered the first time), anything else through
:func:`~.messages.consumer_message_frame`. The frames join the queue as they are rendered; the run
stops after the frame that takes the queue to ``bytes_max`` and says how many it took (the rest stays with
the dispatcher), exactly where one :meth:`JsonFrames.deliver` per message would have stopped.
"""

from __future__ import annotations

from binascii import b2a_base64
from collections.abc import Sequence
from typing import cast

from orjson import dumps
from pybase64 import b64encode

from magnetar.broker.core import Delivery, PublishRequest
from magnetar.broker.protocols.outbound import OUTBOUND_BYTES_MAX, OUTBOUND_MESSAGES_MAX, OutboundFrames
from magnetar.broker.protocols.pulsar_ws.messages import (
    CONSUMER_MESSAGE_FIRST_TAIL,
    CONSUMER_MESSAGE_HEAD,
    CONSUMER_MESSAGE_PLAIN,
    PRODUCER_ACK_OK,
    PRODUCER_ACK_OK_CONTEXT,
    consumer_message_frame,
    producer_ack_error,
)
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire import (
    UtcTimestamps,
    batch_index_field,
    delivered_message_id,
    delivered_message_ids,
    format_timestamp,
    message_id_parts,
)


class JsonFrames(OutboundFrames):
    """A JSON session's outbound text frames; a delivery becomes Pulsar's ``ConsumerMessage``."""

    def __init__(
        self, *, bytes_max: int = OUTBOUND_BYTES_MAX, messages_max: int = OUTBOUND_MESSAGES_MAX
    ) -> None:
        super().__init__(text=True, bytes_max=bytes_max, messages_max=messages_max)
        self._times = UtcTimestamps()
        """Publish times formatted once per second (:class:`~magnetar.broker.wire.UtcTimestamps`)."""

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        """Pulsar's ``ConsumerMessage`` of one message."""
        message = delivery.message
        event_ms = message.event_time_ms
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
                self._times.format(message.publish_time_ms),
                redelivery_count,
                format_timestamp(event_ms).encode("ascii") if event_ms != 0 else None,
                message.key,
            )
        )

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        """A run of ``ConsumerMessage`` frames rendered in one pass (the delivery fast path, see the module
        docstring); stops after the frame that takes the queue to ``bytes_max``."""
        if self._closed:
            return len(deliveries)  # the session is over: dropped, as push() drops them
        ids = delivered_message_ids(deliveries, partition)
        frames = self._frames
        total = self.bytes
        bytes_max = self.bytes_max
        times = self._times
        last_ms: int | None = None
        publish_time = template = b""
        taken = 0
        for delivery, message_id in zip(deliveries, ids, strict=True):
            # A stored message is a named tuple: its fields in one unpacking, not five attribute lookups.
            payload, _, _, publish_ms, event_ms, key, properties, _, _ = delivery.message
            if publish_ms != last_ms:
                last_ms = publish_ms
                publish_time = times.format(publish_ms)
                template = CONSUMER_MESSAGE_HEAD + publish_time + CONSUMER_MESSAGE_FIRST_TAIL
            count = redelivery_counts[taken] if redelivery_counts is not None else 0
            if key is not None or properties or event_ms:
                frame = consumer_message_frame(
                    message_id,
                    payload,
                    properties,
                    publish_time,
                    count,
                    format_timestamp(event_ms).encode("ascii") if event_ms != 0 else None,
                    key,
                )
            elif count:
                frame = CONSUMER_MESSAGE_PLAIN % (message_id, b64encode(payload), publish_time, count)
            else:  # the common message: this publish time's template, filled with the id and the payload
                frame = template % (message_id, b64encode(payload))
            frames.append(frame)
            total += len(frame)
            taken += 1
            if total >= bytes_max:
                break
        self.bytes = total
        self.messages += taken
        self._event.set()
        return taken


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
