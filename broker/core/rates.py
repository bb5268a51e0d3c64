"""Pulsar's stats rates (``msgRateIn``, ``msgThroughputOut``, ...): per-second averages over the last stats
period.

As in Pulsar (``statsUpdateFrequencyInSecs``, 60 s by default), the broker recomputes every loaded topic's
rates once per period (:meth:`.topic.PersistentTopic.update_rates`, called by the service) from the message
and byte counters its producers, subscriptions and consumers keep anyway; between two updates ``stats``
reports the last period's figures. A producer or consumer that appeared during the period has counted from
zero since it was created, so its rate is what it did in the period divided by the whole period (Pulsar's
``Rate`` objects behave the same way). Nothing here runs on the message path.
"""

from __future__ import annotations


class Rate:
    """Messages and bytes per second over the last period, from two growing counters."""

    __slots__ = ("_bytes", "_msgs", "bytes_per_s", "msgs_per_s")

    def __init__(self) -> None:
        self._msgs = 0
        self._bytes = 0
        self.msgs_per_s = 0.0
        self.bytes_per_s = 0.0

    def update(self, msgs: int, size_bytes: int, period_s: float) -> None:
        """The counters' values at the end of a period of ``period_s`` seconds (> 0)."""
        self.msgs_per_s = max(0, msgs - self._msgs) / period_s
        self.bytes_per_s = max(0, size_bytes - self._bytes) / period_s
        self._msgs = msgs
        self._bytes = size_bytes
