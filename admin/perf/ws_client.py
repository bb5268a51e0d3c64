"""A small trio WebSocket client for Magnetar's tools: connect (following 307 redirects, as Pulsar-aware
clients do), send text or binary messages in batches (one socket write per batch), receive them one by one or
a received chunk's worth at a time.

The opening handshake goes through h11 (RFC 6455 §4.1: key, ``Sec-WebSocket-Accept`` check, optional
subprotocol); frames through the sans-IO codec of :mod:`magnetar.bookkeeper.runtime.http.ws_frames`, masked
with keys cut from a buffer of ``os.urandom`` bytes. This client is the load generator of ``magnetar perf``:
it must cost less per message than the broker it measures.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from collections import deque
from collections.abc import Sequence
from urllib.parse import urlsplit

import h11
import trio

from magnetar.bookkeeper.runtime.http.ws_frames import (
    OPCODE_BINARY,
    OPCODE_CLOSE,
    OPCODE_PONG,
    OPCODE_TEXT,
    Close,
    FrameDecoder,
    Ping,
    ProtocolViolation,
    close_payload,
    frame_header,
    mask,
)

REDIRECTS_MAX = 5
RECEIVE_BYTES = 65536
MESSAGE_BYTES_MAX = 64 * 1024 * 1024
"""Largest message accepted from the server."""
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MASK_POOL_BYTES = 4096


class WsRejected(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"upgrade refused: {status} {body.decode(errors='replace')}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        """The server's reason: the ``reason`` of a JSON error body (Pulsar's form), else the body's text."""
        text = self.body.decode(errors="replace").strip()
        try:
            document = json.loads(text)
        except ValueError:
            return text
        if isinstance(document, dict) and isinstance(document.get("reason"), str):
            return str(document["reason"])
        return text


class WsClosed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed: {code} {reason}")
        self.code = code
        self.reason = reason


class _MaskKeys:
    """Masking keys (RFC 6455 §5.3: unpredictable), cut from a pool of ``os.urandom`` bytes."""

    def __init__(self) -> None:
        self._pool = b""
        self._pos = 0

    def next(self) -> bytes:
        if self._pos >= len(self._pool):
            self._pool = os.urandom(_MASK_POOL_BYTES)
            self._pos = 0
        key = self._pool[self._pos : self._pos + 4]
        self._pos += 4
        return key


class WsClient:
    def __init__(
        self, stream: trio.SocketStream, url: str, subprotocol: str | None, initial_data: bytes = b""
    ) -> None:
        self._stream = stream
        self.url = url
        self.subprotocol = subprotocol
        self._decoder = FrameDecoder(expect_masked=False, message_bytes_max=MESSAGE_BYTES_MAX)
        self._keys = _MaskKeys()
        self._messages: deque[str | bytes] = deque()
        self._closed: WsClosed | None = None
        self._control: list[bytes] = []
        if initial_data:
            self._absorb(initial_data)

    # -- connecting -------------------------------------------------------------------------------------

    @classmethod
    async def connect(cls, url: str, timeout_s: float = 10.0, subprotocols: Sequence[str] = ()) -> WsClient:
        with trio.fail_after(timeout_s):
            for _ in range(REDIRECTS_MAX):
                client, location = await cls._attempt(url, subprotocols)
                if client is not None:
                    return client
                assert location is not None
                url = location
        raise WsRejected(307, b"too many redirects")

    @classmethod
    async def _attempt(cls, url: str, subprotocols: Sequence[str]) -> tuple[WsClient | None, str | None]:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme in ("wss", "https") else 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        stream = await trio.open_tcp_stream(host, port)
        try:
            return await cls._handshake(stream, url, f"{host}:{port}", target, subprotocols)
        except BaseException:  # cancelled (a connect timeout) or failed mid-handshake: do not leak the socket
            await trio.aclose_forcefully(stream)
            raise

    @classmethod
    async def _handshake(
        cls, stream: trio.SocketStream, url: str, host: str, target: str, subprotocols: Sequence[str]
    ) -> tuple[WsClient | None, str | None]:
        key = base64.b64encode(os.urandom(16))
        headers = [
            (b"host", host.encode()),
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-key", key),
            (b"sec-websocket-version", b"13"),
        ]
        if subprotocols:
            headers.append((b"sec-websocket-protocol", ", ".join(subprotocols).encode()))
        conn = h11.Connection(h11.CLIENT)
        await stream.send_all(conn.send(h11.Request(method="GET", target=target, headers=headers)))
        response: h11.Response | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(RECEIVE_BYTES)
                if not data:
                    status = response.status_code if response is not None else 502
                    raise WsRejected(status, b"connection closed during the upgrade")
                conn.receive_data(data)
            elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                subprotocol = _check_accept(event, key, subprotocols)
                return cls(stream, url, subprotocol, conn.trailing_data[0]), None
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and response is not None:
                return await cls._rejected(stream, response, body)

    @staticmethod
    async def _rejected(stream: trio.SocketStream, response: h11.Response, body: bytes) -> tuple[None, str]:
        await stream.aclose()
        headers = {name.decode().lower(): value.decode() for name, value in response.headers}
        if response.status_code in (301, 302, 307, 308) and "location" in headers:
            return None, headers["location"]
        raise WsRejected(response.status_code, body)

    # -- sending ----------------------------------------------------------------------------------------

    def _frames(self, opcode: int, messages: Sequence[bytes]) -> bytes:
        out = bytearray()
        for payload in messages:
            key = self._keys.next()
            out += frame_header(opcode, len(payload), masked=True)
            out += key
            out += mask(payload, key)
        return bytes(out)

    def _check_open(self) -> None:
        """Sending after the peer closed is a closed connection (:class:`WsClosed`), not a protocol error."""
        if self._closed is not None:
            raise self._closed

    async def send_many(self, texts: Sequence[str]) -> None:
        """Send several text messages in one socket write."""
        self._check_open()
        await self._stream.send_all(self._frames(OPCODE_TEXT, [t.encode() for t in texts]))

    async def send(self, text: str) -> None:
        await self.send_many([text])

    async def send_many_bytes(self, messages: Sequence[bytes]) -> None:
        """Send several binary messages in one socket write."""
        self._check_open()
        await self._stream.send_all(self._frames(OPCODE_BINARY, messages))

    async def send_bytes(self, data: bytes) -> None:
        await self.send_many_bytes([data])

    # -- receiving --------------------------------------------------------------------------------------

    async def receive(self) -> str:
        """The next text message (binary ones are skipped); :class:`WsClosed` once the server closed and
        every message before its Close was received."""
        while True:
            message = await self.receive_message()
            if isinstance(message, str):
                return message

    async def receive_message(self) -> str | bytes:
        while not self._messages:
            await self._fill()
        return self._messages.popleft()

    async def receive_batch(self) -> list[str | bytes]:
        """Every message received so far (at least one)."""
        while not self._messages:
            await self._fill()
        batch = list(self._messages)
        self._messages.clear()
        return batch

    async def _fill(self) -> None:
        if self._closed is not None:
            raise self._closed
        data = await self._stream.receive_some(RECEIVE_BYTES)
        if not data:
            self._closed = WsClosed(1006, "connection lost")
            raise self._closed
        self._absorb(data)
        if self._control:
            control, self._control = b"".join(self._control), []
            await self._stream.send_all(control)

    def _absorb(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            if isinstance(event, str | bytes):
                self._messages.append(event)
            elif isinstance(event, Ping):
                self._control.append(self._control_frame(OPCODE_PONG, event.payload))
            elif isinstance(event, Close):
                self._closed = WsClosed(event.code, event.reason)
            elif isinstance(event, ProtocolViolation):
                self._closed = WsClosed(event.code, f"protocol violation by the server: {event.reason}")

    def _control_frame(self, opcode: int, payload: bytes) -> bytes:
        key = self._keys.next()
        return frame_header(opcode, len(payload), masked=True) + key + mask(payload, key)

    async def aclose(self) -> None:
        try:
            with contextlib.suppress(Exception):  # best effort on an already broken connection
                await self._stream.send_all(self._control_frame(OPCODE_CLOSE, close_payload(1000)))
        finally:  # also when cancelled during the close frame: the socket must not leak
            await trio.aclose_forcefully(self._stream)


def connection_loss(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The lost connection (:class:`WsClosed`, ``OSError``, ``trio.BrokenResourceError``) a nursery of
    tasks using one client reported - its first such leaf - or None when the group holds anything else too
    (a cancellation, a bug), which must then propagate as it is."""
    lost, rest = group.split((WsClosed, OSError, trio.BrokenResourceError))
    if lost is None or rest is not None:
        return None
    leaf: BaseException = lost
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def _check_accept(response: h11.InformationalResponse, key: bytes, offered: Sequence[str]) -> str | None:
    """Verify ``Sec-WebSocket-Accept`` (RFC 6455 §4.1) and return the subprotocol the server chose."""
    headers = {name.decode().lower(): value.decode() for name, value in response.headers}
    expected = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest()).decode()
    if headers.get("sec-websocket-accept") != expected:
        raise WsRejected(101, b"bad Sec-WebSocket-Accept")
    chosen = headers.get("sec-websocket-protocol")
    if chosen is not None and chosen not in offered:
        raise WsRejected(101, f"server chose a subprotocol not offered: {chosen}".encode())
    return chosen
