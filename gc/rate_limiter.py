"""A token-bucket rate limiter for the garbage collector (Guava's ``RateLimiter`` as BookKeeper uses it).

``await limiter.acquire(n)`` returns at once if the permits are available and otherwise sleeps until they
are; a request larger than the bucket is let through and paid for afterwards (the next caller waits), so
a big batch never blocks for good. Rates bound the compactor's copying (entries or bytes per second,
BookKeeper's ``compactionRateByEntries`` / ``compactionRateByBytes``) and the collector's metadata reads
(``gcMetadataOpRateLimit``). Time comes from the ``now`` seam (trio's clock by default, so tests on
``trio.testing.MockClock`` run without waiting).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

BURST_S = 1.0
"""Permits not used for up to this long may be spent at once."""


class RateLimiter:
    def __init__(self, rate_per_s: float, *, now: Callable[[], float] = trio.current_time) -> None:
        """``rate_per_s <= 0`` means unlimited."""
        self.rate_per_s = rate_per_s
        self._now = now
        self._next_free: float | None = None
        self.waited_s = 0.0
        """Total time spent waiting (how much the limit slowed its user down)."""

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s <= 0

    async def acquire(self, permits: float = 1.0) -> None:
        if self.unlimited or permits <= 0:
            await trio.lowlevel.checkpoint()
            return
        now = self._now()
        next_free = now - BURST_S if self._next_free is None else max(self._next_free, now - BURST_S)
        wait = next_free - now
        self._next_free = next_free + permits / self.rate_per_s
        if wait > 0:
            self.waited_s += wait
            await trio.sleep(wait)
        else:
            await trio.lowlevel.checkpoint()
