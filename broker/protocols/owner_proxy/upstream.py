"""The proxy's side of the internal hop: a WebSocket client session from this broker to the topic's owner.

One attempt (:func:`open_upstream`) opens a TCP connection (TLS for ``wss://``), sends the upgrade with the
client's path, query and subprotocols plus this broker's own headers (its token, the proxy marker), and
follows 307s up to a bound: the lookup may name the leader, which names the broker it chose. Any other answer
than 101 is :class:`UpstreamRefused` with the owner's status and body, so the client can be refused with the
owner's own words. The handshake goes through h11 (RFC 6455 §4.1: key, ``Sec-WebSocket-Accept`` check);
frames through the sans-IO codec of :mod:`magnetar.bookkeeper.runtime.http.ws_frames`, masked as a client's
must be. Sends are serialized by a lock: the relay's two directions and the pongs share one stream.
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
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MASK_POOL_BYTES = 4096


class UpstreamRefused(Exception):
    """The owner (or the broker a redirect led to) refused the upgrade."""

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


class UpstreamClosed(Exception):
    """The upstream session ended: the owner's close code and reason (1006 when the connection dropped)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed: {code} {reason}")
        self.code = code
        self.reason = reason


class Upstream:
    """An open client session to an owner."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        url: str,
        subprotocol: str | None,
        initial_data: bytes,
        message_bytes_max: int,
    ) -> None:
        self._stream = stream
        self.url = url
        """Where the session was finally opened (after redirects)."""
        self.subprotocol = subprotocol
        self._decoder = FrameDecoder(expect_masked=False, message_bytes_max=message_bytes_max)
        self._messages: deque[str | bytes] = deque()
        self._closed: UpstreamClosed | None = None
        self._control: list[bytes] = []
        self._send_lock = trio.Lock()
        self._keys = _MaskKeys()
        if initial_data:
            self._absorb(initial_data)

    @property
    def broker(self) -> str:
        """``host:port`` of the broker this session is open on (for logs)."""
        return urlsplit(self.url).netloc

    async def send(self, message: str | bytes) -> None:
        """Send one message; :class:`UpstreamClosed` once the owner closed or the connection dropped."""
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

    async def receive_batch(self) -> list[str | bytes]:
        """Every message received so far (at least one); :class:`UpstreamClosed` at the end."""
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
            self._closed = UpstreamClosed(CLOSE_LOST, f"connection lost: {exc}")
        if not data:
            if self._closed is None:
                self._closed = UpstreamClosed(CLOSE_LOST, "connection lost")
            if not self._messages:
                raise self._closed
            return
        self._absorb(data)
        if self._control:
            control, self._control = b"".join(self._control), []
            with contextlib.suppress(UpstreamClosed):
                await self._send_raw(control)

    async def _send_raw(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                await self._stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise UpstreamClosed(CLOSE_LOST, f"connection lost: {exc}") from None

    def _absorb(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            if isinstance(event, str | bytes):
                self._messages.append(event)
            elif isinstance(event, Ping):
                self._control.append(_control_frame(OPCODE_PONG, event.payload))
            elif isinstance(event, Close):
                self._closed = UpstreamClosed(event.code, event.reason)
            elif isinstance(event, ProtocolViolation):
                self._closed = UpstreamClosed(event.code, f"protocol violation by the owner: {event.reason}")

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


async def open_upstream(
    url: str,
    *,
    headers: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
    ssl_context: ssl.SSLContext | None,
    redirects_max: int,
    message_bytes_max: int,
) -> Upstream:
    """One attempt: the session on ``url`` (``ws://`` or ``wss://``, path and query included), following at
    most ``redirects_max`` 307s. Raises :class:`UpstreamRefused`, ``OSError`` or ``ssl.SSLError``; the caller
    bounds it in time (a cancelled attempt closes its socket)."""
    for _ in range(redirects_max + 1):
        upstream, location = await _attempt(url, headers, subprotocols, ssl_context, message_bytes_max)
        if upstream is not None:
            return upstream
        assert location is not None
        url = location
    raise UpstreamRefused(508, f"more than {redirects_max} redirects (last: {url})".encode())


async def _attempt(
    url: str,
    headers: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
    ssl_context: ssl.SSLContext | None,
    message_bytes_max: int,
) -> tuple[Upstream | None, str | None]:
    parts = urlsplit(url)
    secure = parts.scheme in ("wss", "https")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
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
) -> tuple[Upstream | None, str | None]:
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
                raise UpstreamRefused(status, b"connection closed during the upgrade")
            conn.receive_data(data)
        elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            subprotocol = _check_accept(event, key, subprotocols)
            return Upstream(stream, url, subprotocol, conn.trailing_data[0], message_bytes_max), None
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and response is not None:
            await trio.aclose_forcefully(stream)
            names = {name.decode().lower(): value.decode() for name, value in response.headers}
            if response.status_code in (301, 302, 307, 308) and "location" in names:
                return None, names["location"]
            raise UpstreamRefused(response.status_code, body)


def _check_accept(response: h11.InformationalResponse, key: bytes, offered: Sequence[str]) -> str | None:
    headers = {name.decode().lower(): value.decode() for name, value in response.headers}
    expected = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest()).decode()
    if headers.get("sec-websocket-accept") != expected:
        raise UpstreamRefused(502, b"bad Sec-WebSocket-Accept from the owner")
    chosen = headers.get("sec-websocket-protocol")
    if chosen is not None and chosen not in offered:
        raise UpstreamRefused(502, f"the owner chose a subprotocol not offered: {chosen}".encode())
    return chosen
