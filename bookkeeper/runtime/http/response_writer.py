"""Writing a connection's responses (:class:`ResponseWriter`): status line, headers and body through h11, with
every write to the socket bounded by ``http_send_timeout_ms``.

A response whose body is bytes goes out in one ``send_all`` (head, body and end together); a streaming body
goes out chunk by chunk, and a stream that fails after the status line was sent cuts the response short
(:class:`CloseConnection`: the connection is closed, the only signal left). Every response carries
``Server`` and ``Date`` (formatted at most once per second), and ``Connection: close`` when the connection
ends after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable
from email.utils import formatdate

import h11
import trio

from magnetar.bookkeeper.runtime.http.types import HttpResponse, error_response, status_phrase

log = logging.getLogger("magnetar.bookkeeper.runtime.http.connection")
"""The connection's logger: a failed streaming body is logged where the connection logs, as it always was."""

SERVER_HEADER = (b"server", b"magnetar")


class CloseConnection(Exception):
    """Internal: stop serving this connection (after an error response, a timeout or a peer's EOF)."""


class _DateCache:
    """The ``Date`` header value, formatted at most once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def get(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode()
        return self._value


_DATE = _DateCache()


class ResponseWriter:
    """The writing half of one HTTP connection: ``stream`` carries what the h11 connection ``protocol``
    encodes."""

    def __init__(self, stream: trio.abc.Stream, protocol: h11.Connection, send_timeout_s: float) -> None:
        self._stream = stream
        self._h11 = protocol
        self._send_timeout_s = send_timeout_s

    async def send(self, data: bytes) -> None:
        with trio.fail_after(self._send_timeout_s):
            await self._stream.send_all(data)

    def response_headers(self, response: HttpResponse, *, closing: bool) -> list[tuple[bytes, bytes]]:
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers]
        headers.append(SERVER_HEADER)
        headers.append((b"date", _DATE.get()))
        if closing:
            headers.append((b"connection", b"close"))
        return headers

    async def send_response(self, method: str, response: HttpResponse, *, closing: bool) -> None:
        headers = self.response_headers(response, closing=closing)
        reason = status_phrase(response.status).encode()
        body = response.body
        no_body = method == "HEAD" or response.status in (204, 304)
        if isinstance(body, bytes | bytearray | memoryview):
            if response.status != 204:
                headers.append((b"content-length", str(len(body)).encode()))
            out = self._h11.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
            if body and not no_body:
                out += self._h11.send(h11.Data(data=body))
            out += self._h11.send(h11.EndOfMessage())
            await self.send(out)
            return
        await self._send_streaming(response.status, headers, reason, body, no_body)

    async def _send_streaming(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        reason: bytes,
        body: AsyncIterable[bytes],
        no_body: bool,
    ) -> None:
        await self.send(self._h11.send(h11.Response(status_code=status, headers=headers, reason=reason)))
        if not no_body:
            try:
                async for chunk in body:
                    if chunk:
                        await self.send(self._h11.send(h11.Data(data=chunk)))
            except Exception:
                # The status line is gone already; all we can do is cut the response short.
                log.exception("streaming response body failed")
                raise CloseConnection from None
        await self.send(self._h11.send(h11.EndOfMessage()))

    def can_answer(self) -> bool:
        """Whether h11 still allows a response to the current request (none was started)."""
        return self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    async def send_error(self, status: int, reason: str) -> None:
        """An error response that ends the connection (``Connection: close``), if h11 still allows it."""
        response = error_response(status, reason)
        body = response.body if isinstance(response.body, bytes) else b""
        headers = self.response_headers(response, closing=True)
        headers.append((b"content-length", str(len(body)).encode()))
        try:
            out = self._h11.send(
                h11.Response(status_code=status, headers=headers, reason=status_phrase(status).encode())
            )
            out += self._h11.send(h11.Data(data=body))
            out += self._h11.send(h11.EndOfMessage())
            await self.send(out)
        except h11.LocalProtocolError:
            pass
