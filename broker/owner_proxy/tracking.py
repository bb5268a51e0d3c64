"""What the proxy remembers of a session to keep its promises across a change of owner (sans-IO).

The relay (:mod:`.relay`) passes every frame through unchanged; a tracker only watches them:

* a **producer** remembers the requests forwarded and not yet answered (JSON: their ``context``, in order;
  ``magnetar.v1``: SEND ``request_id``). When the upstream session ends those have an unknown outcome: each
  is answered with Pulsar's error result (``send-error:8`` + ``errorMsg``, the same ``context``; a
  ``SEND_ERROR`` for a SEND), never dropped. A message that finds the reconnect buffer full is answered
  so too.
* a **consumer** counts, in pull mode, the permits the client granted minus the messages delivered: the new
  upstream session gets them again (``permit`` / PERMIT). Acks are forwarded as they are (message ids name
  ledger positions, valid on any owner); what was not acked is redelivered by the new owner (at least once).
* a **reader** remembers the id of the last message delivered to the client: the new upstream session
  starts after it (``messageId=<that id>``: a reader starts after the id it is given).
* a consumer's or reader's ``isEndOfTopic`` questions forwarded and not yet answered are answered
  ``false`` when the upstream session ends (not known to be at its end: the client asks again).
"""

from __future__ import annotations

import contextlib
import struct
from collections import deque
from enum import Enum, auto

import orjson

from magnetar.broker.protocols.pulsar_ws.messages import end_of_topic_json, producer_ack_error
from magnetar.broker.protocols.ws_errors import WsErrorCode
from magnetar.broker.wire.magnetar_v1 import (
    FrameType,
    encode_permit,
    encode_send_error,
    end_of_topic_frame,
    parse_messages,
)
from magnetar.broker.wire.message_id import encode_message_id

_U64_AT_1 = struct.Struct("<Q")
_U32_AT_1 = struct.Struct("<I")
_JSON_DELIVERY_PREFIX = '{"messageId":"'
_JSON_END_OF_TOPIC = '{"endOfTopic":'
_IS_END_OF_TOPIC = bytes([FrameType.IS_END_OF_TOPIC])
_END_OF_TOPIC = bytes([FrameType.END_OF_TOPIC])


class FrameKind(Enum):
    PUBLISH = auto()
    """A producer's request: answered by the owner, tracked until then."""
    PERMIT = auto()
    """Pull-mode permits: counted, re-granted to a new upstream session (not buffered)."""
    OTHER = auto()


class Tracker:
    """The base: forwards everything, remembers nothing."""

    def on_client(self, message: str | bytes) -> FrameKind:
        return FrameKind.OTHER

    def on_forward(self, message: str | bytes) -> None:
        """``message`` is being sent to the current upstream session."""

    def on_upstream(self, message: str | bytes) -> None:
        """``message`` came from the upstream session (and goes to the client)."""

    def lost(self, reason: str) -> list[str | bytes]:
        """The upstream session ended: the answers the client is owed."""
        return []

    def refused(self, message: str | bytes, reason: str) -> str | bytes | None:
        """The answer to a client frame that cannot be buffered; None: it waits for room instead."""
        return None

    def regrant(self) -> list[str | bytes]:
        """Frames that open a new upstream session (before any buffered frame)."""
        return []

    def query_overrides(self) -> dict[str, str]:
        """Query parameters a new upstream session is opened with, replacing the client's."""
        return {}

    @property
    def pending(self) -> int:
        """Requests forwarded and not yet answered."""
        return 0


class JsonProducerTracker(Tracker):
    def __init__(self) -> None:
        self._contexts: deque[str | None] = deque()

    def on_client(self, message: str | bytes) -> FrameKind:
        return FrameKind.PUBLISH

    def on_forward(self, message: str | bytes) -> None:
        self._contexts.append(_context(message))

    def on_upstream(self, message: str | bytes) -> None:
        if not isinstance(message, str):
            return
        try:
            document = orjson.loads(message)
        except orjson.JSONDecodeError:
            return
        if not isinstance(document, dict) or "result" not in document:
            return
        context = document.get("context")
        if self._contexts and self._contexts[0] == context:  # the common case: answers in order
            self._contexts.popleft()
            return
        # ValueError: an answer to a request the proxy did not see as one (e.g. a frame that was not JSON)
        with contextlib.suppress(ValueError):
            self._contexts.remove(context if isinstance(context, str) else None)

    def lost(self, reason: str) -> list[str | bytes]:
        answers: list[str | bytes] = [
            producer_ack_error(WsErrorCode.UNKNOWN_ERROR, reason, context).decode()
            for context in self._contexts
        ]
        self._contexts.clear()
        return answers

    def refused(self, message: str | bytes, reason: str) -> str | bytes | None:
        return producer_ack_error(WsErrorCode.UNKNOWN_ERROR, reason, _context(message)).decode()

    @property
    def pending(self) -> int:
        return len(self._contexts)


def _context(message: str | bytes) -> str | None:
    if not isinstance(message, str):
        return None
    try:
        document = orjson.loads(message)
    except orjson.JSONDecodeError:
        return None
    context = document.get("context") if isinstance(document, dict) else None
    return context if isinstance(context, str) else None


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
        if isinstance(message, bytes) and message[:1] == bytes([FrameType.SEND]):
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
        if request_id is None or not isinstance(message, bytes) or message[:1] != bytes([FrameType.SEND]):
            return None
        return encode_send_error(request_id, WsErrorCode.UNKNOWN_ERROR, reason)

    @property
    def pending(self) -> int:
        return len(self._requests)


class ConsumerTracker(Tracker):
    """A consumer or a reader, JSON or ``magnetar.v1``."""

    def __init__(self, *, binary: bool, pull_mode: bool, reader: bool) -> None:
        self._binary = binary
        self._pull_mode = pull_mode
        self._reader = reader
        self._permits = 0
        """Pull mode: permits granted by the client and not yet used by a delivery."""
        self.last_delivered: bytes | None = None
        """A reader's last delivered message id (base64 text)."""
        self._questions = 0
        """``isEndOfTopic`` questions forwarded and not answered yet."""

    def on_forward(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            if message == _IS_END_OF_TOPIC:
                self._questions += 1
        elif '"isEndOfTopic"' in message:
            with contextlib.suppress(orjson.JSONDecodeError):
                document = orjson.loads(message)
                if isinstance(document, dict) and document.get("type") == "isEndOfTopic":
                    self._questions += 1

    def lost(self, reason: str) -> list[str | bytes]:
        questions, self._questions = self._questions, 0
        answer: str | bytes = end_of_topic_frame(False) if self._binary else end_of_topic_json(False).decode()
        return [answer] * questions

    def on_client(self, message: str | bytes) -> FrameKind:
        if not self._pull_mode or self._reader:
            return FrameKind.OTHER
        if self._binary:
            if isinstance(message, bytes) and message[:1] == bytes([FrameType.PERMIT]) and len(message) >= 5:
                self._permits += int(_U32_AT_1.unpack_from(message, 1)[0])
                return FrameKind.PERMIT
            return FrameKind.OTHER
        if isinstance(message, str) and '"permit"' in message:
            try:
                document = orjson.loads(message)
            except orjson.JSONDecodeError:
                return FrameKind.OTHER
            count = document.get("permitMessages") if isinstance(document, dict) else None
            if document.get("type") == "permit" and isinstance(count, int) and count > 0:
                self._permits += count
                return FrameKind.PERMIT
        return FrameKind.OTHER

    def on_upstream(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            answers = message[:1] == _END_OF_TOPIC
        else:
            answers = message.startswith(_JSON_END_OF_TOPIC)
        if answers and self._questions:
            self._questions -= 1
            return
        if self._binary:
            if (
                isinstance(message, bytes)
                and message[:1] == bytes([FrameType.MESSAGES])
                and len(message) >= 5
            ):
                count = int(_U32_AT_1.unpack_from(message, 1)[0])
                self._permits = max(0, self._permits - count)
                if self._reader and count:
                    partition, ledger_id, entry_id, index, size = parse_messages(message)[-1].message_id
                    self.last_delivered = encode_message_id(ledger_id, entry_id, partition, index, size)
            return
        if isinstance(message, str) and message.startswith(_JSON_DELIVERY_PREFIX):
            self._permits = max(0, self._permits - 1)
            if self._reader:
                start = len(_JSON_DELIVERY_PREFIX)
                self.last_delivered = message[start : message.index('"', start)].encode()

    def regrant(self) -> list[str | bytes]:
        if not self._pull_mode or self._permits == 0:
            return []
        if self._binary:
            return [encode_permit(self._permits)]
        return [orjson.dumps({"type": "permit", "permitMessages": self._permits}).decode()]

    def query_overrides(self) -> dict[str, str]:
        if self._reader and self.last_delivered is not None:
            return {"messageId": self.last_delivered.decode()}
        return {}
