"""Proof that a subscription's counts are message counts, whatever the batching.

The same messages are stored in entries of any sizes, across ledgers of any lengths; some ledgers are
*coarse*, as after a reopen (their bounds come from the metadata, their entries' indexes are learned from
the entries read). A cursor then runs any sequence of individual acks of entries, cumulative acks (what
expiry does), skips of N messages and peeks of the n-th message. The model stores every message as its own
entry: its backlog, skip, peek and expire counts are plain counts of messages. The cursor - through the
message index, from positions alone, with batch-index acks where a skip ends inside an entry - must give the
same counts at every step, and after every step the messages it would deliver must be the model's
unacknowledged ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_state import CursorState
from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.message_index import MessageIndex, MessageLocation
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger


@dataclass
class FakeLedger:
    """What a cursor asks of its managed ledger, with the real index; "reading" an entry teaches a coarse
    ledger its index, as :meth:`ManagedLedger.read_entries` does from the entry's prefix."""

    ledgers: LedgerList
    message_index: MessageIndex
    truth: dict[Position, tuple[int, int]] = field(default_factory=dict)
    reads: int = 0

    @property
    def last_confirmed(self) -> Position:
        last = self.ledgers.last_position()
        assert last is not None
        return last

    def now_ms(self) -> int:
        return 0

    def read(self, position: Position) -> None:
        self.reads += 1
        first, count = self.truth[position]
        self.message_index.learn(position, first, count)

    async def locate_message(self, index: int) -> MessageLocation | None:
        while (position := self.message_index.entry_to_learn(index)) is not None:
            self.read(position)
        return self.message_index.locate(index)


@dataclass(frozen=True)
class Layout:
    entries: tuple[tuple[int, ...], ...]
    """``entries[ledger][entry]``: how many messages that entry holds."""
    coarse: tuple[bool, ...]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    ledgers = draw(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=8), min_size=1, max_size=4))
    coarse = draw(st.lists(st.booleans(), min_size=len(ledgers), max_size=len(ledgers)))
    return Layout(tuple(tuple(counts) for counts in ledgers), tuple(coarse))


def build(layout: Layout) -> tuple[FakeLedger, list[tuple[Position, int]]]:
    """The ledger and the model: every message, in order, with its entry and its place in the entry."""
    index = MessageIndex()
    infos, truth, model = [], {}, []
    next_index = 0
    for i, (counts, coarse) in enumerate(zip(layout.entries, layout.coarse, strict=True)):
        ledger_id = 10 + i
        infos.append(LedgerInfo(ledger_id, len(counts)))
        end = next_index + sum(counts)
        if coarse:
            index.append_closed_ledger(ledger_id, next_index, end, len(counts))
        for entry_id, count in enumerate(counts):
            position = Position(ledger_id, entry_id)
            if not coarse:
                index.append(position, count)
            truth[position] = (next_index, count)
            model += [(position, offset) for offset in range(count)]
            next_index += count
    fake = FakeLedger(LedgerList(infos), index, truth)
    return fake, model


Op = tuple[str, int]
ops = st.lists(st.tuples(st.sampled_from(["ack", "expire", "skip", "peek"]), st.integers(0, 60)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(layouts(), ops)
def test_backlog_skip_peek_and_expire_count_messages_as_if_each_were_its_own_entry(
    layout: Layout, steps: list[Op]
) -> None:
    fake, model = build(layout)
    first = fake.ledgers.first_position()
    assert first is not None
    cursor = ManagedCursor(
        cast("ManagedLedger", fake),
        "sub",
        CursorState(fake.ledgers, fake.ledgers.previous_position(first)),
        None,
    )
    entries = list(fake.truth)
    acked: set[int] = set()  # the model: acknowledged messages, by index

    def unacked() -> list[int]:
        return [i for i in range(len(model)) if i not in acked]

    def messages_of(position: Position) -> list[int]:
        return [i for i, (entry, _) in enumerate(model) if entry == position]

    async def run() -> None:
        for op, n in steps:
            backlog_before = len(model) - len(acked)
            if op == "ack":  # a consumer acknowledges every message of an entry it received
                position = entries[n % len(entries)]
                fake.read(position)
                if not cursor.is_acked(position):
                    cursor.ack(position)
                acked.update(messages_of(position))
            elif op == "expire":  # every message up to an entry, acknowledged at once
                position = entries[n % len(entries)]
                fake.read(position)
                before = cursor.message_backlog()
                if position > cursor.mark_delete:
                    cursor.ack_cumulative(position)
                expired = before - cursor.message_backlog()
                newly = [i for i in range(len(model)) if model[i][0] <= position and i not in acked]
                acked.update(newly)
                assert expired == len(newly)
            elif op == "skip":
                skipped = await cursor.skip_messages(n)
                chosen = unacked()[:n]
                acked.update(chosen)
                assert skipped == len(chosen)
            else:  # peek the n-th unacknowledged message (1 = the first)
                location = await cursor.locate_unacked(n)
                waiting = unacked()
                if 1 <= n <= len(waiting):
                    assert location is not None
                    assert (location.position, location.offset) == model[waiting[n - 1]]
                else:
                    assert location is None
            assert cursor.message_backlog() == len(model) - len(acked) <= backlog_before
            delivered = [
                i
                for i, (position, offset) in enumerate(model)
                if not cursor.is_acked(position) and offset >= cursor.prefix_acked(position)
            ]
            assert delivered == unacked()

    trio.run(run)


def test_a_skip_that_ends_inside_an_entry_acknowledges_its_first_messages_only() -> None:
    """Three entries of 4 messages: skip 6 acknowledges entry 0 and messages 0-1 of entry 1 (by batch index),
    whose other two are still delivered; acknowledging entry 1 then drops the batch-index ack."""
    fake, _ = build(Layout(((4, 4, 4),), (False,)))
    cursor = ManagedCursor(
        cast("ManagedLedger", fake), "sub", CursorState(fake.ledgers, Position(10, -1)), None
    )

    async def run() -> None:
        assert await cursor.skip_messages(6) == 6
        assert cursor.mark_delete == Position(10, 0)
        assert cursor.prefix_acked(Position(10, 1)) == 2
        assert cursor.message_backlog() == 6
        assert cursor.snapshot().acked_prefix == (10, 1, 2)
        location = await cursor.locate_unacked(1)
        assert location == MessageLocation(Position(10, 1), 2, 4)
        cursor.ack(Position(10, 1))
        assert cursor.prefix_acked(Position(10, 1)) == 0
        assert cursor.message_backlog() == 4
        assert await cursor.skip_messages(100) == 4
        assert cursor.message_backlog() == 0

    trio.run(run)


def test_messages_acknowledged_one_by_one_inside_an_entry_leave_the_backlog() -> None:
    """A consumer acknowledges 2 of an entry's 4 messages (the subscription tells the cursor how many are
    left); the backlog counts the other 2; acknowledging the entry, or the subscription forgetting its
    batch-index acks (a cursor moved), counts it whole again or not at all."""
    fake, _ = build(Layout(((4, 4),), (False,)))
    cursor = ManagedCursor(
        cast("ManagedLedger", fake), "sub", CursorState(fake.ledgers, Position(10, -1)), None
    )
    cursor.note_batch_unacked(Position(10, 1), 2)
    assert cursor.message_backlog() == 6
    cursor.forget_batch_acks()
    assert cursor.message_backlog() == 8
    cursor.note_batch_unacked(Position(10, 1), 1)
    cursor.ack(Position(10, 1))
    assert cursor.message_backlog() == 4
