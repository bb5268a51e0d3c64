"""Cursor bookkeeping against a flat model: the managed ledger as one sequence of entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.cursor_state import CursorState, InvalidAckError
from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position

# ledger 3: 4 entries, ledger 5: empty (dropped-like), ledger 7: 3 entries, ledger 9 current with 2 entries
LEDGERS = [LedgerInfo(3, 4, 40), LedgerInfo(5, 0, 0), LedgerInfo(7, 3, 30), LedgerInfo(9, 2, 20)]
FLAT = (
    [Position(3, e) for e in range(4)] + [Position(7, e) for e in range(3)] + [Position(9, 0), Position(9, 1)]
)


def fresh() -> tuple[LedgerList, CursorState]:
    ledgers = LedgerList(LEDGERS)
    return ledgers, CursorState(ledgers, Position(3, -1))


def test_position_arithmetic_crosses_ledgers() -> None:
    ledgers, _ = fresh()
    assert ledgers.next_position(Position(3, 3)) == Position(7, 0)
    assert ledgers.next_position(Position(9, 1)) == Position(9, 2)  # where the next add lands
    assert ledgers.previous_position(Position(7, 0)) == Position(3, 3)
    assert ledgers.previous_position(Position(3, 0)) == Position(3, -1)
    assert ledgers.first_position() == Position(3, 0)
    assert ledgers.last_position() == Position(9, 1)
    assert ledgers.entries_between(Position(3, 1), Position(9, 0)) == 6
    assert ledgers.position_after_skipping(Position(3, 2), 3) == Position(7, 1)
    assert ledgers.position_after_skipping(Position(3, 2), 100) == Position(9, 1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("ack"), st.integers(0, len(FLAT) - 1)),
            st.tuples(st.just("cumulative"), st.integers(0, len(FLAT) - 1)),
            st.tuples(st.just("skip"), st.integers(0, 4)),
        ),
        max_size=30,
    )
)
def test_cursor_matches_flat_model(operations: list[tuple[str, int]]) -> None:
    _, cursor = fresh()
    acked: set[int] = set()
    for op, arg in operations:
        if op == "ack":
            acked.add(arg)
            cursor.ack(FLAT[arg])
        elif op == "cumulative":
            acked |= set(range(arg + 1))
            cursor.ack_cumulative(FLAT[arg])
        else:
            unacked = [i for i in range(len(FLAT)) if i not in acked]
            acked |= set(unacked[:arg])
            cursor.skip(arg)
        prefix = 0
        while prefix in acked:
            prefix += 1
        expected_mark = FLAT[prefix - 1] if prefix else Position(3, -1)
        assert cursor.mark_delete == expected_mark
        assert cursor.backlog() == len(FLAT) - len(acked)
        for i, position in enumerate(FLAT):
            assert cursor.is_acked(position) == (i in acked)
        assert cursor.read_position > cursor.mark_delete


def test_ack_of_missing_entry_is_rejected() -> None:
    _, cursor = fresh()
    for bad in (Position(5, 0), Position(3, 4), Position(11, 0)):
        with pytest.raises(InvalidAckError):
            cursor.ack(bad)


def test_reset_rewinds_and_forgets_individual_acks() -> None:
    _, cursor = fresh()
    cursor.ack(FLAT[0])
    cursor.ack(FLAT[2])
    cursor.reset(Position(7, 0))
    assert cursor.mark_delete == Position(3, 3)
    assert cursor.read_position == Position(7, 0)
    assert cursor.backlog() == 5
    cursor.reset(Position(3, 0))
    assert cursor.mark_delete == Position(3, -1)
    assert cursor.backlog() == len(FLAT)


def test_restore_acked_ranges_after_recovery() -> None:
    ledgers, _ = fresh()
    cursor = CursorState(ledgers, Position(3, 1))
    cursor.restore_acked(((3, 0, 0), (3, 3, 3), (7, 0, 1)))
    assert cursor.mark_delete == Position(3, 1)
    assert cursor.backlog() == len(FLAT) - 2 - 3
    cursor.ack(Position(3, 2))
    assert cursor.mark_delete == Position(7, 1)


def test_trimmed_ledgers_move_a_lagging_cursor() -> None:
    ledgers, cursor = fresh()
    ledgers.remove(3)
    cursor.on_ledgers_trimmed()
    assert cursor.read_position == Position(7, 0)
    assert cursor.backlog() == 5


def test_normalize_fixes_stale_positions() -> None:
    ledgers, _ = fresh()
    assert ledgers.normalize(Position(3, 2)) == Position(3, 2)
    assert ledgers.normalize(Position(3, 4)) == Position(7, 0)  # past the end of a closed ledger
    assert ledgers.normalize(Position(5, 0)) == Position(7, 0)  # empty ledger
    assert ledgers.normalize(Position(1, 0)) == Position(3, 0)  # trimmed ledger
    assert ledgers.normalize(Position(9, 2)) == Position(9, 2)  # next slot of the current ledger
    assert ledgers.normalize(Position(9, -1)) == Position(9, 0)
