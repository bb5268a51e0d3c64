"""Planning over ledgers: the position arithmetic agrees with a brute-force list of every stored entry,
limits are shared fairly, splits are bounded, and data loss is reported only when it can have happened."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.spark.offsets import EARLIEST, Position
from magnetar.admin.spark.planner import (
    LedgerSpan,
    PartitionState,
    Segment,
    StatsError,
    advance,
    allocate,
    backlog,
    entry_bytes,
    next_entry,
    segments,
    splits,
    start_lost,
    state_from_stats,
)


@st.composite
def states(draw: st.DrawFn) -> PartitionState:
    ids = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=6)))
    sizes = [draw(st.integers(0, 6)) for _ in ids]
    ledgers = tuple(LedgerSpan(i, n) for i, n in zip(ids, sizes, strict=True))
    stored = [(i, e) for i, n in zip(ids, sizes, strict=True) for e in range(n)]
    last = stored[-1] if stored else (ids[-1], -1)
    return PartitionState(ledgers, last)


def stored(state: PartitionState) -> list[Position]:
    return [(s.ledger_id, e) for s in state.ledgers for e in range(s.entries)]


positions = st.tuples(st.integers(-1, 42), st.integers(-1, 8)).map(lambda p: EARLIEST if p[0] == -1 else p)


@given(states(), positions, positions)
def test_arithmetic_matches_brute_force(state: PartitionState, after: Position, up_to: Position) -> None:
    entries = stored(state)
    following = [p for p in entries if p > after]
    assert next_entry(state, after) == (following[0] if following else None)
    window = [p for p in entries if after < p <= up_to]
    assert backlog(state, after, up_to) == len(window)
    covered = [
        (s.ledger_id, e)
        for s in segments(state, after, up_to)
        for e in range(s.first_entry, s.last_entry + 1)
    ]
    assert covered == window
    for count in range(len(window) + 2):
        expected = window[min(count, len(window)) - 1] if count and window else after
        assert advance(state, after, count, up_to) == expected


@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 30), st.integers(0, 30)), max_size=6),
    st.integers(1, 25),
)
def test_splits_cover_each_entry_once_within_the_bound(raw: list[tuple[int, int, int]], bound: int) -> None:
    parts = [Segment(i * 10 + ledger, min(a, b), max(a, b)) for i, (ledger, a, b) in enumerate(raw)]
    out = splits(parts, bound)
    assert all(0 < sum(s.entries for s in split) <= bound for split in out)
    flat = [(s.ledger_id, e) for split in out for s in split for e in range(s.first_entry, s.last_entry + 1)]
    assert flat == [(s.ledger_id, e) for s in parts for e in range(s.first_entry, s.last_entry + 1)]
    assert all(sum(s.entries for s in split) == bound for split in out[:-1])


@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 30), st.integers(0, 30)), max_size=6),
    st.integers(1, 25),
    st.integers(1, 500),
    st.lists(st.just(0.0) | st.floats(1, 100), min_size=6, max_size=6),
)
def test_byte_bounded_splits(
    raw: list[tuple[int, int, int]], bound: int, max_bytes: int, sizes: list[float]
) -> None:
    parts = [Segment(i * 10 + ledger, min(a, b), max(a, b)) for i, (ledger, a, b) in enumerate(raw)]
    entry_size = {s.ledger_id: sizes[i] for i, s in enumerate(parts)}
    out = splits(parts, bound, max_bytes, entry_size)
    for split in out:
        entries = sum(s.entries for s in split)
        assert 0 < entries <= bound
        volume = sum(s.entries * entry_size[s.ledger_id] for s in split)
        assert volume <= max_bytes + 1e-6 or entries == 1
    flat = [(s.ledger_id, e) for split in out for s in split for e in range(s.first_entry, s.last_entry + 1)]
    assert flat == [(s.ledger_id, e) for s in parts for e in range(s.first_entry, s.last_entry + 1)]


def test_a_big_batched_ledger_is_split_by_bytes() -> None:
    state = PartitionState((LedgerSpan(4, 10_000, 10_000 * 8_600),), (4, 9_999))  # ~86 messages an entry
    assert entry_bytes(state) == {4: 8_600.0}
    out = splits(segments(state, EARLIEST, state.latest), 50_000, 32 * 1024 * 1024, entry_bytes(state))
    assert [sum(s.entries for s in split) for split in out] == [3901, 3901, 2198]


@given(st.dictionaries(st.text(max_size=3), st.integers(0, 50), max_size=5), st.integers(1, 120))
def test_allocation_is_fair_and_uses_the_whole_limit(backlogs: dict[str, int], limit: int) -> None:
    grants = allocate(backlogs, limit)
    assert set(grants) == set(backlogs)
    assert all(0 <= grants[k] <= backlogs[k] for k in backlogs)
    assert sum(grants.values()) == min(limit, sum(backlogs.values()))
    if limit >= len(backlogs):  # nobody starves while another partition got more than an equal share
        share = limit // max(1, len(backlogs))
        assert all(grants[k] >= min(backlogs[k], share) for k in backlogs)


def test_allocation_examples() -> None:
    assert allocate({"a": 100, "b": 100}, 50) == {"a": 25, "b": 25}
    assert allocate({"a": 5, "b": 100, "c": 0}, 50) == {"a": 5, "b": 45, "c": 0}
    assert allocate({"a": 3, "b": 3}, 1) == {"a": 1, "b": 0}


def stats(
    ledgers: list[dict[str, Any]], last: str, current: int, cursors: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "ledgers": ledgers,
        "lastConfirmedEntry": last,
        "currentLedgerEntries": current,
        "cursors": cursors,
    }


def test_state_from_internal_stats_patches_the_open_ledger() -> None:
    state = state_from_stats(
        stats(
            [{"ledgerId": 3, "entries": 10, "size": 500}, {"ledgerId": 5, "entries": 0, "size": 0}],
            "5:6",
            7,
            {"q-orders": {"markDeletePosition": "3:9"}},
        )
        | {"currentLedgerSize": 70},
        "q-orders",
    )
    assert state == PartitionState((LedgerSpan(3, 10, 500), LedgerSpan(5, 7, 70)), (5, 6), (3, 9))
    assert entry_bytes(state) == {3: 50.0, 5: 10.0}
    # A fresh ledger after a rollover holds nothing yet; the last confirmed entry is in the previous one.
    rolled = state_from_stats(
        stats([{"ledgerId": 3, "entries": 10}, {"ledgerId": 8, "entries": 0}], "3:9", 0)
    )
    assert rolled.ledgers == (LedgerSpan(3, 10), LedgerSpan(8, 0))
    assert rolled.cursor is None
    with pytest.raises(StatsError):
        state_from_stats({"ledgers": []})
    with pytest.raises(StatsError):
        state_from_stats(stats([], "x", 0))


def test_data_loss_is_reported_only_when_it_can_have_happened() -> None:
    intact = PartitionState((LedgerSpan(3, 10), LedgerSpan(5, 4)), (5, 3))
    assert start_lost(intact, EARLIEST) is None
    assert start_lost(intact, (3, 4)) is None  # its ledger is still stored
    trimmed = PartitionState((LedgerSpan(5, 4),), (5, 3))
    # Ledger 3 is gone; the query's cursor sat at or before the start: only consumed entries were trimmed.
    assert start_lost(PartitionState(trimmed.ledgers, (5, 3), (3, 9)), (3, 9)) is None
    assert start_lost(PartitionState(trimmed.ledgers, (5, 3), (4, -1)), (3, 9)) is None  # moved by the trim
    # No subscription, or one moved past unread entries: what followed the start may be lost.
    lost = start_lost(trimmed, (3, 4))
    assert lost is not None
    assert "ledger 3 holding the last consumed entry 3:4 was deleted" in lost
    assert "first stored entry after it: 5:0" in lost
    assert start_lost(PartitionState(trimmed.ledgers, (5, 3), (5, 1)), (3, 4)) is not None
    assert start_lost(trimmed, (5, 3)) is None  # everything was consumed
    past = start_lost(trimmed, (9, 0))
    assert past is not None
    assert "past the end of the topic" in past
