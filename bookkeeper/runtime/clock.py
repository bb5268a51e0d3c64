"""Clock seam.

Code that needs "now" takes a :class:`Clock`. Wall-clock milliseconds (``time_ms``) are for values that are
stored or shown to users (ledger creation time, publish time); the monotonic reading (``monotonic``) is for
timeouts and rates. Under trio, :class:`TrioClock` reads ``trio.current_time()`` for the monotonic part, so a
test running on ``trio.testing.MockClock`` drives every timeout deterministically; its wall clock is the
monotonic reading offset by the wall time at construction, so both move together in a simulation.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def time_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The process clocks; usable outside trio (storage engine, CLI tools)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000


class TrioClock:
    """Reads the running trio clock, so ``MockClock`` (autojump) controls time in simulations."""

    def __init__(self, wall_origin_ms: int | None = None) -> None:
        self._wall_origin_ms = time.time_ns() // 1_000_000 if wall_origin_ms is None else wall_origin_ms
        self._mono_origin = trio.current_time()

    def monotonic(self) -> float:
        return trio.current_time()

    def time_ms(self) -> int:
        return self._wall_origin_ms + int((trio.current_time() - self._mono_origin) * 1000)
