"""When to roll the current ledger over (Pulsar's ``currentLedgerIsFull`` + the inactive-ledger task).

A ledger is full at ``max_entries`` entries, at ``max_size_bytes``, or once older than the maximum rollover
time (with up to ``jitter_fraction`` random extra per ledger, as Pulsar adds 5% so that many topics do
not roll at once). Size and age never roll a ledger younger than ``min_time_ms``; the entry cap always does (a
ledger's entry count is the one bound that must hold exactly: 120,000 entries make ledgers of 50,000, 50,000
and 20,000). An idle topic rolls too: the periodic check applies the same rule without waiting for an add,
so retention can delete data of quiet topics (Pulsar issue #6935). Empty ledgers are never rolled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RolloverLimits:
    max_entries: int = 50_000
    max_size_bytes: int = 2048 * 1024 * 1024
    max_time_ms: int = 240 * 60_000
    min_time_ms: int = 10 * 60_000

    def __post_init__(self) -> None:
        if self.max_entries < 1 or self.max_size_bytes < 1:
            raise ValueError("max_entries and max_size_bytes must be positive")
        if self.max_time_ms > 0 and self.min_time_ms > self.max_time_ms:
            raise ValueError("min rollover time must not exceed the max rollover time")


def ledger_is_full(
    limits: RolloverLimits, entries: int, size_bytes: int, age_ms: int, max_time_ms: int | None = None
) -> bool:
    """``max_time_ms`` overrides ``limits.max_time_ms`` with this ledger's jittered deadline."""
    if entries <= 0:
        return False
    if entries >= limits.max_entries:
        return True
    deadline = limits.max_time_ms if max_time_ms is None else max_time_ms
    by_size = size_bytes >= limits.max_size_bytes
    by_age = deadline > 0 and age_ms >= deadline
    return (by_size or by_age) and age_ms >= limits.min_time_ms


def jittered_max_time_ms(limits: RolloverLimits, random_fraction: float, jitter_fraction: float) -> int:
    """This ledger's max age: the limit plus ``random_fraction * jitter_fraction`` of it."""
    if limits.max_time_ms <= 0:
        return limits.max_time_ms
    return limits.max_time_ms + int(limits.max_time_ms * jitter_fraction * random_fraction)
