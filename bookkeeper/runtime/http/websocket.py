"""WebSocket sessions (RFC 6455) with bounded queues in both directions.

Theory of operation. A WebSocket route's handler receives a :class:`WebSocketRequest` and either rejects it
with an ordinary HTTP response (Pulsar answers a failed producer/consumer creation with 400/404/409/... on
the upgrade request) or accepts it and gets a :class:`WebSocket`. From then on two tasks own the socket:

* the **reader** feeds received bytes to the frame decoder (:mod:`.ws_frames`; wsproto serves only the
  opening handshake), which reassembles fragmented messages (refusing any message over ``ws_frame_bytes_max``
  with close code 1009, or one in more than ``ws_message_fragments_max`` frames with 1008); it answers pings
  with pongs, runs the closing handshake, and puts complete messages on a receive queue bounded by
  ``ws_receive_queue_bytes_max`` and ``ws_receive_queue_messages_max`` (an empty message counts as one) —
  when the handler does not keep up the reader stops reading and TCP flow control slows the peer. Every
  message of a received chunk is queued at once and :meth:`WebSocket.receive_batch` hands them all to the
  handler in one go (one task switch per chunk, not per message);
* the **writer** sends whatever frames are queued in one ``send_all``. ``send_text``/``send_bytes`` only
  encode a frame and append it to the send buffer (they checkpoint for cancellation but do not yield), so a
  dispatcher pushing many small messages in a loop fills the buffer while the writer is busy and they leave
  in few socket writes (write coalescing): once woken, the writer lets the tasks ready in that pass queue
  their frames too before it writes. A sender that coalesced its frames itself - a session's outbound queue
  hands over everything queued in one call - says so (``send_many(..., now=True)``) and the writer writes
  at once, one scheduler pass sooner (the latency of a producer's receipt and of a delivery). A sender waits
  while the buffer holds more than ``ws_send_queue_bytes_max``: a slow reader applies back-pressure instead
  of growing memory.

What the peer causes us to send without a handler asking - pongs - is bounded too: the pings of one received
chunk are answered with one pong, for the last of them (RFC 6455 §5.5.3 allows it), and the reader stops
reading while the send buffer holds more than ``ws_send_queue_bytes_max``: a peer that does not read what we
send cannot make us buffer more, and once a send has stalled for ``http_send_timeout_ms`` it is
disconnected.

Memory of one session is thus bounded by the settings: received, at most ``ws_receive_queue_bytes_max`` plus
one chunk's messages (``RECEIVE_CHUNK_BYTES``) plus a message being reassembled and the frame being read
(``ws_frame_bytes_max`` each); to send, ``ws_send_queue_bytes_max`` plus the last message queued. What the
sessions of a port hold received together is bounded by ``ws_received_bytes_in_flight_max``
(:mod:`.ws_budget`): each session reports what it holds after every read and every hand-over, and one
evicted there drops its unfinished message and closes with 1013. A message that has started arriving must be
complete within ``ws_message_timeout_ms`` (time spent with reading paused does not count), else 1008: a
client cannot park an unfinished message for the session's lifetime.

Idle sessions (no frame in either direction for ``ws_idle_timeout_ms``) are closed with 1001, like Jetty's
idle timeout behind Pulsar's ``webSocketSessionIdleTimeoutMillis``. After we send a Close frame the peer has
``ws_close_timeout_ms`` to answer before the socket is dropped. As RFC 6455 §7.1.1 asks, the server closes
the TCP connection once the closing handshake is complete.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

import trio

from magnetar.bookkeeper.runtime import SendTimer
from magnetar.bookkeeper.runtime.http.settings import HttpSettings
from magnetar.bookkeeper.runtime.http.types import HttpResponse, QueryParams, RequestHead
from magnetar.bookkeeper.runtime.http.ws_budget import ReceiveBudget
from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_ABNORMAL,
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_TRY_AGAIN_LATER,
    OPCODE_BINARY,
    OPCODE_CLOSE,
    OPCODE_PONG,
    OPCODE_TEXT,
    Close,
    FrameDecoder,
    Ping,
    Pong,
    ProtocolViolation,
    append_frames,
    close_payload,
    frame_header,
)

log = logging.getLogger(__name__)

RECEIVE_CHUNK_BYTES = 65536
_MESSAGE_TYPES = (str, bytes)
"""What the decoder gives for a message (a constant: ``str | bytes`` in a check is built every time)."""


def _fresh(event: trio.Event) -> trio.Event:
    """An unset event to wait on: the same one while nobody set it, so concurrent waiters share it."""
    return trio.Event() if event.is_set() else event


class WebSocketClosed(Exception):
    """The session is closed (or closing); ``code``/``reason`` say how (the peer's or our Close frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"websocket closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


class WebSocket:
    """An accepted WebSocket session. Created by :meth:`WebSocketRequest.accept`."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        settings: HttpSettings,
        head: RequestHead,
        subprotocol: str | None,
        *,
        initial_data: bytes = b"",
        receive_budget: ReceiveBudget | None = None,
    ) -> None:
        self._stream = stream
        self._decoder = FrameDecoder(
            expect_masked=True,
            message_bytes_max=settings.ws_frame_bytes_max,
            message_fragments_max=settings.ws_message_fragments_max,
        )
        self._settings = settings
        self.head = head
        self.subprotocol = subprotocol
        self._initial_data = initial_data
        """Frames that arrived together with the upgrade request."""
        # send side
        self._out = bytearray()
        self._out_event = trio.Event()
        self._drain_event = trio.Event()
        self._send_timer = SendTimer(settings.http_send_timeout_ms / 1000)
        self._write_now = False
        """The frames queued since the last write came coalesced (``send_many(..., now=True)``)."""
        # receive side
        self._in: deque[str | bytes] = deque()
        self._in_bytes = 0
        self._in_event = trio.Event()
        self._space_event = trio.Event()
        self._budget = receive_budget or ReceiveBudget(settings.ws_received_bytes_in_flight_max)
        """Shared by the sessions of a server (a session made alone gets its own)."""
        self._message_started = math.inf
        """When the message (or frame) now unfinished started arriving; inf when none is."""
        self._message_timeout_s = settings.ws_message_timeout_ms / 1000
        self._budget_wait = trio.CancelScope()
        """The reader's wait for room in the budget: cancelled when the session closes."""
        # lifecycle: the closing handshake is over once a Close went each way
        self._close_sent = False
        self._close_received = False
        self._close_code: int | None = None
        self._close_reason = ""
        self._reading_done = False
        self._close_deadline = math.inf
        self._last_activity = trio.current_time()
        self._reading_paused = False
        self._watch_sleep = trio.CancelScope()
        """The watcher's sleep: cancelled when a closing handshake starts, so it looks at the new deadline."""
        self._finished = trio.Event()
        self._scope = trio.CancelScope()

    # --- public API -----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once a Close frame was sent or received, or the connection dropped."""
        return self._close_code is not None

    @property
    def close_code(self) -> int | None:
        return self._close_code

    @property
    def close_reason(self) -> str:
        return self._close_reason

    @property
    def send_queue_bytes(self) -> int:
        """Encoded frames waiting for the socket (bounded by ``ws_send_queue_bytes_max`` plus one message)."""
        return len(self._out)

    @property
    def receive_queue_bytes(self) -> int:
        """Received messages waiting for :meth:`receive`."""
        return self._in_bytes

    @property
    def receive_queue_messages(self) -> int:
        """How many received messages wait for :meth:`receive` (empty ones included)."""
        return len(self._in)

    async def receive(self) -> str | bytes:
        """The next complete message: ``str`` for a text message, ``bytes`` for a binary one.

        Messages received before the close are delivered first; then :class:`WebSocketClosed` is raised."""
        await self._wait_for_messages()
        message = self._in.popleft()
        self._in_bytes -= len(message)
        self._space_event.set()
        self._account()
        await trio.lowlevel.checkpoint()
        return message

    async def receive_batch(self) -> list[str | bytes]:
        """Every message received so far (at least one), in order: a handler that processes a whole batch
        between two awaits costs one task switch per received chunk instead of one per message.

        Messages received before the close are delivered first; then :class:`WebSocketClosed` is raised."""
        await self._wait_for_messages()
        batch = list(self._in)
        self._in.clear()
        self._in_bytes = 0
        self._space_event.set()
        self._account()
        await trio.lowlevel.checkpoint()
        return batch

    @property
    def unfinished_bytes(self) -> int:
        """:class:`~.ws_budget.ReceiveHolder`: bytes of a message not received whole yet."""
        return self._decoder.unfinished_bytes

    def evict(self, reason: str) -> None:
        """:class:`~.ws_budget.ReceiveHolder`: drop the unfinished message, close with 1013."""
        log.info("websocket %s evicted: %s", self.head.client, reason)
        self._decoder.abandon()
        self._message_started = math.inf
        self._start_close(CLOSE_TRY_AGAIN_LATER, reason)

    def _account(self) -> None:
        """Tell the port's budget what this session holds received (unfinished and queued messages)."""
        self._budget.hold(self, self._decoder.unfinished_bytes + self._in_bytes)

    async def _wait_for_messages(self) -> None:
        while not self._in:
            if self._reading_done or self._close_code is not None:
                await trio.lowlevel.checkpoint()
                raise WebSocketClosed(self._close_code or CLOSE_ABNORMAL, self._close_reason)
            self._in_event = _fresh(self._in_event)
            await self._in_event.wait()

    def __aiter__(self) -> AsyncIterator[str | bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[str | bytes]:
        while True:
            try:
                yield await self.receive()
            except WebSocketClosed:
                return

    async def send_text(self, text: str) -> None:
        await self._send_frame(OPCODE_TEXT, text.encode("utf-8"))

    async def send_text_encoded(self, data: bytes) -> None:
        """Send a text message given as UTF-8 bytes (e.g. from orjson), skipping a decode/encode round trip.
        The caller guarantees the bytes are valid UTF-8."""
        await self._send_frame(OPCODE_TEXT, data)

    async def send_bytes(self, data: bytes) -> None:
        await self._send_frame(OPCODE_BINARY, data)

    async def send_many(self, messages: Sequence[bytes], *, text: bool, now: bool = False) -> None:
        """Queue several messages (UTF-8 text when ``text``, else binary) in one call; one socket write.
        ``now``: the caller coalesced them already, the writer need not wait for more (the module's
        docstring)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        append_frames(self._out, OPCODE_TEXT if text else OPCODE_BINARY, messages)
        self._write_now = now
        await self._queued()

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Start the closing handshake (if not started) and wait until the session is over.

        Waits at most ``ws_close_timeout_ms`` for the peer's Close, then drops the connection."""
        self._start_close(code, reason)
        with trio.move_on_after(self._settings.ws_close_timeout_ms / 1000):
            await self._finished.wait()
        if not self._finished.is_set():
            self._scope.cancel()
            await self._finished.wait()

    # --- internals used by the connection ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._close_code is not None or self._close_sent or self._close_received:
            raise WebSocketClosed(self._close_code or CLOSE_ABNORMAL, self._close_reason)

    async def _send_frame(self, opcode: int, payload: bytes) -> None:
        """Queue one complete, unfragmented data frame (a server's frames are unmasked: header + payload)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._out += frame_header(opcode, len(payload))
        self._out += payload
        await self._queued()

    async def _queued(self) -> None:
        """Wake the writer; wait while the send queue is over its bound (back-pressure)."""
        self._out_event.set()
        while len(self._out) > self._settings.ws_send_queue_bytes_max and self._close_code is None:
            self._drain_event = _fresh(self._drain_event)
            await self._drain_event.wait()

    def _queue_frame(self, data: bytes) -> None:
        self._out += data
        self._out_event.set()

    def _queue_control(self, opcode: int, payload: bytes) -> None:
        self._queue_frame(frame_header(opcode, len(payload)) + payload)

    def _start_close(self, code: int, reason: str) -> None:
        """Queue our Close frame (once); the reader then waits for the peer's, bounded in time."""
        if self._close_code is None:
            self._close_code = code
            self._close_reason = reason
        if not self._close_sent and not self._reading_done:
            self._close_sent = True
            self._queue_control(OPCODE_CLOSE, close_payload(code, reason))
            if self._close_received:
                self._reading_done = True
        if self._close_deadline == math.inf:  # the first close starts the clock; later calls do not extend it
            self._close_deadline = trio.current_time() + self._settings.ws_close_timeout_ms / 1000
            self._watch_sleep.cancel()
        self._wake_all()

    def server_shutdown(self) -> None:
        """Graceful server shutdown: close with 1001 ("going away")."""
        self._start_close(CLOSE_GOING_AWAY, "Server shutting down")

    def _wake_all(self) -> None:
        self._out_event.set()
        self._in_event.set()
        self._drain_event.set()
        self._space_event.set()
        self._budget_wait.cancel()

    async def run(self) -> None:
        """Run the reader and writer until the session is over, then close the socket."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch)
                    async with trio.open_nursery() as io:
                        io.start_soon(self._reader)
                        io.start_soon(self._writer)
                    nursery.cancel_scope.cancel()
        finally:
            if self._close_code is None:
                self._close_code = CLOSE_ABNORMAL
            self._reading_done = True
            self._budget.release(self)
            self._in.clear()  # nobody receives them any more: they must not outlive the budget's count
            self._in_bytes = 0
            self._wake_all()
            await trio.aclose_forcefully(self._stream)
            self._finished.set()

    async def _writer(self) -> None:
        timer = self._send_timer
        while True:
            if not self._out:
                if self._reading_done:
                    return
                self._out_event = _fresh(self._out_event)
                await self._out_event.wait()
                # Let the tasks that are ready now queue their frames too: one socket write for all of
                # them (a send on loopback costs ~100 us here, as much as building dozens of frames).
                if not self._write_now:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                continue
            data = bytes(self._out)
            self._out.clear()
            self._write_now = False
            self._drain_event.set()
            timer.sending()
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                log.debug("websocket send failed: %r", exc)
                self._abort()
                return
            timer.sent()
            self._last_activity = trio.current_time()

    async def _watch(self) -> None:
        """The session's deadlines, kept by one task instead of a cancel scope around every read and send
        (10-12 µs each, see :mod:`..send_timer`): a send that stalls for ``http_send_timeout_ms``, or a
        peer that has not answered our Close by the close deadline, aborts the session; no traffic either
        way for ``ws_idle_timeout_ms`` starts the closing handshake (1001 "Idle timeout"), and a message not
        complete ``ws_message_timeout_ms`` after it started (reading not paused) closes with 1008."""
        timer = self._send_timer
        idle_s = self._settings.ws_idle_timeout_ms / 1000
        message_s = self._message_timeout_s
        while True:
            now = trio.current_time()
            if now >= timer.deadline:
                log.debug("websocket send stalled for http_send_timeout_ms: the peer reads nothing")
                self._abort()
                return
            if now >= self._close_deadline:
                log.debug("websocket peer did not answer our Close in time")
                self._abort()
                return
            idle_at = message_at = math.inf
            if self._close_deadline == math.inf:  # once closing, only the close deadline counts
                # While the application is behind (reading paused) the peer is not idle: look again later.
                idle_at = (now if self._reading_paused else self._last_activity) + idle_s
                if now >= idle_at:
                    self._start_close(CLOSE_GOING_AWAY, "Idle timeout")
                    continue
                # A message starting while this task sleeps is seen at the latest one timeout later.
                message_at = (now if self._reading_paused else min(now, self._message_started)) + message_s
                if now >= message_at:
                    timeout_ms = self._settings.ws_message_timeout_ms
                    self._decoder.abandon()
                    self._account()
                    self._start_close(CLOSE_POLICY_VIOLATION, f"message not complete within {timeout_ms} ms")
                    continue
            wake_at = min(timer.next_check(now), idle_at, message_at, self._close_deadline)
            with trio.CancelScope(deadline=wake_at) as self._watch_sleep:
                await trio.sleep_forever()

    def _abort(self) -> None:
        if self._close_code is None:
            self._close_code = CLOSE_ABNORMAL
        self._scope.cancel()

    def _must_pause(self) -> bool:
        """Whether to stop reading: the handler is behind (receive queue over a bound), the peer does not
        read what we send (send buffer over its bound), or the port's sessions hold their received budget."""
        settings = self._settings
        return self._close_code is None and (
            self._in_bytes > settings.ws_receive_queue_bytes_max
            or len(self._in) > settings.ws_receive_queue_messages_max
            or len(self._out) > settings.ws_send_queue_bytes_max
            or self._budget.full
        )

    async def _pause_reading(self) -> None:
        self._reading_paused = True  # the application or the send side is behind: no idle timeout
        paused_at = trio.current_time()
        while self._must_pause():
            if len(self._out) > self._settings.ws_send_queue_bytes_max:
                self._drain_event = _fresh(self._drain_event)
                await self._drain_event.wait()
            elif self._budget.full:
                with trio.CancelScope() as self._budget_wait:
                    await self._budget.wait_for_room()
            else:
                self._space_event = _fresh(self._space_event)
                await self._space_event.wait()
        self._reading_paused = False
        self._last_activity = trio.current_time()
        self._message_started += self._last_activity - paused_at  # waiting for us is not the peer's time

    async def _reader(self) -> None:
        while not self._reading_done:
            if self._must_pause():
                await self._pause_reading()
            if self._initial_data:
                data = self._initial_data
                self._initial_data = b""
            else:
                data = await self._receive_chunk()
            if not data:
                self._reading_done = True
                self._abort()
                return
            queued = len(self._in)
            self._handle_events(self._decoder.feed(data))
            if not self._decoder.unfinished_bytes:
                self._message_started = math.inf
            elif self._message_started == math.inf or len(self._in) > queued:  # a message began in `data`
                self._message_started = trio.current_time()
            self._account()

    def _handle_events(self, events: list[str | bytes | Ping | Pong | Close | ProtocolViolation]) -> None:
        queue = self._in
        was_queued = len(queue)
        queued = 0
        ping: Ping | None = None
        for event in events:
            if isinstance(event, _MESSAGE_TYPES):
                if self._close_code is None:  # closing: data frames are dropped
                    queue.append(event)
                    queued += len(event)
            elif isinstance(event, Ping):
                ping = event  # answered once: one pong for the last ping before the next Close, if any
            elif isinstance(event, Close):
                self._answer_ping(ping)
                ping = None
                self._on_close_frame(event)
            elif isinstance(event, ProtocolViolation):
                self._answer_ping(ping)
                ping = None
                self._start_close(event.code, event.reason)
                if not self._decoder.finished:
                    continue  # 1009: the decoder skips data frames and still reads the peer's Close
                # The peer's stream cannot be parsed further: flush our Close and stop reading.
                self._reading_done = True
                self._wake_all()
        self._answer_ping(ping)
        if len(queue) > was_queued:  # empty messages count: they wake the handler and fill the queue too
            self._in_bytes += queued
            self._in_event.set()

    def _answer_ping(self, ping: Ping | None) -> None:
        if ping is not None and not self._close_sent and not self._close_received:
            self._queue_control(OPCODE_PONG, ping.payload)

    def _on_close_frame(self, event: Close) -> None:
        self._close_received = True
        if not self._close_sent:
            # The peer started closing: answer with its code (none for "no status"), as wsproto did.
            if self._close_code is None:
                self._close_code = event.code
                self._close_reason = event.reason
            self._close_sent = True
            self._queue_control(OPCODE_CLOSE, close_payload(event.code, event.reason))
        self._reading_done = True
        self._wake_all()

    async def _receive_chunk(self) -> bytes:
        """Bytes from the socket (``b""`` at EOF or when the stream broke)."""
        try:
            data = await self._stream.receive_some(RECEIVE_CHUNK_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""
        self._last_activity = trio.current_time()
        return bytes(data)


class Upgrader(Protocol):
    """What a :class:`WebSocketRequest` needs from its connection (implemented by the HTTP connection)."""

    async def accept(self, subprotocol: str | None, headers: Sequence[tuple[str, str]]) -> WebSocket: ...

    async def reject(self, response: HttpResponse) -> None: ...


class WebSocketRequest:
    """An upgrade request routed to a WebSocket handler, which must :meth:`accept` or :meth:`reject` it."""

    def __init__(self, head: RequestHead, subprotocols: Sequence[str], upgrader: Upgrader) -> None:
        self.head = head
        self.subprotocols = tuple(subprotocols)
        self._upgrader = upgrader
        self.answered = False

    @property
    def path(self) -> str:
        return self.head.path

    @property
    def query(self) -> QueryParams:
        return self.head.query

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return self.head.headers

    @property
    def path_params(self) -> Mapping[str, str]:
        return self.head.path_params

    @property
    def client(self) -> tuple[str, int] | None:
        return self.head.client

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.head.header(name, default)

    async def accept(
        self, subprotocol: str | None = None, headers: Sequence[tuple[str, str]] = ()
    ) -> WebSocket:
        self._answer()
        return await self._upgrader.accept(subprotocol, headers)

    async def reject(self, response: HttpResponse) -> None:
        """Answer the upgrade with an ordinary HTTP response (e.g. Pulsar's 404 for a missing topic)."""
        self._answer()
        await self._upgrader.reject(response)

    def _answer(self) -> None:
        if self.answered:
            raise RuntimeError("this WebSocket request was already accepted or rejected")
        self.answered = True
