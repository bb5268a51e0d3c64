"""A small trio WebSocket client (wsproto) for Magnetar's tools: connect (following 307 redirects, as
Pulsar-aware clients do), send text frames in batches, receive text frames."""

from __future__ import annotations

import contextlib
from collections import deque
from urllib.parse import urlsplit

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

REDIRECTS_MAX = 5
RECEIVE_BYTES = 65536


class WsRejected(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"upgrade refused: {status} {body.decode(errors='replace')}")
        self.status = status
        self.body = body


class WsClosed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed: {code} {reason}")
        self.code = code
        self.reason = reason


class WsClient:
    def __init__(self, stream: trio.SocketStream, conn: WSConnection, url: str) -> None:
        self._stream = stream
        self._conn = conn
        self.url = url
        self._messages: deque[str] = deque()
        self._parts: list[str] = []
        self._close: tuple[int, str] | None = None

    @classmethod
    async def connect(cls, url: str, timeout_s: float = 10.0) -> WsClient:
        with trio.fail_after(timeout_s):
            for _ in range(REDIRECTS_MAX):
                client, location = await cls._attempt(url)
                if client is not None:
                    return client
                assert location is not None
                url = location
        raise WsRejected(307, b"too many redirects")

    @classmethod
    async def _attempt(cls, url: str) -> tuple[WsClient | None, str | None]:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme in ("wss", "https") else 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        stream = await trio.open_tcp_stream(host, port)
        try:
            return await cls._handshake(stream, url, host, port, target)
        except BaseException:  # cancelled (a connect timeout) or failed mid-handshake: do not leak the socket
            await trio.aclose_forcefully(stream)
            raise

    @classmethod
    async def _handshake(
        cls, stream: trio.SocketStream, url: str, host: str, port: int, target: str
    ) -> tuple[WsClient | None, str | None]:
        conn = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(conn.send(Request(host=f"{host}:{port}", target=target)))
        status = 0
        headers: dict[str, str] = {}
        body = b""
        while True:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                await stream.aclose()
                raise WsRejected(status or 502, b"connection closed during the upgrade")
            conn.receive_data(data)
            for event in conn.events():
                if isinstance(event, AcceptConnection):
                    return cls(stream, conn, url), None
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                    if not event.has_body:
                        return await cls._rejected(stream, status, headers, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        return await cls._rejected(stream, status, headers, body)

    @staticmethod
    async def _rejected(
        stream: trio.SocketStream, status: int, headers: dict[str, str], body: bytes
    ) -> tuple[None, str]:
        await stream.aclose()
        if status in (301, 302, 307, 308) and "location" in headers:
            return None, headers["location"]
        raise WsRejected(status, body)

    def _check_open(self) -> None:
        """Sending after the peer began closing is a closed connection, not a wsproto protocol error."""
        if self._conn.state is not ConnectionState.OPEN:
            raise WsClosed(1006, f"connection is {self._conn.state.name}")

    async def send_many(self, texts: list[str]) -> None:
        """Send several text frames in one socket write."""
        self._check_open()
        await self._stream.send_all(b"".join(self._conn.send(Message(data=t)) for t in texts))

    async def send(self, text: str) -> None:
        self._check_open()
        await self._stream.send_all(self._conn.send(Message(data=text)))

    async def receive(self) -> str:
        """The next text message; :class:`WsClosed` once the peer closed and every message was received."""
        while True:
            await self._handle_events()
            if self._messages:
                return self._messages.popleft()
            if self._close is not None:
                raise WsClosed(*self._close)
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise WsClosed(1006, "connection lost")
            self._conn.receive_data(data)

    async def _handle_events(self) -> None:
        """Process what wsproto has parsed - including what arrived with the upgrade response itself."""
        for event in self._conn.events():
            if isinstance(event, TextMessage):
                self._parts.append(event.data)
                if event.message_finished:
                    self._messages.append("".join(self._parts))
                    self._parts = []
            elif isinstance(event, Ping):
                await self._stream.send_all(self._conn.send(event.response()))
            elif isinstance(event, CloseConnection):
                self._close = (event.code, event.reason or "")

    async def aclose(self) -> None:
        try:
            with contextlib.suppress(Exception):  # best effort on an already broken connection
                await self._stream.send_all(self._conn.send(CloseConnection(code=1000)))
        finally:  # also when cancelled during the close frame: the socket must not leak
            await trio.aclose_forcefully(self._stream)
