"""The producer side of the binary subprotocol ``magnetar.v1`` (frames in
:mod:`magnetar.broker.wire.magnetar_v1`).

A SEND frame is validated once (:func:`~magnetar.broker.wire.magnetar_v1.parse_send`), routed into runs of
consecutive
messages for the same partition (one run on a non-partitioned topic), and each run is cut at the broker's
batch limits (``publish_batch_messages_max`` messages, ``publish_batch_bytes_max`` payload bytes) into groups
that become one publish request each (:meth:`magnetar.broker.core.producer.Producer.publish`, laid out by the
producer's :class:`~magnetar.broker.core.publish.CompactLayout`: consecutive requests of one producer share a
compact batch entry): the messages keep
the bytes they arrived in, so the common frame - one run within the limits - costs one validating walk over
its messages and no per-message object, JSON, base64 or re-encoding.
A :class:`FrameReceipt` (the requests' :class:`~magnetar.broker.core.publish.PublishCompletion`) collects the
entries' positions and answers the frame once: a RECEIPT when every
entry was stored, else one SEND_ERROR. Back-pressure is the JSON producer's: the session's pending messages
stay within ``maxPendingMessages`` (a group larger than that goes alone), and the session stops reading
meanwhile; backlog quotas hold or refuse a frame as they do a JSON publish (a refused frame gets a
SEND_ERROR with code 8).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from magnetar.broker.core import Capacity, Delivery, PartitionRouter, Producer, PublishRequest
from magnetar.broker.protocols.outbound import (
    OUTBOUND_BYTES_MAX,
    OUTBOUND_MESSAGES_MAX,
    RECORDS_FRAME_BYTES_MAX,
    OutboundFrames,
)
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire.magnetar_v1 import (
    NO_KEY,
    BinaryFrameError,
    ReceiptRange,
    SendFrame,
    SendMessage,
    SendRun,
    encode_receipt,
    encode_send_error,
    message_record,
    pack_record_head,
    parse_send,
    send_messages,
    sub_run,
)

_NOT_YET = ReceiptRange(0, 0, 0, 0, 0, 0)
T = TypeVar("T")


class BinaryFrames(OutboundFrames):
    """A ``magnetar.v1`` session's outbound binary frames; a delivery becomes a record of a MESSAGES frame."""

    def __init__(
        self,
        *,
        records_frame_bytes_max: int = RECORDS_FRAME_BYTES_MAX,
        bytes_max: int = OUTBOUND_BYTES_MAX,
        messages_max: int = OUTBOUND_MESSAGES_MAX,
    ) -> None:
        super().__init__(
            text=False,
            records_frame_bytes_max=records_frame_bytes_max,
            bytes_max=bytes_max,
            messages_max=messages_max,
        )

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        self.push_record(
            message_record(
                partition,
                delivery.ledger_id,
                delivery.entry_id,
                delivery.batch_index,
                delivery.batch_size,
                redelivery_count,
                delivery.message,
            )
        )

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        """A run of records rendered in one pass (the core's delivery run): the common record - no key, no
        properties - is its packed fixed part and the payload; the records join the current MESSAGES frame
        as :meth:`deliver` would have pushed them, and the run stops after the record that takes the queue to
        ``bytes_max``."""
        if self._closed:
            return len(deliveries)  # the session is over: dropped, as push_record() drops them
        records = self._records
        frame_bytes_max = self._records_frame_bytes_max
        frame_bytes = self._records_bytes
        total = self.bytes
        bytes_max = self.bytes_max
        pack = pack_record_head
        taken = 0
        for delivery in deliveries:
            message = delivery.message
            payload, _, _, publish_ms, event_ms, key, properties, _, _ = message
            count = redelivery_counts[taken] if redelivery_counts is not None else 0
            if key is None and not properties:
                record = (
                    pack(
                        partition,
                        delivery.ledger_id,
                        delivery.entry_id,
                        delivery.batch_index,
                        delivery.batch_size,
                        count,
                        publish_ms,
                        event_ms,
                        NO_KEY,
                        0,
                        len(payload),
                    )
                    + payload
                )
            else:
                record = message_record(
                    partition,
                    delivery.ledger_id,
                    delivery.entry_id,
                    delivery.batch_index,
                    delivery.batch_size,
                    count,
                    message,
                )
            records.append(record)
            size = len(record)
            frame_bytes += size
            total += size
            taken += 1
            if frame_bytes >= frame_bytes_max:
                self._records_bytes = frame_bytes
                self._close_records()
                records = self._records
                frame_bytes = 0
            if total >= bytes_max:
                break
        self._records_bytes = frame_bytes
        self.bytes = total
        self.messages += taken
        self._event.set()
        return taken


class FrameReceipt:
    """The outcome of one SEND frame: a RECEIPT once all its entries are stored, or one SEND_ERROR. Its
    requests' ``tag`` is their slot in the receipt."""

    __slots__ = ("_frames", "_ranges", "_remaining", "done", "request_id")

    def __init__(self, request_id: int, entries: int, frames: OutboundFrames) -> None:
        self.request_id = request_id
        self._frames = frames
        self._ranges = [_NOT_YET] * entries
        self._remaining = entries
        self.done = False

    def stored(
        self,
        request: PublishRequest,
        partition: int,
        ledger_id: int,
        entry_id: int,
        first_index: int,
        batch_size: int,
    ) -> None:
        if self.done:
            return
        slot = request.tag
        assert isinstance(slot, int)
        self._ranges[slot] = ReceiptRange(
            partition, ledger_id, entry_id, first_index, request.messages, batch_size
        )
        self._remaining -= 1
        if self._remaining == 0:
            self.done = True
            self._frames.push(encode_receipt(self.request_id, self._ranges))

    def failed(self, request: PublishRequest, reason: str) -> None:
        if not self.done:
            self.done = True
            self._frames.push(encode_send_error(self.request_id, WsErrorCode.UNKNOWN_ERROR, reason))


class BinaryPublisher:
    """Turns one binary producer session's frames into entries."""

    def __init__(
        self,
        publisher: Producer | PartitionRouter[Producer],
        frames: OutboundFrames,
        capacity: Capacity,
        refusal: Callable[[int], Awaitable[str | None]],
        *,
        batch_messages_max: int,
        batch_bytes_max: int,
    ) -> None:
        self._publisher = publisher
        self._frames = frames
        self._capacity = capacity
        self._refusal = refusal
        """Rate limits and backlog quotas (:mod:`magnetar.broker.policies.publish_gate`) for a frame of N
        messages: waits while held; the reason when the publish is refused."""
        self._batch_messages_max = batch_messages_max
        self._batch_bytes_max = batch_bytes_max

    async def on_frame(self, message: str | bytes) -> None:
        if isinstance(message, str):
            self._refuse(0, "a magnetar.v1 session carries binary frames only")
            return
        try:
            send = parse_send(message)
        except BinaryFrameError as exc:
            self._refuse(exc.request_id or 0, str(exc))
            return
        refused = await self._refusal(send.run.messages)
        if refused is not None:
            self._frames.push(encode_send_error(send.request_id, WsErrorCode.UNKNOWN_ERROR, refused))
            return
        groups = [(producer, group) for producer, run in self._runs(send) for group in self._split(run)]
        receipt = FrameReceipt(send.request_id, len(groups), self._frames)
        received_at = trio.current_time()
        sequence_id = send.first_sequence_id  # SEND_SEQ: the groups' ids follow in frame order
        for slot, (producer, group) in enumerate(groups):
            await self._capacity.wait_for(group.messages)
            producer.publish(
                producer.compact_layout,
                group.body,
                group.messages,
                group.payload_bytes,
                receipt,
                slot,
                received_at,
                sequence_id,
            )
            if sequence_id is not None:
                sequence_id += group.messages

    def _refuse(self, request_id: int, reason: str) -> None:
        code = WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON
        self._frames.push(encode_send_error(request_id, code, reason))

    def _runs(self, send: SendFrame) -> list[tuple[Producer, SendRun]]:
        if isinstance(self._publisher, Producer):
            return [(self._publisher, send.run)]
        return route_frame(self._publisher, send)

    def _split(self, run: SendRun) -> list[SendRun]:
        """Cut a run at the batch limits (a single message larger than the byte limit goes alone)."""
        limit = self._batch_messages_max
        if run.messages <= limit and run.payload_bytes <= self._batch_bytes_max:
            return [run]
        groups: list[SendRun] = []
        group: list[SendMessage] = []
        size = 0
        for message in send_messages(run):
            if group and (len(group) >= limit or size + message.payload_bytes > self._batch_bytes_max):
                groups.append(sub_run(run, group))
                group, size = [], 0
            group.append(message)
            size += message.payload_bytes
        groups.append(sub_run(run, group))
        return groups


def route_frame(router: PartitionRouter[T], frame: SendFrame) -> list[tuple[T, SendRun]]:
    """Runs of consecutive messages of a SEND frame for the same partition: a message with a key goes to its
    key's partition, the others of the frame to one partition picked for the whole frame (as Pulsar's
    batching producer routes batches)."""
    keyless = router.route(None)
    if not frame.keyed:
        return [(keyless, frame.run)]
    runs: list[tuple[T, list[SendMessage]]] = []
    for message in send_messages(frame.run):
        producer = keyless if message.key is None else router.for_key(message.key)
        if runs and runs[-1][0] == producer:
            runs[-1][1].append(message)
        else:
            runs.append((producer, [message]))
    return [(producer, sub_run(frame.run, messages)) for producer, messages in runs]
