"""Calling another broker's admin API: one bounded HTTP/1.1 request (:func:`request`; :func:`get_json` for
an answer that must be JSON).

A call that spans partitions (``partitioned-stats``, a subscription call on a partitioned topic) asks the
broker that owns each partition, as Pulsar's broker does through its internal admin client. The request goes
to the owner's plain HTTP URL with ``authoritative=true`` (so it is answered there, never redirected again)
and the caller's ``Authorization`` header (the owner checks the same role for the same topic). It is bounded
by ``AdminSettings.peer_request_timeout_ms`` (connect to last byte) and ``peer_response_bytes_max``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11
import trio

if TYPE_CHECKING:
    from magnetar.admin.rest.framework import Call

RECEIVE_BYTES = 65536


class PeerRequestError(Exception):
    """The other broker could not be asked, or did not answer 200 with JSON."""


async def request(
    method: str,
    url: str,
    *,
    authorization: str | None,
    timeout_s: float,
    body_bytes_max: int,
    body: bytes = b"",
    content_type: str | None = None,
) -> tuple[int, bytes]:
    """Send one request to ``url`` (``http://`` only): the answer's status and body, whatever the status;
    :class:`PeerRequestError` when there is no answer."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise PeerRequestError(f"cannot ask {url}: only http:// URLs are supported")
    host, port = parts.hostname, parts.port or 80
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = [("host", f"{host}:{port}"), ("accept", "application/json"), ("connection", "close")]
    if authorization:
        headers.append(("authorization", authorization))
    if method not in ("GET", "HEAD"):
        headers.append(("content-length", str(len(body))))
        if content_type:
            headers.append(("content-type", content_type))
    try:
        with trio.fail_after(timeout_s):
            return await _exchange(method, host, port, target, headers, body, body_bytes_max, url)
    except trio.TooSlowError:
        raise PeerRequestError(f"{url} did not answer within {timeout_s:g} s") from None
    except (OSError, h11.ProtocolError) as exc:
        raise PeerRequestError(f"{url}: {type(exc).__name__}: {exc}") from None


async def get_json(url: str, *, authorization: str | None, timeout_s: float, body_bytes_max: int) -> Any:
    """GET ``url`` (``http://`` only) and decode its JSON answer; :class:`PeerRequestError` otherwise."""
    status, body = await request(
        "GET", url, authorization=authorization, timeout_s=timeout_s, body_bytes_max=body_bytes_max
    )
    if status != 200:
        raise PeerRequestError(f"{url} answered {status}: {body[:200].decode(errors='replace')}")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise PeerRequestError(f"{url} answered something that is not JSON: {exc}") from None


async def _exchange(
    method: str,
    host: str,
    port: int,
    target: str,
    headers: list[tuple[str, str]],
    request_body: bytes,
    body_bytes_max: int,
    url: str,
) -> tuple[int, bytes]:
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        conn = h11.Connection(h11.CLIENT)
        out = conn.send(h11.Request(method=method, target=target, headers=headers))
        if request_body:
            out += conn.send(h11.Data(data=request_body))
        await stream.send_all(out + conn.send(h11.EndOfMessage()))
        status = 0
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(RECEIVE_BYTES))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > body_bytes_max:
                    raise PeerRequestError(f"{url} answered more than {body_bytes_max} bytes")
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return status, bytes(body)


async def get_json_for(call: Call, url: str) -> Any:
    """:func:`get_json` on behalf of an admin call: its ``Authorization`` header, within the admin settings'
    ``peer_request_timeout_ms`` and ``peer_response_bytes_max``."""
    settings = call.context.settings
    return await get_json(
        url,
        authorization=call.request.head.header("authorization"),
        timeout_s=settings.peer_request_timeout_ms / 1000,
        body_bytes_max=settings.peer_response_bytes_max,
    )
