"""Gather writes: a list of buffers handed to the kernel in one call (``sendmsg`` on a socket, ``pwritev`` on
a file) instead of joined first, and the resumption of a short write.

The kernel takes at most :data:`IOV_MAX` buffers a call and may take fewer bytes than offered; :func:`advance`
drops what was written - whole buffers, then a ``memoryview`` slice of the first one left (no copy) - and
the caller offers the rest. Used by the bookie client's socket writes and the journal's file writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

Buffer = bytes | bytearray | memoryview


def _iov_max() -> int:
    try:
        limit = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        return 16  # POSIX's minimum
    return limit if limit > 0 else 16


IOV_MAX = _iov_max()
"""Buffers one gather write takes (the kernel's limit: 1024 on Linux; POSIX guarantees 16)."""


def rest_after(parts: Sequence[Buffer], written: int) -> list[Buffer]:
    """The buffers still to write after the first ``written`` bytes of ``parts`` went out (no copy: a buffer
    written in part becomes a ``memoryview`` of its rest). Empty buffers at the front are dropped."""
    if written < 0:
        raise ValueError(f"written {written} bytes")
    i = 0
    count = len(parts)
    while i < count and written >= len(parts[i]):
        written -= len(parts[i])
        i += 1
    if i == count:
        if written:
            raise ValueError(f"{written} bytes written beyond the buffers")
        return []
    rest = list(parts[i:])
    if written:
        rest[0] = memoryview(rest[0])[written:]
    return rest
