"""The re-replication rate limit: a copy *waits* for its turn (unlike the request limits that refuse).

:class:`CopyPacer` spaces out copies so that on average no more than ``bytes_per_s`` bytes and
``entries_per_s`` entries a second are copied by this process (0 turns a limit off); up to ``burst_s`` worth
of unused budget may be spent at once. Each limit keeps the time at which its budget is next free: taking
``n`` units moves it ``n / rate`` seconds on, and the caller sleeps until it is no more than ``burst_s``
ahead of now. Time comes from the injected clock and the sleep is trio's, so a simulation on a mock clock
paces deterministically.
"""

from __future__ import annotations

import trio

from magnetar.bookkeeper.runtime import Clock

BURST_S = 0.1


class _Limit:
    __slots__ = ("_free_at", "rate")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._free_at = 0.0

    def take(self, units: float, now: float, burst_s: float) -> float:
        """Take ``units``; returns how long to wait before going on."""
        if self.rate <= 0 or units <= 0:
            return 0.0
        self._free_at = max(self._free_at, now - burst_s) + units / self.rate
        return max(0.0, self._free_at - now - burst_s)


class CopyPacer:
    def __init__(
        self, bytes_per_s: float, entries_per_s: float, clock: Clock, burst_s: float = BURST_S
    ) -> None:
        self._bytes = _Limit(bytes_per_s)
        self._entries = _Limit(entries_per_s)
        self._clock = clock
        self._burst_s = burst_s
        self.waited_s = 0.0
        """Total time copies waited for the limit (for tests and benchmarks)."""

    @property
    def limited(self) -> bool:
        return self._bytes.rate > 0 or self._entries.rate > 0

    async def entry(self, size_bytes: int) -> None:
        """Account for one copied entry of ``size_bytes``; waits while over the limit."""
        now = self._clock.monotonic()
        wait = max(
            self._bytes.take(size_bytes, now, self._burst_s), self._entries.take(1, now, self._burst_s)
        )
        if wait > 0:
            self.waited_s += wait
            await trio.sleep(wait)
