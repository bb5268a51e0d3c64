"""What the owner proxy must know of Pulsar's JSON frames to keep its promises when a topic moves
(:mod:`magnetar.broker.protocols.relay_tracking` says what it keeps): a producer's requests by their
``context``, answered ``send-error:8`` with the same ``context`` when their outcome is unknown; a consumer's
``permit`` and ``isEndOfTopic`` commands and the ``ConsumerMessage`` frames it is delivered."""

from __future__ import annotations

import contextlib
from collections import deque

import orjson

from magnetar.broker.protocols.pulsar_ws.messages import end_of_topic_json, producer_ack_error
from magnetar.broker.protocols.relay_tracking import ConsumerTracker, FrameKind, Tracker
from magnetar.broker.protocols.ws_errors import WsErrorCode

_JSON_DELIVERY_PREFIX = '{"messageId":"'
_JSON_END_OF_TOPIC = '{"endOfTopic":'


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


class JsonConsumerTracker(ConsumerTracker):
    """A JSON consumer or reader."""

    def permits_granted(self, message: str | bytes) -> int:
        if isinstance(message, str) and '"permit"' in message:
            try:
                document = orjson.loads(message)
            except orjson.JSONDecodeError:
                return 0
            count = document.get("permitMessages") if isinstance(document, dict) else None
            if document.get("type") == "permit" and isinstance(count, int) and count > 0:
                return count
        return 0

    def permit(self, count: int) -> str | bytes:
        return orjson.dumps({"type": "permit", "permitMessages": count}).decode()

    def asks_end_of_topic(self, message: str | bytes) -> bool:
        if isinstance(message, str) and '"isEndOfTopic"' in message:
            with contextlib.suppress(orjson.JSONDecodeError):
                document = orjson.loads(message)
                return isinstance(document, dict) and document.get("type") == "isEndOfTopic"
        return False

    def answers_end_of_topic(self, message: str | bytes) -> bool:
        return isinstance(message, str) and message.startswith(_JSON_END_OF_TOPIC)

    def end_of_topic(self, at_end: bool) -> str | bytes:
        return end_of_topic_json(at_end).decode()

    def delivered(self, message: str | bytes, *, last_id: bool) -> tuple[int, bytes | None]:
        if not (isinstance(message, str) and message.startswith(_JSON_DELIVERY_PREFIX)):
            return 0, None
        if not last_id:
            return 1, None
        start = len(_JSON_DELIVERY_PREFIX)
        return 1, message[start : message.index('"', start)].encode()
