"""What the owner proxy remembers of a session to keep its promises across a change of owner (sans-IO).

The relay (:mod:`magnetar.broker.owner_proxy.relay`) passes every frame through unchanged; a tracker only
watches them. The proxy knows no protocol: each adapter gives it its trackers
(:meth:`~.adapter.ProtocolAdapter.relay_tracker`) - a producer's tracker in the adapter's own terms, a
consumer's or reader's as :class:`ConsumerTracker`, which is protocol-neutral and asks the adapter only what
a frame is (a permit of N, an end-of-topic question or answer, N deliveries and the last one's id) and how to
say a permit or an end-of-topic answer:

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

from enum import Enum, auto


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


class ConsumerTracker(Tracker):
    """A consumer or a reader, in the terms of its protocol's adapter (the hooks below)."""

    def __init__(self, *, pull_mode: bool, reader: bool) -> None:
        self._pull_mode = pull_mode
        self._reader = reader
        self._permits = 0
        """Pull mode: permits granted by the client and not yet used by a delivery."""
        self.last_delivered: bytes | None = None
        """A reader's last delivered message id (base64 text)."""
        self._questions = 0
        """``isEndOfTopic`` questions forwarded and not answered yet."""

    # -- what the adapter says of its frames ---------------------------------------------------------

    def permits_granted(self, message: str | bytes) -> int:
        """The permits a client frame grants (0: not a permit)."""
        raise NotImplementedError

    def permit(self, count: int) -> str | bytes:
        """A client frame granting ``count`` permits."""
        raise NotImplementedError

    def asks_end_of_topic(self, message: str | bytes) -> bool:
        """Whether a client frame is the end-of-topic question."""
        raise NotImplementedError

    def answers_end_of_topic(self, message: str | bytes) -> bool:
        """Whether an owner's frame answers an end-of-topic question."""
        raise NotImplementedError

    def end_of_topic(self, at_end: bool) -> str | bytes:
        """The answer to an end-of-topic question."""
        raise NotImplementedError

    def delivered(self, message: str | bytes, *, last_id: bool) -> tuple[int, bytes | None]:
        """The messages an owner's frame delivers, and (when ``last_id``) the last one's id as base64 text."""
        raise NotImplementedError

    # -- the tracking, the same for every protocol ----------------------------------------------------

    def on_forward(self, message: str | bytes) -> None:
        if self.asks_end_of_topic(message):
            self._questions += 1

    def lost(self, reason: str) -> list[str | bytes]:
        questions, self._questions = self._questions, 0
        return [self.end_of_topic(False)] * questions

    def on_client(self, message: str | bytes) -> FrameKind:
        if not self._pull_mode or self._reader:
            return FrameKind.OTHER
        granted = self.permits_granted(message)
        if granted > 0:
            self._permits += granted
            return FrameKind.PERMIT
        return FrameKind.OTHER

    def on_upstream(self, message: str | bytes) -> None:
        if self._questions and self.answers_end_of_topic(message):
            self._questions -= 1
            return
        count, last = self.delivered(message, last_id=self._reader)
        if count:
            self._permits = max(0, self._permits - count)
            if last is not None:
                self.last_delivered = last

    def regrant(self) -> list[str | bytes]:
        if not self._pull_mode or self._permits == 0:
            return []
        return [self.permit(self._permits)]

    def query_overrides(self) -> dict[str, str]:
        if self._reader and self.last_delivered is not None:
            return {"messageId": self.last_delivered.decode()}
        return {}
