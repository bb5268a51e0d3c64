"""Counts in messages whatever the batching: the message index against a model where every message is its
own entry.

The same messages are stored in entries of any sizes, across ledgers of any lengths (some ledgers empty, as
after a rollover with nothing added). The model expands every entry into its messages, one per model entry,
so its counts are plain counts of messages; the index must give the same counts from positions alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.cursor_state import CursorState
from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.message_index import (
    MessageIndex,
    MessageIndexError,
    MessageLocation,
    unacknowledged_messages,
)
from magnetar.managed_ledger.position import Position


@dataclass(frozen=True)
class Stored:
    """One batching of the messages: ``entries[ledger][entry]`` is that entry's message count."""

    ledger_ids: tuple[int, ...]
    entries: tuple[tuple[int, ...], ...]

    def model(self) -> list[tuple[Position, int]]:
        """The model: every message on its own, in order, with the entry that holds it and its place there."""
        return [
            (Position(lid, e), offset)
            for lid, counts in zip(self.ledger_ids, self.entries, strict=True)
            for e, count in enumerate(counts)
            for offset in range(count)
        ]

    def positions(self) -> list[Position]:
        """Every position a cursor can stand at: each ledger's ``L:-1``, its entries, its open slot."""
        out = []
        for lid, counts in zip(self.ledger_ids, self.entries, strict=True):
            out += [Position(lid, e) for e in range(-1, len(counts) + 1)]
        return out


@st.composite
def stored(draw: st.DrawFn) -> Stored:
    ledgers = draw(st.lists(st.lists(st.integers(1, 6), max_size=6), min_size=1, max_size=5))
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(ledgers), max_size=len(ledgers)))
    ids, lid = [], 0
    for gap in gaps:
        lid += gap
        ids.append(lid)
    return Stored(tuple(ids), tuple(tuple(counts) for counts in ledgers))


def build(s: Stored, start: int = 0) -> MessageIndex:
    index = MessageIndex(start)
    for lid, counts in zip(s.ledger_ids, s.entries, strict=True):
        for e, count in enumerate(counts):
            index.append(Position(lid, e), count)
    return index


def model_after(model: list[tuple[Position, int]], position: Position) -> list[int]:
    """The model's messages stored after ``position``: their indexes."""
    return [i for i, (entry, _) in enumerate(model) if entry > position]


@settings(max_examples=300, deadline=None)
@given(stored())
def test_counts_between_positions_are_the_models(s: Stored) -> None:
    index, model = build(s), s.model()
    assert index.next_index == len(model)
    positions = s.positions()
    for a in positions:
        after_a = model_after(model, a)
        # the backlog of a cursor whose mark-delete is a
        assert index.messages_between(a, Position(s.ledger_ids[-1], 10**6)) == len(after_a)
        assert index.index_after(a) == (after_a[0] if after_a else len(model))
        for b in positions:
            expected = len([i for i in after_a if model[i][0] <= b])
            assert index.messages_between(a, b) == expected, (a, b)


@settings(max_examples=300, deadline=None)
@given(stored(), st.integers(0, 40))
def test_skip_and_peek_land_where_the_model_does(s: Stored, n: int) -> None:
    index, model = build(s), s.model()
    for i, (entry, offset) in enumerate(model):
        location = index.locate(i)
        assert location is not None
        assert (location.position, location.offset) == (entry, offset)
        assert location.messages == index.messages_in(entry)
        assert index.first_index(entry) == i - offset
    assert index.locate(len(model)) is None
    assert index.locate(-1) is None
    for a in s.positions():
        after_a = model_after(model, a)
        # skip n messages from a: the last one skipped, possibly inside an entry
        skipped = index.locate(index.index_after(a) + n - 1) if n else None
        if n == 0 or n > len(after_a):
            assert n == 0 or skipped is None
        else:
            assert skipped is not None
            assert (skipped.position, skipped.offset) == model[after_a[n - 1]]


@settings(max_examples=200, deadline=None)
@given(stored(), st.data())
def test_trimmed_ledgers_leave_the_others_counts_alone(s: Stored, data: st.DataObject) -> None:
    index, model = build(s, start=0), s.model()
    trimmed = data.draw(st.integers(0, len(s.ledger_ids) - 1))
    for lid in s.ledger_ids[:trimmed]:
        index.remove_ledger(lid)
    kept = [i for i, (entry, _) in enumerate(model) if entry.ledger_id >= s.ledger_ids[trimmed]]
    assert index.first_stored_index() == (kept[0] if kept else len(model))
    # a cursor left in a trimmed ledger counts what is still stored
    assert index.messages_between(Position(0, -1), Position(s.ledger_ids[-1], 10**6)) == len(kept)
    for i in range(len(model)):
        location = index.locate(i)
        if i in kept:
            assert location is not None
            assert (location.position, location.offset) == model[i]
        else:
            assert location is None


@given(stored(), st.integers(0, 2**40))
def test_an_index_that_starts_later_shifts_every_index(s: Stored, start: int) -> None:
    base, shifted = build(s), build(s, start)
    for a in s.positions():
        assert shifted.index_after(a) == base.index_after(a) + start
    assert shifted.next_index == base.next_index + start


def test_appends_out_of_order_are_refused() -> None:
    index = MessageIndex()
    assert index.append(Position(3, 0), 4) == 0
    assert index.append(Position(3, 1), 1) == 4
    with pytest.raises(MessageIndexError, match="not the next"):
        index.append(Position(3, 3), 1)
    with pytest.raises(MessageIndexError, match="before ledger 3"):
        index.append(Position(2, 0), 1)
    with pytest.raises(MessageIndexError, match="at least one message"):
        index.append(Position(3, 2), 0)
    with pytest.raises(MessageIndexError, match="not the next"):
        index.append(Position(4, 1), 1)
    with pytest.raises(MessageIndexError, match="no entry at 3:5"):
        index.first_index(Position(3, 5))
    with pytest.raises(MessageIndexError, match="never negative"):
        MessageIndex(-1)
    assert index.locate(2) == MessageLocation(Position(3, 0), 2, 4)


def test_ledgers_recorded_whole_count_one_message_an_entry() -> None:
    index = MessageIndex()
    index.append_ledger(1, 3)
    index.append_ledger(2, 0)
    assert index.append(Position(2, 0), 5) == 3
    assert index.messages_between(Position(1, -1), Position(2, 0)) == 8
    assert index.locate(2) == MessageLocation(Position(1, 2), 0, 1)
    assert index.locate(7) == MessageLocation(Position(2, 0), 4, 5)
    with pytest.raises(MessageIndexError, match="not after ledger 2"):
        index.append_ledger(2, 1)
    with pytest.raises(MessageIndexError, match="cannot hold -1 entries"):
        index.append_ledger(3, -1)


@settings(max_examples=300, deadline=None)
@given(
    stored(),
    st.lists(
        st.tuples(st.sampled_from(["ack", "cumulative", "skip", "reset"]), st.integers(0, 200)),
        max_size=25,
    ),
)
def test_a_cursors_message_backlog_is_the_models(s: Stored, operations: list[tuple[str, int]]) -> None:
    """Acks, cumulative acks, skips (of entries) and resets on a cursor: its backlog in messages is the
    number of unacknowledged messages of the model, where acknowledging an entry acknowledges each of its
    messages."""
    index, model = build(s), s.model()
    ledgers = LedgerList(
        [LedgerInfo(lid, len(counts)) for lid, counts in zip(s.ledger_ids, s.entries, strict=True)]
    )
    entries = [
        Position(lid, e)
        for lid, counts in zip(s.ledger_ids, s.entries, strict=True)
        for e in range(len(counts))
    ]
    cursor = CursorState(ledgers, Position(s.ledger_ids[0], -1))

    def backlog() -> int:
        return unacknowledged_messages(
            index, cursor.mark_delete, ledgers.last_position(), cursor.acked.ranges()
        )

    for op, arg in operations:
        if entries and op == "ack":
            cursor.ack(entries[arg % len(entries)])
        elif entries and op == "cumulative":
            cursor.ack_cumulative(entries[arg % len(entries)])
        elif op == "skip":
            cursor.skip(arg % 4)
        elif entries and op == "reset":
            cursor.reset(entries[arg % len(entries)])
        unacked = [i for i, (entry, _) in enumerate(model) if not cursor.is_acked(entry)]
        assert backlog() == len(unacked)
        assert cursor.backlog() == len({model[i][0] for i in unacked})  # the entry count is unchanged
