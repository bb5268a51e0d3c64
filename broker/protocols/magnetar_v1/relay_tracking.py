"""What the owner proxy must know of ``magnetar.v1`` frames to keep its promises when a topic moves
(:mod:`magnetar.broker.protocols.relay_tracking` says what it keeps): a producer's SEND frames by their
``request_id``, answered with a SEND_ERROR when their outcome is unknown; a consumer's PERMIT and
IS_END_OF_TOPIC frames and the MESSAGES frames it is delivered."""

from __future__ import annotations

import struct

from magnetar.broker.protocols.relay_tracking import ConsumerTracker, FrameKind, Tracker
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire import encode_message_id
from magnetar.broker.wire.magnetar_v1 import (
    SEND_TYPES,
    FrameType,
    encode_permit,
    encode_send_error,
    end_of_topic_frame,
    parse_messages,
)

_U64_AT_1 = struct.Struct("<Q")
_U32_AT_1 = struct.Struct("<I")
_IS_END_OF_TOPIC = bytes([FrameType.IS_END_OF_TOPIC])
_END_OF_TOPIC = bytes([FrameType.END_OF_TOPIC])


class BinaryProducerTracker(Tracker):
    def __init__(self) -> None:
        self._requests: dict[int, None] = {}  # insertion-ordered: answered in the order sent

    @staticmethod
    def _request_id(message: str | bytes) -> int | None:
        if isinstance(message, bytes) and len(message) >= 9:
            return int(_U64_AT_1.unpack_from(message, 1)[0])
        return None

    def on_client(self, message: str | bytes) -> FrameKind:
        return FrameKind.PUBLISH

    def on_forward(self, message: str | bytes) -> None:
        if isinstance(message, bytes) and message[:1] in SEND_TYPES:
            request_id = self._request_id(message)
            if request_id is not None:
                self._requests[request_id] = None

    def on_upstream(self, message: str | bytes) -> None:
        if isinstance(message, bytes) and message[:1] in (
            bytes([FrameType.RECEIPT]),
            bytes([FrameType.SEND_ERROR]),
        ):
            request_id = self._request_id(message)
            if request_id is not None:
                self._requests.pop(request_id, None)

    def lost(self, reason: str) -> list[str | bytes]:
        code = WsErrorCode.UNKNOWN_ERROR
        answers: list[str | bytes] = [encode_send_error(rid, code, reason) for rid in self._requests]
        self._requests.clear()
        return answers

    def refused(self, message: str | bytes, reason: str) -> str | bytes | None:
        request_id = self._request_id(message)
        if request_id is None or not isinstance(message, bytes) or message[:1] not in SEND_TYPES:
            return None
        return encode_send_error(request_id, WsErrorCode.UNKNOWN_ERROR, reason)

    @property
    def pending(self) -> int:
        return len(self._requests)


class BinaryConsumerTracker(ConsumerTracker):
    """A ``magnetar.v1`` consumer or reader."""

    def permits_granted(self, message: str | bytes) -> int:
        if isinstance(message, bytes) and message[:1] == bytes([FrameType.PERMIT]) and len(message) >= 5:
            return int(_U32_AT_1.unpack_from(message, 1)[0])
        return 0

    def permit(self, count: int) -> str | bytes:
        return encode_permit(count)

    def asks_end_of_topic(self, message: str | bytes) -> bool:
        return message == _IS_END_OF_TOPIC

    def answers_end_of_topic(self, message: str | bytes) -> bool:
        return isinstance(message, bytes) and message[:1] == _END_OF_TOPIC

    def end_of_topic(self, at_end: bool) -> str | bytes:
        return end_of_topic_frame(at_end)

    def delivered(self, message: str | bytes, *, last_id: bool) -> tuple[int, bytes | None]:
        if not (
            isinstance(message, bytes) and message[:1] == bytes([FrameType.MESSAGES]) and len(message) >= 5
        ):
            return 0, None
        count = int(_U32_AT_1.unpack_from(message, 1)[0])
        if not (last_id and count):
            return count, None
        partition, ledger_id, entry_id, index, size = parse_messages(message)[-1].message_id
        return count, encode_message_id(ledger_id, entry_id, partition, index, size)
