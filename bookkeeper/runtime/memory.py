"""Giving memory back to the operating system after a burst.

Theory of operation. CPython takes objects over 512 bytes from the C allocator. glibc's ``malloc`` serves
those below its mmap threshold (128 KiB, rising up to 32 MiB as large blocks are freed) from heaps it keeps
once grown: after a burst - hundreds of MiB of messages received, then dropped - the process's resident
size stays at its peak although the memory is free, and the next burst of another kind adds to it.
:class:`MemoryTrimmer` counts the bytes a bounded buffer gave back (:meth:`MemoryTrimmer.freed`); once
:data:`TRIM_AFTER_BYTES` have been freed it calls glibc's ``malloc_trim(0)`` (which returns the free pages
of every heap to the system) in a worker thread, at most once per :data:`TRIM_INTERVAL_S`. On a C library
without ``malloc_trim`` (musl, macOS) nothing is done: RSS then stays at the peak, which the buffers'
bounds keep bounded anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

TRIM_AFTER_BYTES = 32 << 20
"""Freed bytes that make a trim worth its cost (a few milliseconds for a heap of hundreds of MiB)."""
TRIM_INTERVAL_S = 1.0
"""At most one trim per this long; frees in between are gathered into the next one."""


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def trim_now() -> bool:
    """Return free heap memory to the system now (blocking); False when the C library cannot."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class MemoryTrimmer:
    """Trims the C heap after enough bytes were freed (see the module docstring). Use from trio."""

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES) -> None:
        self.after_bytes = after_bytes
        self.trims = 0
        self._freed = 0
        self._pending = False

    def freed(self, size: int) -> None:
        """``size`` bytes of a buffer were given back; schedule a trim once enough were."""
        self._freed += size
        if self._freed >= self.after_bytes and not self._pending and _MALLOC_TRIM is not None:
            self._pending = True
            trio.lowlevel.spawn_system_task(self._trim_soon, name="malloc_trim")

    async def _trim_soon(self) -> None:
        try:
            await trio.sleep(TRIM_INTERVAL_S)  # gather the frees of one burst into one trim
            freed, self._freed = self._freed, 0
            await trio.to_thread.run_sync(trim_now)
            self.trims += 1
            log.debug("returned free memory to the system after %d MiB were freed", freed >> 20)
        finally:
            self._pending = False


_PROCESS_TRIMMER = MemoryTrimmer()


def process_trimmer() -> MemoryTrimmer:
    """The process's trimmer, shared by every bounded buffer (one trim serves them all)."""
    return _PROCESS_TRIMMER
