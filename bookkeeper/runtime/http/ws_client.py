"""A trio WebSocket client: the internal hop of a broker's proxy to a topic's owner
(:mod:`magnetar.broker.protocols.owner_proxy`) and the load generator of ``magnetar perf``.

:func:`open_ws_client` opens a TCP connection (TLS for ``wss://``), sends the upgrade with the path, query,
subprotocols and any extra headers (a token, a proxy marker), and follows 307s up to a bound (a lookup may
name the leader, which names the broker it chose). Any answer other than 101 is :class:`WsRejected` with the
server's status and body, so a proxy can refuse its own client in the server's words. The handshake goes
through h11 (RFC 6455 §4.1: key, ``Sec-WebSocket-Accept`` check, subprotocol); frames through the sans-IO
codec of :mod:`.ws_frames`, masked as a client's must be, with keys cut from a pool of ``os.urandom`` bytes
(the load generator must cost less per message than the broker it measures). Sends are serialized by a lock:
a proxy's two directions and the pongs share one stream. A lost connection is :class:`WsClosed` with code
1006, after the messages received before it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import ssl
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

RECEIVE_BYTES = 65536
CLOSE_LOST = 1006
REDIRECTS_MAX = 5
MESSAGE_BYTES_MAX = 64 * 1024 * 1024
"""Largest message accepted from the server unless the caller says otherwise."""
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MASK_POOL_BYTES = 4096


class WsRejected(Exception):
    """The server (or the one a redirect led to) refused the upgrade: its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"upgrade refused: {status} {body.decode(errors='replace')[:200]}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        text = self.body.decode(errors="replace").strip()
        try:
            document = json.loads(text)
        except ValueError:
            return text
        if isinstance(document, dict) and isinstance(document.get("reason"), str):
            return str(document["reason"])
        return text


class WsClosed(Exception):
    """The session ended: the server's close code and reason (1006 when the connection dropped)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed: {code} {reason}")
        self.code = code
        self.reason = reason


class WsClient:
    """An open client session (:func:`open_ws_client`, or :meth:`connect` within a time bound)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        url: str,
        subprotocol: str | None,
        initial_data: bytes,
        message_bytes_max: int = MESSAGE_BYTES_MAX,
    ) -> None:
        self._stream = stream
        self.url = url
        """Where the session was finally opened (after redirects)."""
        self.subprotocol = subprotocol
        self._decoder = FrameDecoder(expect_masked=False, message_bytes_max=message_bytes_max)
        self._messages: deque[str | bytes] = deque()
        self._closed: WsClosed | None = None
        self._control: list[bytes] = []
        self._send_lock = trio.Lock()
        self._keys = _MaskKeys()
        if initial_data:
            self._absorb(initial_data)

    @classmethod
    async def connect(cls, url: str, timeout_s: float = 10.0, subprotocols: Sequence[str] = ()) -> WsClient:
        """:func:`open_ws_client` within ``timeout_s`` (``trio.TooSlowError`` past it)."""
        with trio.fail_after(timeout_s):
            return await open_ws_client(url, subprotocols=subprotocols)

    @property
    def peer(self) -> str:
        """``host:port`` of the server this session is open on (for logs)."""
        return urlsplit(self.url).netloc

    async def send(self, message: str | bytes) -> None:
        """Send one message (text or binary); :class:`WsClosed` once the server closed or the connection
        dropped."""
        await self.send_many([message])

    async def send_many(self, messages: Sequence[str | bytes]) -> None:
        """Send several messages (text or binary each) in one socket write."""
        if self._closed is not None:
            raise self._closed
        out = bytearray()
        for message in messages:
            if isinstance(message, str):
                opcode, payload = OPCODE_TEXT, message.encode()
            else:
                opcode, payload = OPCODE_BINARY, message
            key = self._keys.next()
            out += frame_header(opcode, len(payload), masked=True)
            out += key
            out += mask(payload, key)
        await self._send_raw(bytes(out))

    async def send_many_bytes(self, messages: Sequence[bytes]) -> None:
        """Send several binary messages in one socket write."""
        await self.send_many(messages)

    async def send_bytes(self, data: bytes) -> None:
        await self.send_many([data])

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
        """Every message received so far (at least one); :class:`WsClosed` at the end."""
        while not self._messages:
            await self._fill()
        batch = list(self._messages)
        self._messages.clear()
        return batch

    async def _fill(self) -> None:
        if self._closed is not None:
            raise self._closed
        try:
            data = bytes(await self._stream.receive_some(RECEIVE_BYTES))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            data = b""
            self._closed = WsClosed(CLOSE_LOST, f"connection lost: {exc}")
        if not data:
            if self._closed is None:
                self._closed = WsClosed(CLOSE_LOST, "connection lost")
            if not self._messages:
                raise self._closed
            return
        self._absorb(data)
        if self._control:
            control, self._control = b"".join(self._control), []
            with contextlib.suppress(WsClosed):
                await self._send_raw(control)

    async def _send_raw(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                await self._stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise WsClosed(CLOSE_LOST, f"connection lost: {exc}") from None

    def _absorb(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            if isinstance(event, str | bytes):
                self._messages.append(event)
            elif isinstance(event, Ping):
                self._control.append(_control_frame(OPCODE_PONG, event.payload))
            elif isinstance(event, Close):
                self._closed = WsClosed(event.code, event.reason)
            elif isinstance(event, ProtocolViolation):
                self._closed = WsClosed(event.code, f"protocol violation by the server: {event.reason}")

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Send a Close (best effort) and drop the connection; never raises."""
        try:
            with trio.move_on_after(1), contextlib.suppress(Exception):
                await self._send_raw(_control_frame(OPCODE_CLOSE, close_payload(code, reason)))
        finally:
            await trio.aclose_forcefully(self._stream)


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


def _control_frame(opcode: int, payload: bytes) -> bytes:
    key = os.urandom(4)
    return frame_header(opcode, len(payload), masked=True) + key + mask(payload, key)


async def open_ws_client(
    url: str,
    *,
    target: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    subprotocols: Sequence[str] = (),
    ssl_context: ssl.SSLContext | None = None,
    redirects_max: int = REDIRECTS_MAX,
    message_bytes_max: int = MESSAGE_BYTES_MAX,
    local_address: str | None = None,
) -> WsClient:
    """One attempt: the session on ``url`` (``ws://`` or ``wss://``, path and query included), following at
    most ``redirects_max`` 307s. Raises :class:`WsRejected`, ``OSError`` or ``ssl.SSLError``; the caller
    bounds it in time (a cancelled attempt closes its socket).

    ``target``: the request target to send as it is (the owner proxy sends its client's, never parsed
    again); the URL - and a redirect's ``Location`` - then give only the scheme, host and port.
    ``local_address``: the address to connect from (default: the one the system's routes choose)."""
    for _ in range(redirects_max + 1):
        upstream, location = await _attempt(
            url, target, headers, subprotocols, ssl_context, message_bytes_max, local_address
        )
        if upstream is not None:
            return upstream
        assert location is not None
        url = location
    raise WsRejected(508, f"more than {redirects_max} redirects (last: {url})".encode())


async def _attempt(
    url: str,
    request_target: str | None,
    headers: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
    ssl_context: ssl.SSLContext | None,
    message_bytes_max: int,
    local_address: str | None,
) -> tuple[WsClient | None, str | None]:
    parts = urlsplit(url)
    secure = parts.scheme in ("wss", "https")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    if request_target is not None:
        target = request_target
    else:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port, local_address=local_address)
    try:
        if secure:
            context = ssl_context or ssl.create_default_context()
            tls = trio.SSLStream(stream, context, server_hostname=host, https_compatible=True)
            stream = tls
            await tls.do_handshake()
        return await _handshake(
            stream, url, f"{host}:{port}", target, headers, subprotocols, message_bytes_max
        )
    except BaseException:  # cancelled (a connect timeout) or failed mid-handshake: do not leak the socket
        await trio.aclose_forcefully(stream)
        raise


async def _handshake(
    stream: trio.abc.Stream,
    url: str,
    host: str,
    target: str,
    extra: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
    message_bytes_max: int,
) -> tuple[WsClient | None, str | None]:
    key = base64.b64encode(os.urandom(16))
    headers = [
        (b"host", host.encode()),
        (b"upgrade", b"websocket"),
        (b"connection", b"Upgrade"),
        (b"sec-websocket-key", key),
        (b"sec-websocket-version", b"13"),
        *((name.encode(), value.encode()) for name, value in extra),
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
            data = bytes(await stream.receive_some(RECEIVE_BYTES))
            if not data:
                status = response.status_code if response is not None else 502
                raise WsRejected(status, b"connection closed during the upgrade")
            conn.receive_data(data)
        elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            subprotocol = _check_accept(event, key, subprotocols)
            return WsClient(stream, url, subprotocol, conn.trailing_data[0], message_bytes_max), None
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and response is not None:
            await trio.aclose_forcefully(stream)
            names = {name.decode().lower(): value.decode() for name, value in response.headers}
            if response.status_code in (301, 302, 307, 308) and "location" in names:
                return None, names["location"]
            raise WsRejected(response.status_code, body)


def _check_accept(response: h11.InformationalResponse, key: bytes, offered: Sequence[str]) -> str | None:
    headers = {name.decode().lower(): value.decode() for name, value in response.headers}
    expected = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest()).decode()
    if headers.get("sec-websocket-accept") != expected:
        raise WsRejected(502, b"bad Sec-WebSocket-Accept from the server")
    chosen = headers.get("sec-websocket-protocol")
    if chosen is not None and chosen not in offered:
        raise WsRejected(502, f"the server chose a subprotocol not offered: {chosen}".encode())
    return chosen


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
