"""Acks whose message ids a client forged: the batch size inside an id is never trusted.

A subscription over a real cursor and message index (entries of 1, 3 and 5 messages, one ledger known
exactly, one coarse as after a reopen): acks of messages pending at a consumer take the entry's size from the
delivery; acks of messages delivered to a session that is gone take it from the message index; a batch index
outside the stored entry, an unknown entry and an entry whose size the index does not know are ignored. The
backlog is the number of stored messages not acknowledged, whatever was sent.
"""

from __future__ import annotations

from typing import cast

import trio
from fixtures.subscription_fakes import COARSE, EXACT, SIZES, STORED, FakeLedger, Sink, subscription_of
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.core.batch_acks import UnackedIndexes
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.message_id import MessageId
from magnetar.managed_ledger.position import Position

INT32_MAX = 2**31 - 1


def subscription() -> tuple[Subscription, Consumer]:
    sub, (consumer,) = subscription_of(SubscriptionType.SHARED, 1)
    return sub, consumer


def deliver(sub: Subscription, consumer: Consumer, ledger_id: int, entry_id: int, index: int) -> None:
    size = SIZES[ledger_id][entry_id]
    cast("FakeLedger", sub.cursor.ml).read(Position(ledger_id, entry_id))
    message = StoredMessage(b"x", "p", 0, 0)
    sub.push(consumer, Delivery(ledger_id, entry_id, index, size, message, 0), 0.0)


def test_an_entry_of_unacked_indexes_is_a_bitmap_of_the_stored_size() -> None:
    unacked = UnackedIndexes(65_535, acked_prefix=2)
    assert len(unacked) == 65_533
    assert 1 not in unacked
    assert 2 in unacked
    assert 65_534 in unacked
    assert 65_535 not in unacked
    assert -1 not in unacked
    assert INT32_MAX not in unacked
    assert not unacked.discard(65_535)
    assert not unacked.discard(-1)
    assert not unacked.discard(1)
    assert unacked.discard(2)
    assert not unacked.discard(2)
    assert len(unacked) == 65_532
    assert unacked.discard_all([3, 3, 4, 10**9]) == 2


def test_a_forged_batch_size_is_never_read() -> None:
    sub, consumer = subscription()
    assert sub.backlog() == STORED
    # message 0 of the 3-message entry, delivered to a session that is gone: its size comes from the index
    for index in (0, 2):
        assert sub.ack_fields(consumer, -1, EXACT, 1, index)
    assert not sub.ack_fields(consumer, -1, EXACT, 1, 3)  # outside the stored entry
    assert not sub.ack_fields(consumer, -1, EXACT, 1, INT32_MAX)
    assert not sub.ack_fields(consumer, -1, EXACT, 1, 0)  # already acked
    assert sub.backlog() == STORED - 2
    unacked = sub._batches[(EXACT, 1)]
    assert unacked.size == 3
    assert len(unacked) == 1
    assert sub.ack_fields(consumer, -1, EXACT, 1, 1)
    assert sub.cursor.is_acked(Position(EXACT, 1))
    assert sub.backlog() == STORED - 3
    assert not sub._batches


def test_a_pending_delivery_gives_the_size() -> None:
    sub, consumer = subscription()
    deliver(sub, consumer, COARSE, 1, 2)  # a coarse ledger's entry: the delivery knows its size
    assert sub.ack_fields(consumer, -1, COARSE, 1, 2)
    assert sub._batches[(COARSE, 1)].size == 3
    # the same entry's other messages, no longer pending: the subscription's bitmap answers
    assert sub.ack_fields(consumer, -1, COARSE, 1, 0)
    assert sub.ack_fields(consumer, -1, COARSE, 1, 1)
    assert sub.cursor.is_acked(Position(COARSE, 1))


def test_an_entry_of_unknown_size_is_not_acknowledged_by_batch_index() -> None:
    sub, consumer = subscription()
    assert not sub.ack_fields(consumer, -1, COARSE, 1, 0)  # coarse, never read: size unknown
    assert not sub.ack_fields(consumer, -1, 99, 0, 0)  # no such ledger
    assert not sub.ack_fields(consumer, -1, EXACT, 3, 0)  # no such entry
    assert not sub.ack_fields(consumer, -1, EXACT, 0, 0)  # a message stored alone has no batch index
    assert not sub.ack_fields(consumer, 4, EXACT, 1, 0)  # another partition
    assert not sub._batches
    assert sub.backlog() == STORED


forged_ids = st.tuples(
    st.sampled_from([EXACT, COARSE, 12]),
    st.integers(-1, 4),
    st.one_of(st.integers(-(2**31), INT32_MAX), st.integers(-1, 6)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(forged_ids, max_size=40), st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), max_size=6)
)
def test_forged_ids_never_allocate_beyond_the_stored_entries_nor_break_the_backlog(
    acks: list[tuple[int, int, int]], delivered: list[tuple[int, int]]
) -> None:
    sub, consumer = subscription()
    for ledger_pick, entry_id in delivered:
        ledger_id = (EXACT, COARSE)[ledger_pick]
        for index in range(SIZES[ledger_id][entry_id]):
            deliver(sub, consumer, ledger_id, entry_id, index)
    acked: set[tuple[int, int, int]] = set()
    for ledger_id, entry_id, index in acks:
        if sub.ack_fields(consumer, -1, ledger_id, entry_id, index):
            assert ledger_id in SIZES
            assert 0 <= entry_id < 3
            size = SIZES[ledger_id][entry_id]
            assert index < size if index >= 0 else True
            assert index < 0 or (ledger_id, entry_id, index) not in acked  # a whole ack may be repeated
            acked.add((ledger_id, entry_id, index))
        for (ledger, entry), unacked in sub._batches.items():
            assert unacked.size == SIZES[ledger][entry]
    for position in cast("FakeLedger", sub.cursor.ml).firsts:  # every count exact, for the model's sake
        cast("FakeLedger", sub.cursor.ml).read(position)
    whole = {(lid, eid) for lid, eid, index in acked if index < 0}
    by_index = {(lid, eid, i) for lid, eid, i in acked if i >= 0 and (lid, eid) not in whole}
    expected = STORED - sum(SIZES[lid][eid] for lid, eid in whole) - len(by_index)
    assert sub.backlog() == expected


def test_a_message_acked_while_its_negative_ack_waits_is_not_delivered_again() -> None:
    """A client that received a message twice (an ack timeout redelivered it) may negatively acknowledge
    one copy and acknowledge the other. Once acknowledged, neither the waiting negative ack nor an ack
    timeout delivers it again (the topic simulation, ``tests/sim/sim_topic.py``, found the broker doing so
    after the acknowledgement was persisted)."""

    async def main() -> None:
        sub, consumer = subscription()
        pushed: list[tuple[int, int, int]] = []
        sink = consumer.sink
        sink.deliver = lambda delivery, partition, count: pushed.append(delivery.key)  # type: ignore[method-assign]
        consumer.flow.grant(100)
        for entry_id, index in ((0, -1), (1, 0), (1, 1)):
            deliver(sub, consumer, EXACT, entry_id, index)
        for key in ((EXACT, 0, -1), (EXACT, 1, 0)):
            sub.nack(consumer, MessageId(key[0], key[1], -1, key[2]))
            assert sub.ack_fields(consumer, -1, *key)  # the other copy's acknowledgement
        consumer.ack_timeout_s = 0.001  # (1, 1) stays pending past its ack timeout, then is acknowledged late
        sub.redeliver_due(consumer, 1e9)  # the negative acks are due, and (1, 1) timed out
        assert sub.ack_fields(consumer, -1, EXACT, 1, 1)
        pushed.clear()
        sub.dispatcher._dispatch_redeliveries()
        assert pushed == []

    trio.run(main)


def test_a_message_acked_while_its_negative_ack_waits_does_not_go_to_another_consumer() -> None:
    """The same, when the consumer holding the waiting negative ack leaves a Shared subscription: what it
    held goes back for redelivery to the others, except what was acknowledged."""

    async def main() -> None:
        sub, first = subscription()
        second = Consumer(
            name="d", priority_level=0, partition=-1, flow=FlowControl(0, pull_mode=True), sink=Sink()
        )
        sub.add_consumer(second, SubscriptionType.SHARED)
        pushed: list[tuple[int, int, int]] = []
        sink = second.sink
        sink.deliver = lambda delivery, partition, count: pushed.append(delivery.key)  # type: ignore[method-assign]
        second.flow.grant(100)
        deliver(sub, first, EXACT, 0, -1)
        deliver(sub, first, EXACT, 1, 0)
        for key in ((EXACT, 0, -1), (EXACT, 1, 0)):
            sub.nack(first, MessageId(key[0], key[1], -1, key[2]))
        assert sub.ack_fields(first, -1, EXACT, 0, -1)  # acknowledged through another copy
        sub.remove_consumer(first)
        sub.dispatcher._dispatch_redeliveries()
        assert pushed == [(EXACT, 1, 0)]  # the message not acknowledged, only

    trio.run(main)
