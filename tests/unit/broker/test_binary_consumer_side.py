"""The consumer side the binary protocol needs, below the wire: redelivery on request (only what the consumer
holds, counted and bounded), batch-index acknowledgements mapped through what was delivered (ack sets
refused when longer than the batch, unknown entries ignored), whole-entry dispatch and delivery runs that
stop only between entries, and the codec of SEEK and GET_LAST_MESSAGE_ID with forged ids."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from fixtures.subscription_fakes import EXACT, SIZES, subscription_of
from hypothesis import given
from hypothesis import strategies as st

import magnetar.broker.core.subscription as subscription_module
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, MsgKey
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.protocols.pulsar_binary.acks import DeliveredGroups, _unset_bits, apply_ack, apply_acks
from magnetar.broker.protocols.pulsar_binary.commands import AckId, CommandType, decode_command
from magnetar.broker.protocols.pulsar_binary.connection import ConsumerDeliveries, Outbound
from magnetar.broker.protocols.pulsar_binary.consumer_commands import (
    GetLastMessageId,
    Seek,
    encode_get_last_message_id,
    encode_get_last_message_id_response,
    encode_seek,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import ProtobufError, Writer, parse_message
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.managed_ledger.position import Position

MESSAGE = StoredMessage(b"x", "p", 0, 0)


def _push(sub: Subscription, consumer: Consumer, ledger_id: int, entry_id: int) -> list[MsgKey]:
    size = SIZES[ledger_id][entry_id]
    keys = []
    for index in range(size) if size > 1 else [-1]:
        delivery = Delivery(ledger_id, entry_id, index, size if size > 1 else 0, MESSAGE, 0)
        sub.push(consumer, delivery, 0.0)
        keys.append(delivery.key)
    return keys


def test_redeliver_takes_back_only_what_this_consumer_holds() -> None:
    sub, (first, second) = subscription_of(SubscriptionType.SHARED, 2)
    mine = _push(sub, first, EXACT, 1) + _push(sub, first, EXACT, 2)
    theirs = _push(sub, second, EXACT, 0)
    forged = [(2**63 - 1, 0), (-1, -1), (EXACT, 99), (EXACT, 0)]  # unknown, earliest, not stored, not mine
    assert sub.redeliver_unacked(first, forged) == 0
    assert set(first.pending) == set(mine)
    assert set(second.pending) == set(theirs)
    assert sub.redeliver_unacked(first, [(EXACT, 1)]) == 3
    assert set(first.pending) == set(mine[3:])
    assert sub.dispatcher.redelivery_count == 3
    assert [sub.redelivery_count(key) for key in mine[:3]] == [1, 1, 1]
    assert sub.redeliver_unacked(first, None) == 5  # all it holds
    assert not first.pending
    assert set(second.pending) == set(theirs)
    assert sub.redelivery_count(theirs[0]) == 0
    assert sub.redeliver_unacked(first, None) == 0


def test_redelivery_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subscription_module, "REDELIVERY_COUNTS_MAX", 4)
    sub, (consumer,) = subscription_of(SubscriptionType.SHARED, 1)
    keys = _push(sub, consumer, EXACT, 2)  # five messages
    assert sub.redeliver_unacked(consumer, None) == 5
    assert len(sub._redelivery_counts) == 4
    assert sub.redelivery_count(keys[0]) == 0  # the first counted is the first forgotten
    assert sub.redelivery_count(keys[4]) == 1


def test_whole_entries_go_to_one_consumer_past_its_permits() -> None:
    sub, consumers = subscription_of(SubscriptionType.SHARED, 2)
    for consumer in consumers:
        consumer.whole_entries = True
        consumer.flow.grant(1)
    ready = [Delivery(EXACT, 2, i, 5, MESSAGE, 0) for i in range(5)]
    ready += [Delivery(EXACT, 1, i, 3, MESSAGE, 0) for i in range(3)]
    sub.dispatcher._ready.extend(ready)

    async def dispatch() -> None:  # a round reads trio's clock once
        sub.dispatcher._dispatch_ready()

    trio.run(dispatch)
    first, second = consumers
    assert [k[:2] for k in first.pending] == [(EXACT, 2)] * 5
    assert [k[:2] for k in second.pending] == [(EXACT, 1)] * 3
    assert first.flow.available() < 0  # permits went negative, as Pulsar's do


def test_a_redelivered_entry_goes_whole_to_one_consumer() -> None:
    sub, consumers = subscription_of(SubscriptionType.SHARED, 2)
    for consumer in consumers:
        consumer.whole_entries = True
        consumer.flow.grant(1)
    sub.dispatcher.redeliver([Delivery(EXACT, 2, i, 5, MESSAGE, 0) for i in range(5)])

    async def dispatch() -> None:
        sub.dispatcher._dispatch_redeliveries()

    trio.run(dispatch)
    held = [[k[:2] for k in consumer.pending] for consumer in consumers]
    assert sorted(held) == [[], [(EXACT, 2)] * 5]
    assert sub.dispatcher.redelivery_count == 0


# -- acks ------------------------------------------------------------------------------------------------


class RecordingSubscriber:
    partition = -1

    def __init__(self, stored_sizes: dict[tuple[int, int], int] | None = None) -> None:
        self.groups: list[list[MsgKey]] = []
        self.fields: list[tuple[int, int, int]] = []
        self.ranges: list[tuple[MsgKey, MsgKey]] = []
        self.sizes = stored_sizes or {}

    def ack_group(self, keys: list[MsgKey]) -> int:
        self.groups.append(keys)
        return len(keys)

    def ack_fields(self, partition: int, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        self.fields.append((ledger_id, entry_id, batch_index))
        return True

    def ack_range(self, first: MsgKey, last: MsgKey) -> int:
        self.ranges.append((first, last))
        return 0

    def stored_batch_size(self, ledger_id: int, entry_id: int) -> int:
        return self.sizes.get((ledger_id, entry_id), 0)

    def is_stored(self, ledger_id: int, entry_id: int) -> bool:
        return 0 <= ledger_id < 100 and 0 <= entry_id < 100


def _ack(groups: DeliveredGroups, sub: RecordingSubscriber, mid: AckId, cumulative: bool = False) -> None:
    apply_ack(groups, sub, mid, cumulative=cumulative)  # type: ignore[arg-type]


def test_unset_bits_of_an_ack_set() -> None:
    assert _unset_bits((0b1010,), 4) == [0, 2]
    assert _unset_bits((), 3) == [0, 1, 2]
    assert _unset_bits((-1,), 64) == []
    assert _unset_bits((-1, 0), 65) == [64]
    assert _unset_bits((0, 0), 64) is None  # a word more than the batch needs
    assert _unset_bits((0,) * 2000, 5) is None


def test_batch_index_acks_map_through_the_delivered_group() -> None:
    groups = DeliveredGroups()
    groups.sent((3, 4), [2, 5, 7])  # the client numbers them 0, 1, 2
    sub = RecordingSubscriber()
    _ack(groups, sub, AckId(3, 4, -1, -1, (0b110,)))  # client index 0 acknowledged
    assert sub.groups == [[(3, 4, 2)]]
    assert groups.get((3, 4)) == [2, 5, 7]
    _ack(groups, sub, AckId(3, 4, -1, -1, (0, 0)))  # longer than the batch: refused
    assert len(sub.groups) == 1
    _ack(groups, sub, AckId(3, 4, -1, -1, (0,)))  # the rest
    assert sub.groups[-1] == [(3, 4, 2), (3, 4, 5), (3, 4, 7)]
    assert groups.get((3, 4)) is None


def test_entry_acks_and_unknown_entries() -> None:
    groups = DeliveredGroups()
    groups.sent((1, 1), [0, 1])
    sub = RecordingSubscriber(stored_sizes={(1, 2): 3})
    _ack(groups, sub, AckId(1, 1, -1, -1, ()))
    assert sub.groups == [[(1, 1, 0), (1, 1, 1)]]
    _ack(groups, sub, AckId(1, 9, -1, -1, ()))  # not delivered here: the core decides
    assert sub.fields == [(1, 9, -1)]
    _ack(groups, sub, AckId(1, 2, -1, -1, (0b001,)))  # stored batch of 3, not delivered here
    assert sub.groups[-1] == [(1, 2, 1), (1, 2, 2)]
    for forged in [AckId(-1, -1, -1, -1, (0,)), AckId(2**63 - 1, 0, -1, -1, (0,) * 1025)]:
        _ack(groups, sub, forged)  # not a stored batch: ignored
    assert len(sub.groups) == 2


def test_cumulative_ack_with_an_ack_set() -> None:
    groups = DeliveredGroups()
    groups.sent((1, 1), [0, 1])
    groups.sent((1, 2), [0, 1, 2])
    sub = RecordingSubscriber()
    _ack(groups, sub, AckId(1, 2, -1, -1, (0b100,)), cumulative=True)
    assert sub.ranges == [((0, 0, -1), (1, 2, -2))]
    assert sub.groups == [[(1, 2, 0), (1, 2, 1)]]
    assert groups.get((1, 1)) is None
    assert groups.get((1, 2)) == [0, 1, 2]
    for forged in [
        AckId(1, 2**63 - 1, -1, -1, ()),
        AckId(-1, -1, -1, -1, ()),
        AckId(-(2**63), 0, -1, -1, (0,)),
    ]:
        _ack(groups, sub, forged, cumulative=True)  # up to an entry that does not exist: ignored
    assert len(sub.ranges) == 1
    assert len(sub.groups) == 1


def test_the_ack_sets_of_one_ack_are_merged_per_entry() -> None:
    groups = DeliveredGroups()
    groups.sent((1, 1), list(range(4)))
    sub = RecordingSubscriber(stored_sizes={(1, 2): 65_535})
    same = [AckId(1, 2, -1, -1, (-2,)) for _ in range(5000)]  # one forged flood: one walk of the batch
    apply_acks(groups, sub, same, cumulative=False)  # type: ignore[arg-type]
    assert len(sub.groups) == 1  # bit 0 and every word left out (trailing zero words) acknowledged
    assert len(sub.groups[0]) == 1 + 65_535 - 64
    ids = [AckId(1, 1, -1, -1, (0b1110,)), AckId(1, 1, -1, -1, (0b1101,)), AckId(1, 9, -1, -1, ())]
    apply_acks(groups, sub, ids, cumulative=False)  # type: ignore[arg-type]
    assert sub.fields == [(1, 9, -1)]
    assert sub.groups[-1] == [(1, 1, 0), (1, 1, 1)]  # acknowledged by either


# -- delivery runs -----------------------------------------------------------------------------------------


def test_a_delivery_run_stops_at_the_byte_bound_only_between_entries() -> None:
    outbound = Outbound(bytes_max=1)
    sink = ConsumerDeliveries(1, outbound)
    run = [Delivery(1, 1, i, 3, MESSAGE, 0) for i in range(3)] + [
        Delivery(1, 2, i, 2, MESSAGE, 0) for i in range(2)
    ]
    # entry 1 fills the bound when entry 2's first message closes its MESSAGE; entry 2 then goes whole
    assert sink.deliver_many(run, -1, None) == 5
    sink.flush()
    assert len(sink.delivered) == 2
    more = [Delivery(1, 3, i, 2, MESSAGE, 0) for i in range(2)] + [Delivery(1, 4, 0, 2, MESSAGE, 0)]
    assert sink.deliver_many(more, -1, None) == 2  # the queue is full: it stops after entry 3


# -- codec -------------------------------------------------------------------------------------------------


def test_seek_and_last_message_id_commands() -> None:
    seek = decode_command(encode_seek(3, 9, message_id=(-1, -1)))
    assert seek == Seek(3, 9, (-1, -1), None)
    forged = decode_command(encode_seek(3, 9, message_id=(2**63, 2**64 - 2)))
    assert forged == Seek(3, 9, (-(2**63), -2), None)
    by_time = decode_command(encode_seek(3, 10, publish_time_ms=2**64 - 1))
    assert by_time == Seek(3, 10, None, 2**63 - 1)
    assert decode_command(encode_get_last_message_id(3, 11)) == GetLastMessageId(3, 11)
    with pytest.raises(ProtobufError):
        decode_command(
            Writer().uint(1, CommandType.SEEK).data(CommandType.SEEK, Writer().uint(1, 3).bytes()).bytes()
        )
    response = parse_message(encode_get_last_message_id_response(11, (7, -1), 2, -1, (7, -1)), "BaseCommand")
    body = response.required_message(CommandType.GET_LAST_MESSAGE_ID_RESPONSE, "Response")
    last = body.required_message(1, "MessageIdData")
    assert (last.int64(1), last.int64(2), last.int32(3), last.has(4)) == (7, -1, 2, False)
    assert body.uint(2) == 11
    assert body.required_message(3, "MessageIdData").int64(2) == -1


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2**64 - 1)), max_size=8))
def test_seek_decoding_gives_signed_ids_or_a_protobuf_error(fields: Sequence[tuple[int, int]]) -> None:
    w = Writer()
    for number, value in fields:
        if number == 3:
            w.data(3, Writer().uint(1, value).uint(2, value).bytes())
        else:
            w.uint(number, value)
    try:
        command = decode_command(Writer().uint(1, CommandType.SEEK).data(CommandType.SEEK, w.bytes()).bytes())
    except ProtobufError:
        return  # a missing or out-of-range consumer or request id
    assert isinstance(command, Seek)
    assert 0 <= command.consumer_id < 2**63
    assert 0 <= command.request_id < 2**63
    if command.message_id is not None:
        assert all(-(2**63) <= value < 2**63 for value in command.message_id)
    if command.publish_time_ms is not None:
        assert 0 <= command.publish_time_ms < 2**63


def test_a_closed_consumer_leaves_nothing_on_its_connection() -> None:
    outbound = Outbound()
    sinks = [ConsumerDeliveries(n, outbound) for n in range(100)]
    sinks[0].deliver(Delivery(1, 1, 0, 2, MESSAGE, 0), -1, 0)  # an open batch MESSAGE, not sent yet
    for sink in sinks:
        sink.close()
    assert not outbound._before_write
    assert not outbound._room_listeners
    sinks[0].flush()
    assert outbound.bytes == 0  # what was open went back to the subscription, not to the client


def test_a_seek_resets_the_cursor_and_disconnects_every_consumer() -> None:
    sub, consumers = subscription_of(SubscriptionType.SHARED, 2)
    told: list[str] = []
    for consumer in consumers:
        consumer.disconnect = told.append
    _push(sub, consumers[0], EXACT, 1)
    assert sub.redeliver_unacked(consumers[0], None) == 3
    sub.seek(Position(EXACT, 2))
    assert told == ["the subscription was reset"] * 2
    assert not consumers[0].pending
    assert sub.dispatcher.redelivery_count == 0  # what waited for redelivery is before the new position
    assert sub.redelivery_count((EXACT, 1, 0)) == 0
    assert sub.cursor.read_position == Position(EXACT, 2)
    assert sub.sought  # a non-durable subscription would stay for its clients' return
    sub.remove_consumer(consumers[0])  # its client went, and comes back
    sub.add_consumer(consumers[0], SubscriptionType.SHARED)
    assert not sub.sought
