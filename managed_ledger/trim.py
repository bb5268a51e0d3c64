"""The trim rule: which consumed ledgers retention allows to delete (Pulsar's ``internalTrimLedgers``).

A pure function over the ledger list, so the rule has its own table of tests. Given the ledgers in order
(oldest first, the current ledger last), the slowest durable cursor's mark-delete position and the retention
policy, it returns the ids to delete:

* Only ledgers strictly below the *slowest* ledger are candidates. With no durable cursor that bound is past
  the current ledger; otherwise it is the mark-delete position's ledger, or the one after it when that ledger
  is closed and fully consumed (its last entry is mark-deleted).
* The current ledger is never deleted.
* Walking from the oldest: with ``truncate`` every candidate goes; otherwise a ledger goes if it is expired
  (``now - closeTime > retentionTime``, time >= 0) or the topic is over its size quota without it
  (``totalSize - sizeDeletedSoFar >= retentionSize``, size >= 0; the ledger's own size already counted as
  deleted, as Pulsar fixed in PR #11242), and the walk stops at the first ledger that may stay: only a
  contiguous oldest prefix is ever deleted.
* ``-1`` means unlimited (that limit never triggers); ``0/0`` deletes every consumed closed ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.position import Position

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Pulsar's ``RetentionPolicies``; -1 = unlimited."""

    time_minutes: int = 0
    size_mb: int = 0

    @property
    def time_ms(self) -> int:
        return -1 if self.time_minutes < 0 else self.time_minutes * 60_000

    @property
    def size_bytes(self) -> int:
        return -1 if self.size_mb < 0 else self.size_mb * MIB


def slowest_ledger_bound(
    ledgers: Sequence[LedgerInfo], current_ledger_id: int, slowest_mark_delete: Position | None
) -> int:
    """Ledgers with an id below the returned one are fully consumed by every durable cursor."""
    if slowest_mark_delete is None:
        return current_ledger_id + 1
    mark = slowest_mark_delete
    for info in ledgers:
        if info.ledger_id == mark.ledger_id:
            fully_consumed = info.ledger_id != current_ledger_id and info.entries == mark.entry_id + 1
            return mark.ledger_id + 1 if fully_consumed else mark.ledger_id
    return mark.ledger_id


def ledgers_to_trim(
    ledgers: Sequence[LedgerInfo],
    current_ledger_id: int,
    slowest_mark_delete: Position | None,
    policy: RetentionPolicy,
    now_ms: int,
    *,
    truncate: bool = False,
) -> list[int]:
    bound = slowest_ledger_bound(ledgers, current_ledger_id, slowest_mark_delete)
    total_size = sum(info.size_bytes for info in ledgers)
    retention_time_ms = policy.time_ms
    retention_size = policy.size_bytes
    size_to_delete = 0
    doomed: list[int] = []
    for info in ledgers:
        if info.ledger_id >= bound or info.ledger_id == current_ledger_id:
            break
        if truncate:
            doomed.append(info.ledger_id)
            continue
        size_to_delete += info.size_bytes
        over_quota = retention_size >= 0 and total_size - size_to_delete >= retention_size
        expired = retention_time_ms >= 0 and now_ms - info.timestamp_ms > retention_time_ms
        if not (expired or over_quota):
            break
        doomed.append(info.ledger_id)
    return doomed
