"""A ``magnetar.v1`` session fanned out over a partitioned topic's partitions by the owner proxy
(:mod:`magnetar.broker.protocols.fan`). A producer's SEND frame is cut into runs of consecutive messages for
the same partition exactly as a local session cuts it (:func:`~.producer.route_frame`); each run goes to its
partition as a SEND of its own (request ids numbered per partition), and the client gets what a local
session answers: one RECEIPT with every run's ranges in frame order once all runs are stored, or one
SEND_ERROR (the first failure) otherwise. A consumer's ACK, NACK and ACK_RANGE frames are split per partition
(:class:`BinaryConsumerFan`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.core import PartitionRouter
from magnetar.broker.protocols.fan import ConsumerFan, Fan, Frame, Routed
from magnetar.broker.protocols.magnetar_v1.producer import route_frame
from magnetar.broker.protocols.outbound import RECORDS_FRAME_BYTES_MAX
from magnetar.broker.protocols.ws_errors import WsErrorCode, WsSessionError
from magnetar.broker.wire.magnetar_v1 import (
    BinaryFrameError,
    FrameType,
    Position3,
    ReceiptRange,
    encode_ack_ranges,
    encode_ids,
    encode_permit,
    encode_receipt,
    encode_send_error,
    encode_send_run,
    end_of_topic_frame,
    message_records,
    messages_frame,
    parse_consumer_frame,
    parse_receipt,
    parse_send,
)

_RECEIPT = bytes([FrameType.RECEIPT])
_SEND_ERROR = bytes([FrameType.SEND_ERROR])
_MESSAGES = bytes([FrameType.MESSAGES])
_END_OF_TOPIC = bytes([FrameType.END_OF_TOPIC])
_AT_END = end_of_topic_frame(True)


@dataclass
class _SendState:
    """One client SEND frame split over partitions."""

    request_id: int
    ranges: list[tuple[ReceiptRange, ...] | None]
    remaining: int
    done: bool = False


class BinaryProducerFan(Fan):
    """A ``magnetar.v1`` producer: SEND frames split per partition, their answers merged into one."""

    def __init__(self, router: PartitionRouter[int]) -> None:
        super().__init__(len(router.producers))
        self._router = router
        self._next_request = [0] * self.partitions
        self._waiting: dict[tuple[int, int], tuple[_SendState, int]] = {}
        """(partition, upstream request id) -> the client frame and the run's slot in it."""

    def from_client(self, message: Frame) -> Routed:
        code = WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON
        if isinstance(message, str):
            reason = "a magnetar.v1 session carries binary frames only"
            return Routed(client=[encode_send_error(0, code, reason)])
        try:
            send = parse_send(message)
        except BinaryFrameError as exc:
            return Routed(client=[encode_send_error(exc.request_id or 0, code, str(exc))])
        runs = route_frame(self._router, send)
        state = _SendState(send.request_id, [None] * len(runs), len(runs))
        routed = Routed()
        sequence_id = send.first_sequence_id  # SEND_SEQ: each run keeps its messages' ids
        for slot, (partition, run) in enumerate(runs):
            request_id = self._next_request[partition]
            self._next_request[partition] = request_id + 1
            self._waiting[(partition, request_id)] = (state, slot)
            routed.partitions.append((partition, encode_send_run(request_id, run, sequence_id)))
            if sequence_id is not None:
                sequence_id += run.messages
        return routed

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        routed = Routed()
        for message in messages:
            if not isinstance(message, bytes) or message[:1] not in (_RECEIPT, _SEND_ERROR):
                routed.client.append(message)
                continue
            try:
                receipt = parse_receipt(message)
            except BinaryFrameError:
                continue  # an owner's frame the proxy cannot read: nothing to answer with it
            waiting = self._waiting.pop((partition, receipt.request_id), None)
            if waiting is None:
                continue
            state, slot = waiting
            if state.done:
                continue
            if not receipt.ok:
                state.done = True
                routed.client.append(encode_send_error(state.request_id, receipt.error_code, receipt.reason))
                continue
            state.ranges[slot] = receipt.ranges
            state.remaining -= 1
            if state.remaining == 0:
                state.done = True
                merged = [r for ranges in state.ranges if ranges is not None for r in ranges]
                routed.client.append(encode_receipt(state.request_id, merged))
        return routed

    @property
    def waiting(self) -> int:
        """Runs sent to partitions and not answered yet."""
        return len(self._waiting)


class BinaryConsumerFan(ConsumerFan):
    """A ``magnetar.v1`` consumer or reader: an ACK / NACK / ACK_RANGE split per partition, a reader's PERMIT
    releasing its oldest deliveries; in pull mode the held records go out in MESSAGES frames as large as a
    local session's."""

    def permit_frame(self, count: int) -> Frame:
        return encode_permit(count)

    def end_of_topic(self, at_end: bool) -> Frame:
        return end_of_topic_frame(at_end)

    def hand_on_frames(self, held: list[Frame]) -> list[Frame]:
        frames: list[Frame] = []
        records: list[bytes] = []
        size = 0
        for record in held:
            if isinstance(record, str):
                frames.append(record)
                continue
            if records and size + len(record) > RECORDS_FRAME_BYTES_MAX:
                frames.append(messages_frame(records))
                records, size = [], 0
            records.append(record)
            size += len(record)
        if records:
            frames.append(messages_frame(records))
        return frames

    def from_client(self, message: Frame) -> Routed:
        if not isinstance(message, bytes):
            reason = "a magnetar.v1 session carries binary frames only"
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, reason)
        try:
            frame = parse_consumer_frame(message)
        except BinaryFrameError as exc:
            raise WsSessionError(WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, str(exc)) from None
        kind = frame.type
        if self._reader:
            if kind is FrameType.PERMIT:
                return self._release(frame.count)
            if kind is FrameType.IS_END_OF_TOPIC:
                return self._ask_end_of_topic(message)
            raise WsSessionError(
                WsErrorCode.FAILED_TO_DESERIALIZE_FROM_JSON, f"a reader does not take {kind.name}"
            )
        if kind is FrameType.ACK or kind is FrameType.NACK:
            ids: dict[int, list[tuple[int, int, int, int, int]]] = {}
            for message_id in frame.ids:
                if 0 <= message_id[0] < self.partitions:
                    ids.setdefault(message_id[0], []).append(message_id)
            return Routed(partitions=[(p, encode_ids(kind, group)) for p, group in ids.items()])
        if kind is FrameType.ACK_RANGE:
            ranges: dict[int, list[tuple[int, Position3, Position3]]] = {}
            for ack_range in frame.ranges:
                if 0 <= ack_range[0] < self.partitions:
                    ranges.setdefault(ack_range[0], []).append(ack_range)
            return Routed(partitions=[(p, encode_ack_ranges(group)) for p, group in ranges.items()])
        if kind is FrameType.PERMIT:
            return self._client_permits(frame.count, message)
        if kind is FrameType.IS_END_OF_TOPIC:
            return self._ask_end_of_topic(message)
        return self._unsubscribe(message)

    def from_partition(self, partition: int, messages: Sequence[Frame]) -> Routed:
        routed = Routed()
        for message in messages:
            if isinstance(message, bytes) and message[:1] == _MESSAGES:
                if self._pull:
                    for record in message_records(message):
                        self.held.append((partition, record))
                else:
                    self._delivery(partition, message, int.from_bytes(message[1:5], "little"), routed)
            elif isinstance(message, bytes) and message[:1] == _END_OF_TOPIC:
                self._end_of_topic(partition, message == _AT_END, routed)
            else:
                routed.client.append(message)
        return self._hand_on(routed)
