"""Sending a connection's queued bytes as parts: one gather write (``sendmsg``) instead of a join.

Theory of operation. A connection queues what it sends as a list of buffers: its coalescing buffer of small
frames and frame heads, and - for an add - the entry's payload parts as the writer handed them over
(:meth:`~magnetar.bookkeeper.protocol.codec.ClientProtocol.send_parts`). :func:`send_parts` hands the list to
the kernel with ``sendmsg`` (at most ``IOV_MAX`` buffers a call), so the payload goes from the broker's buffer
to the socket with no copy in between; a stream that is not a plain socket (TLS encrypts anyway) gets the
parts joined. The kernel may take fewer bytes than offered: the loop offers the rest
(:func:`magnetar.bookkeeper.runtime.gather.rest_after`, shared with the journal's file writes).
"""

from __future__ import annotations

import trio

from magnetar.bookkeeper.runtime import IOV_MAX, Buffer, rest_after

__all__ = ["Buffer", "send_parts"]


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
        parts = rest_after(parts, sent)
