"""Sending a connection's queued bytes as parts: one gather write (``sendmsg``) instead of a join.

Theory of operation. A connection queues what it sends as a list of buffers: its coalescing buffer of small
frames and frame heads, and - for an add - the entry's payload parts as the writer handed them over
(:meth:`~magnetar.bookkeeper.protocol.codec.ClientProtocol.send_parts`). :func:`send_parts` hands the list to
the kernel with ``sendmsg`` (at most ``IOV_MAX`` buffers a call), so the payload goes from the broker's buffer
to the socket with no copy in between; a stream that is not a plain socket (TLS encrypts anyway) gets the
parts joined. The kernel may take fewer bytes than offered: :func:`advance` drops what was sent - whole
buffers, then a ``memoryview`` slice of the first one left (no copy) - and the loop offers the rest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import trio

Buffer = bytes | bytearray | memoryview


def _iov_max() -> int:
    try:
        limit = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        return 16  # POSIX's minimum
    return limit if limit > 0 else 16


IOV_MAX = _iov_max()
"""Buffers one ``sendmsg`` takes (the kernel's limit: 1024 on Linux; POSIX guarantees 16)."""


def advance(parts: Sequence[Buffer], sent: int) -> list[Buffer]:
    """The buffers still to send after the first ``sent`` bytes of ``parts`` went out (no copy: a buffer
    sent in part becomes a ``memoryview`` of its rest). Empty buffers at the front are dropped."""
    if sent < 0:
        raise ValueError(f"sent {sent} bytes")
    i = 0
    count = len(parts)
    while i < count and sent >= len(parts[i]):
        sent -= len(parts[i])
        i += 1
    if i == count:
        if sent:
            raise ValueError(f"{sent} bytes sent beyond the buffers")
        return []
    rest = list(parts[i:])
    if sent:
        rest[0] = memoryview(rest[0])[sent:]
    return rest


async def send_parts(stream: trio.abc.Stream, parts: list[Buffer]) -> None:
    """Send ``parts`` in order, whole: a gather write on a socket stream, one ``send_all`` otherwise."""
    if len(parts) == 1:
        await stream.send_all(parts[0])
        return
    if not isinstance(stream, trio.SocketStream):
        await stream.send_all(b"".join(parts))
        return
    sock = stream.socket
    while parts:
        sent = await sock.sendmsg(parts[:IOV_MAX])
        parts = advance(parts, sent)
