"""Table tests of the trim rule (docs/upstream.md, Pulsar §3.4)."""

from __future__ import annotations

import pytest

from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.trim import MIB, RetentionPolicy, ledgers_to_trim, slowest_ledger_bound

NOW = 10_000_000
MINUTE = 60_000

# Ledgers 1..3 closed (10 entries, 1 MiB each, closed 30, 20, 10 minutes ago), 4 is current (open).
LEDGERS = (
    LedgerInfo(1, 10, MIB, NOW - 30 * MINUTE),
    LedgerInfo(2, 10, MIB, NOW - 20 * MINUTE),
    LedgerInfo(3, 10, MIB, NOW - 10 * MINUTE),
    LedgerInfo(4, 0, 0, 0),
)
ALL_CONSUMED = Position(3, 9)


@pytest.mark.parametrize(
    ("mark_delete", "policy", "truncate", "expected"),
    [
        # 0/0: delete every consumed closed ledger, never the current one
        (ALL_CONSUMED, RetentionPolicy(0, 0), False, [1, 2, 3]),
        # -1/-1: keep everything
        (ALL_CONSUMED, RetentionPolicy(-1, -1), False, []),
        # time-bounded: older than 15 minutes
        (ALL_CONSUMED, RetentionPolicy(15, -1), False, [1, 2]),
        # size-bounded: keep at least 2 MiB of consumed data
        (ALL_CONSUMED, RetentionPolicy(-1, 2), False, [1]),
        # size-bounded, 1 MiB kept
        (ALL_CONSUMED, RetentionPolicy(-1, 1), False, [1, 2]),
        # both limits: either reached deletes (time deletes 1, size 2 MiB also deletes 1; 2 stays)
        (ALL_CONSUMED, RetentionPolicy(25, 2), False, [1]),
        # the slowest cursor bounds trimming: ledger 2 only partly consumed
        (Position(2, 4), RetentionPolicy(0, 0), False, [1]),
        # ledger 2 fully consumed (last entry 9 mark-deleted) -> 2 can go
        (Position(2, 9), RetentionPolicy(0, 0), False, [1, 2]),
        # nothing consumed
        (Position(1, -1), RetentionPolicy(0, 0), False, []),
        # no durable cursors: everything closed is a candidate
        (None, RetentionPolicy(0, 0), False, [1, 2, 3]),
        (None, RetentionPolicy(-1, -1), False, []),
        # truncate ignores retention but not the slowest cursor or the current ledger
        (Position(3, 0), RetentionPolicy(-1, -1), True, [1, 2]),
        (None, RetentionPolicy(-1, -1), True, [1, 2, 3]),
    ],
)
def test_trim_table(
    mark_delete: Position | None, policy: RetentionPolicy, truncate: bool, expected: list[int]
) -> None:
    assert ledgers_to_trim(LEDGERS, 4, mark_delete, policy, NOW, truncate=truncate) == expected


def test_only_a_contiguous_oldest_prefix_is_deleted() -> None:
    # ledger 1 was closed recently (e.g. recovered late), 2 long ago: time retention stops at 1.
    ledgers = (
        LedgerInfo(1, 5, MIB, NOW - 1 * MINUTE),
        LedgerInfo(2, 5, MIB, NOW - 60 * MINUTE),
        LedgerInfo(3, 0, 0, 0),
    )
    assert ledgers_to_trim(ledgers, 3, Position(2, 4), RetentionPolicy(10, -1), NOW) == []


def test_current_ledger_is_never_deleted_even_when_fully_consumed() -> None:
    ledgers = (LedgerInfo(1, 10, MIB, NOW - MINUTE), LedgerInfo(2, 10, MIB, 0))
    assert ledgers_to_trim(ledgers, 2, Position(2, 9), RetentionPolicy(0, 0), NOW) == [1]
    assert slowest_ledger_bound(ledgers, 2, Position(2, 9)) == 2


def test_size_rule_counts_the_ledger_being_deleted() -> None:
    # PR #11242: with 3 MiB consumed and a 2 MiB quota, only the oldest ledger goes (2 MiB remain).
    ledgers = (
        LedgerInfo(1, 1, MIB, NOW),
        LedgerInfo(2, 1, MIB, NOW),
        LedgerInfo(3, 1, MIB, NOW),
        LedgerInfo(4, 0, 0, 0),
    )
    assert ledgers_to_trim(ledgers, 4, Position(3, 0), RetentionPolicy(-1, 2), NOW) == [1]


def test_retention_policy_units() -> None:
    assert RetentionPolicy(2, 3).time_ms == 120_000
    assert RetentionPolicy(2, 3).size_bytes == 3 * MIB
    assert RetentionPolicy(-1, -1).time_ms == -1
    assert RetentionPolicy(-1, -1).size_bytes == -1
