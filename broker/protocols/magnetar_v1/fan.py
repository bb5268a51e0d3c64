"""A ``magnetar.v1`` producer fanned out over a partitioned topic's partitions by the owner proxy
(:mod:`magnetar.broker.protocols.fan`): a SEND frame is cut into runs of consecutive messages for the same
partition exactly as a local session cuts it (:func:`~.producer.route_frame`); each run goes to its partition
as a SEND of its own (request ids numbered per partition), and the client gets what a local session answers:
one RECEIPT with every run's ranges in frame order once all runs are stored, or one SEND_ERROR (the first
failure) otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.core.routing import PartitionRouter
from magnetar.broker.protocols.fan import Fan, Frame, Routed
from magnetar.broker.protocols.magnetar_v1.producer import route_frame
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire.magnetar_v1 import (
    BinaryFrameError,
    FrameType,
    ReceiptRange,
    encode_receipt,
    encode_send_error,
    encode_send_run,
    parse_receipt,
    parse_send,
)

_RECEIPT = bytes([FrameType.RECEIPT])
_SEND_ERROR = bytes([FrameType.SEND_ERROR])


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
        for slot, (partition, run) in enumerate(runs):
            request_id = self._next_request[partition]
            self._next_request[partition] = request_id + 1
            self._waiting[(partition, request_id)] = (state, slot)
            routed.partitions.append((partition, encode_send_run(request_id, run)))
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
