"""The delivery fast path: a run of messages pushed to one consumer in one call, and acks applied a group at
a time - each with the outcome the one-at-a-time path gives, forged and repeated ids included.

* ``Subscription.ack_group`` against ``ack_fields`` key by key on twin subscriptions (real cursor and message
  index, entries of 1, 3 and 5 messages, one ledger coarse as after a reopen): the answers, the backlog, the
  batch bitmaps, the cursor's positions, what stays pending and the window;
* ``Consumer.push_many`` and the JSON sink's ``deliver_many``: the frames are byte for byte those of one
  ``push`` each, the run stops after the message that fills the queue's bytes, the ids are remembered;
* ``plain_acks``: the run of plain acks at the head of a group, and where it stops.
"""

from __future__ import annotations

from typing import cast

from fixtures.subscription_fakes import COARSE, EXACT, SIZES, FakeLedger, subscription_of
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.protocols.magnetar_v1.producer import BinaryFrames
from magnetar.broker.protocols.pulsar_ws.messages import plain_acks
from magnetar.broker.protocols.pulsar_ws.session_io import JsonFrames
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.message_id import (
    MessageId,
    delivered_id_fields,
    delivered_message_id,
    delivered_message_ids,
)
from magnetar.managed_ledger.position import Position

INT32_MAX = 2**31 - 1


def _subscription(sub_type: SubscriptionType, consumers: int) -> tuple[Subscription, list[Consumer]]:
    return subscription_of(sub_type, consumers, window=1000)


def _deliver_entry(sub: Subscription, consumer: Consumer, ledger_id: int, entry_id: int) -> None:
    size = SIZES[ledger_id][entry_id]
    cast("FakeLedger", sub.cursor.ml).read(Position(ledger_id, entry_id))
    message = StoredMessage(b"x" * 7, "p", 0, 0)
    if size == 1:
        sub.push(consumer, Delivery(ledger_id, entry_id, -1, 0, message), 0.0)
        return
    run = [Delivery(ledger_id, entry_id, index, size, message) for index in range(size)]
    assert sub.push_many(consumer, run, 0.0) == size


def _state(sub: Subscription, consumers: list[Consumer]) -> object:
    return (
        sub.backlog(),
        sub.cursor.mark_delete,
        sub.cursor.acked_ranges,
        {key: (bits.size, [i for i in range(bits.size) if i in bits]) for key, bits in sub._batches.items()},
        [(list(c.pending), c.pending_bytes, c.flow.outstanding) for c in consumers],
        sub.last_ack_ms,
    )  # fmt: skip


keys = st.tuples(
    st.sampled_from([EXACT, COARSE, 12, 2**63 - 1]),
    st.integers(-1, 4),
    st.one_of(st.integers(-(2**31), INT32_MAX), st.integers(-1, 6), st.just(2**63)),
)
entries = st.lists(st.tuples(st.sampled_from([EXACT, COARSE]), st.integers(0, 2)), max_size=6, unique=True)


runs = st.tuples(
    st.sampled_from([EXACT, COARSE]), st.integers(0, 2), st.lists(st.integers(-1, 5), max_size=6)
).map(lambda run: [(run[0], run[1], index) for index in run[2]])
"""Acks of one entry in a row, as a client acknowledges the messages of a batch it received."""


@settings(max_examples=500, deadline=None)
@given(
    acks=st.lists(st.one_of(keys.map(lambda key: [key]), runs), max_size=12).map(
        lambda parts: [key for part in parts for key in part]
    ),
    delivered=st.lists(st.tuples(st.integers(0, 1), entries), max_size=2),
    sub_type=st.sampled_from(
        [SubscriptionType.EXCLUSIVE, SubscriptionType.SHARED, SubscriptionType.KEY_SHARED]
    ),
    split=st.integers(0, 40),
)
def test_a_group_of_acks_has_the_outcome_of_the_acks_one_by_one(
    acks: list[tuple[int, int, int]],
    delivered: list[tuple[int, list[tuple[int, int]]]],
    sub_type: SubscriptionType,
    split: int,
) -> None:
    consumers = 1 if sub_type is SubscriptionType.EXCLUSIVE else 2
    one, one_consumers = _subscription(sub_type, consumers)
    group, group_consumers = _subscription(sub_type, consumers)
    for sub, made in ((one, one_consumers), (group, group_consumers)):
        for consumer_pick, picked in delivered:
            for ledger_id, entry_id in picked:
                _deliver_entry(sub, made[consumer_pick % consumers], ledger_id, entry_id)
    assert _state(one, one_consumers) == _state(group, group_consumers)
    acking, group_acking = one_consumers[0], group_consumers[0]
    applied = sum(one.ack_fields(acking, -1, *key) for key in acks)
    # two groups, cut anywhere: what one group leaves, the next one sees
    cut = min(split, len(acks))
    assert (
        group.ack_group(group_acking, -1, acks[:cut]) + group.ack_group(group_acking, -1, acks[cut:])
        == applied
    )
    assert _state(one, one_consumers) == _state(group, group_consumers)


def test_a_group_of_another_partition_is_ignored() -> None:
    sub, (consumer,) = _subscription(SubscriptionType.EXCLUSIVE, 1)
    _deliver_entry(sub, consumer, EXACT, 2)
    before = _state(sub, [consumer])
    assert sub.ack_group(consumer, 3, [(EXACT, 2, i) for i in range(5)]) == 0
    assert _state(sub, [consumer]) == before


def test_a_group_that_acks_a_whole_batch_entry_acknowledges_it_once() -> None:
    sub, (consumer,) = _subscription(SubscriptionType.EXCLUSIVE, 1)
    _deliver_entry(sub, consumer, EXACT, 2)
    assert consumer.flow.outstanding == 5
    assert sub.ack_group(consumer, -1, [(EXACT, 2, i) for i in (4, 0, 3)]) == 3
    assert len(sub._batches[(EXACT, 2)]) == 2
    assert sub.ack_group(consumer, -1, [(EXACT, 2, i) for i in (1, 1, 2, 2, 5)]) == 2  # repeats ignored
    assert not sub._batches
    assert sub.cursor.is_acked(Position(EXACT, 2))
    assert not consumer.pending
    assert consumer.flow.outstanding == 0


def _message(payload: bytes, key: str | None = None, props: dict[str, str] | None = None) -> StoredMessage:
    if props is None:
        return StoredMessage(payload, "p", 0, 1_700_000_000_123, 0, key)
    return StoredMessage(payload, "p", 0, 1_700_000_000_123 + len(payload), 5, key, props)


def test_a_rendered_run_is_what_one_push_each_renders_and_stops_at_the_byte_bound() -> None:
    run = [
        Delivery(7, 3, index, 6, message)
        for index, message in enumerate(
            [
                _message(b"a"),
                _message(b"bb", key="k\u202e"),
                _message(b"ccc", props={"x": "\x00y"}),
                _message(b"\xff" * 40),
                _message(b""),
                _message(b"d" * 5000),
            ]
        )
    ]
    counts = [0, 1, 2, 3, 4, 5]
    singly = JsonFrames()
    for delivery, count in zip(run, counts, strict=True):
        singly.deliver(delivery, 2, count)
    at_once = JsonFrames()
    assert at_once.deliver_many(run, 2, counts) == len(run)
    assert list(at_once._frames) == list(singly._frames)
    assert (at_once.bytes, at_once.messages) == (singly.bytes, singly.messages)
    for delivery in run:
        text = MessageId(7, 3, 2, delivery.batch_index, 6).to_base64()
        assert delivered_id_fields(text) == (7, 3, 2, delivery.batch_index, 6)
    # a queue with room for two frames' bytes takes the frame that crosses the bound, and no more
    bounded = JsonFrames(bytes_max=len(singly._frames[0]) + 1)
    assert bounded.deliver_many(run, 2, None) == 2
    assert bounded.messages == 2


_BINARY_RUN = [
    _message(b"a"),
    _message(b"bb", key="k\u202e"),
    _message(b"ccc", props={"x": "\x00y"}),
    StoredMessage(b"\xff" * 40, "p", 0, 1, 2**63 - 1),
    _message(b""),
    _message(b"d" * 5000),
    _message(b"e" * 3),
]


@settings(max_examples=300, deadline=None)
@given(
    frame_max=st.integers(1, 6000),
    bytes_max=st.integers(1, 12_000),
    counts=st.one_of(st.none(), st.lists(st.integers(0, 2**32 - 1), min_size=7, max_size=7)),
    queued=st.integers(0, 3),
)
def test_a_binary_run_is_what_one_record_each_renders(
    frame_max: int, bytes_max: int, counts: list[int] | None, queued: int
) -> None:
    """The ``magnetar.v1`` sink's run: the same MESSAGES frames, cut at the same records, the same bytes and
    messages counted, the run stopping after the record that fills the queue, earlier records kept."""
    run = [Delivery(7, 3, index, 7, message) for index, message in enumerate(_BINARY_RUN)]
    singly = BinaryFrames(records_frame_bytes_max=frame_max, bytes_max=bytes_max)
    at_once = BinaryFrames(records_frame_bytes_max=frame_max, bytes_max=bytes_max)
    for sink in (singly, at_once):
        for index in range(queued):
            sink.deliver(Delivery(1, index, -1, 0, _message(b"q")), 2, 0)
    taken = 0
    for delivery in run:
        singly.deliver(delivery, 2, counts[taken] if counts is not None else 0)
        taken += 1
        if singly.bytes >= singly.bytes_max:
            break
    assert at_once.deliver_many(run, 2, counts) == taken
    for sink in (singly, at_once):
        sink._close_records()
    assert list(at_once._frames) == list(singly._frames)
    assert (at_once.bytes, at_once.messages) == (singly.bytes, singly.messages)


def test_push_many_tracks_what_the_sink_took() -> None:
    frames = JsonFrames(bytes_max=10)  # the first frame fills it
    consumer = Consumer(
        name="c", priority_level=0, partition=-1, flow=FlowControl(10, pull_mode=False), sink=frames
    )
    run = [Delivery(1, 1, index, 3, _message(b"abc")) for index in range(3)]
    assert consumer.push_many(run, None, 5.0) == 1
    assert list(consumer.pending) == [(1, 1, 0)]
    assert (consumer.pending_bytes, consumer.flow.outstanding, consumer.msg_out_counter) == (3, 1, 1)
    assert run[0].sent_at == 5.0
    assert consumer.pending_in_order


def test_ids_of_a_run_are_those_of_one_id_each() -> None:
    positions = [
        (0, 0, -1, 0), (3, 9, 0, 1), (3, 9, 16_383, 16_384), (3, 9, 16_384, 70_000), (2**63 - 1, 2**40, 5, 6),
        (3, 9, -1, -1), (3, 10, 1, 0),
    ]  # fmt: skip
    for partition in (-1, 0, 7, 2**31 - 1):
        run = [
            Delivery(ledger, entry, index, size, _message(b"")) for ledger, entry, index, size in positions
        ]
        expected = [
            delivered_message_id(ledger, entry, partition, index, size)
            for ledger, entry, index, size in positions
        ]
        assert delivered_message_ids(run, partition) == expected
        for text, (ledger, entry, index, size) in zip(expected, positions, strict=True):
            assert MessageId.from_base64(text.decode()) == MessageId(
                ledger, entry, partition, index, max(size, 0)
            )


def test_plain_acks_are_the_run_at_the_head_of_a_group() -> None:
    ids = [delivered_message_id(4, 2, -1, index, 3).decode() for index in range(3)]
    group: list[str | bytes] = [
        f'{{"messageId":"{ids[0]}"}}',
        f'{{"messageId":"{ids[1]}"}}',
        f'{{"type":"negativeAcknowledge","messageId":"{ids[2]}"}}',
        f'{{"messageId":"{ids[2]}"}}',
        '{"messageId":"CAEQAQ=="}',  # an id this broker did not deliver: the full parser's
        f'{{"messageId":"{ids[0]}"}}',
        f'{{"messageId":"{ids[0]}"}}'.encode(),  # a binary frame
        f'{{"messageId":"{ids[0]}"}} ',
        "",
    ]
    assert plain_acks(group, 0) == ([(4, 2, -1, 0, 3), (4, 2, -1, 1, 3)], 2)
    assert plain_acks(group, 2) == ([], 2)
    assert plain_acks(group, 3) == ([(4, 2, -1, 2, 3)], 4)
    assert plain_acks(group, 5) == ([(4, 2, -1, 0, 3)], 6)
    for start in (6, 7, 8):
        assert plain_acks(group, start) == ([], start)
    assert plain_acks(group, 9) == ([], 9)
