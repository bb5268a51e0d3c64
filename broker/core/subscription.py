"""A subscription: a cursor on a topic, its consumers, acknowledgements and redelivery bookkeeping.

Message ids. Every message is addressed by ``(ledgerId, entryId, batchIndex)`` in its topic (partition), as in
Pulsar; a message stored alone has batch index -1, message ``i`` of a broker-made batch entry has index ``i``
and carries the batch size in its id. An entry is acknowledged in the cursor once every message in it is
acknowledged: the subscription keeps, for each partly acknowledged batch entry, the indexes still
unacknowledged (:mod:`.batch_acks`, one bit per message), and a redelivered batch entry delivers only those
(Pulsar's batch-index acknowledgement).

Batch sizes come from what the broker stored, never from the client: the batch size inside an acknowledged
id is not read. An ack of one message of a batch entry takes the entry's size from the delivery it
acknowledges (pending at one of the subscription's consumers) or, for a message delivered before (to a
session that is gone), from the entry's message count in the managed ledger's message index; where that
count is not known exactly (an entry of a coarse ledger not read since the topic was opened) or is one (a
message stored alone has no batch index; an entry written before entries carried their count counts one)
the ack is ignored and the message is delivered again, as an unknown id would be. Pulsar's broker does the
same: it takes a batch size from its pending acks, never from the id.

Acks (Magnetar's decision, close to Pulsar's broker): an ack is applied when its id names a message stored in
this topic/partition - whichever consumer of the subscription it was delivered to, so a client that
reconnected can still acknowledge what it received before. Ids of another partition, of entries that do not
exist (never written, or trimmed), batch indexes outside the batch and repeated acks are ignored, as Pulsar
ignores unknown ids; they never acknowledge anything else and never close the session.

Ack groups. The acks a client sent together (one read of its socket) may be applied as one group
(:meth:`Subscription.ack_group`): consecutive acks of one batch entry take their pending messages and give
back the window once, update the entry's bitmap and the cursor's count of its unacked messages once, and
build one ``Position``; every key still gets the outcome :meth:`Subscription.ack_fields` would give it
alone, in the order sent (a property test holds the two paths to that).

``redeliveryCount`` counts how many times the subscription handed a message out again - negative acks, ack
timeouts and redeliveries a client asked for (:meth:`Subscription.redeliver_unacked`) - as Pulsar's redelivery
tracker does, per subscription and protocol-neutral (every adapter reports it in its own terms). It is
bounded: at most :data:`REDELIVERY_COUNTS_MAX` messages are counted (the longest-uncounted forgotten first)
and a count stops at :data:`REDELIVERY_COUNT_MAX`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.batch_acks import UnackedIndexes
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, MsgKey
from magnetar.broker.core.dispatcher import Dispatcher, SubscriptionType
from magnetar.broker.core.key_hash import sticky_key_slot
from magnetar.broker.core.rates import Rate
from magnetar.broker.wire import CorruptEntryError, MessageId, decode_entry
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_state import InvalidAckError
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)

BATCH_INDEX_AFTER_ALL = 2**31
"""A batch index above every real one: "after every message of this entry"."""
REDELIVERY_COUNTS_MAX = 100_000
"""Messages whose redelivery count a subscription keeps."""
REDELIVERY_COUNT_MAX = 2**31 - 1
"""A redelivery count stops here (Pulsar's is an ``int``)."""


class Subscription:
    def __init__(
        self,
        topic_name: str,
        name: str,
        cursor: ManagedCursor,
        *,
        partition: int,
        clock: Clock,
        durable: bool,
        read_entries_max: int,
        redelivery_max: int,
        delayed_max: int = 1_000_000,
        start_after: MsgKey | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.cursor = cursor
        self.partition = partition
        self._clock = clock
        self.durable = durable
        self.dispatcher = Dispatcher(
            self,
            partition=partition,
            read_entries_max=read_entries_max,
            redelivery_max=redelivery_max,
            time_ms=clock.time_ms,
            delayed_max=delayed_max,
        )
        self._start_after = start_after
        """Reader started at a message id: skip messages up to and including it."""
        self._batches: dict[tuple[int, int], UnackedIndexes] = {}
        self._redelivery_counts: dict[MsgKey, int] = {}
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_redeliver_counter = 0
        self.rate_out = Rate()
        self.rate_redeliver = Rate()
        self.last_ack_ms = 0
        self.last_consumed_ms = 0
        self.sought = False
        """A client's seek disconnected the consumers: a non-durable subscription stays, without consumers,
        until one subscribes again (Pulsar keeps it too: its clients come back without a start position)."""

    def update_rates(self, period_s: float) -> None:
        """End of a stats period (:mod:`.rates`): this subscription's and its consumers' rates."""
        self.rate_out.update(self.msg_out_counter, self.bytes_out_counter, period_s)
        self.rate_redeliver.update(self.msg_redeliver_counter, 0, period_s)
        for consumer in self.dispatcher.consumers:
            consumer.rate_out.update(consumer.msg_out_counter, consumer.bytes_out_counter, period_s)

    # -- consumers ----------------------------------------------------------------------------

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers

    @property
    def type(self) -> SubscriptionType | None:
        return self.dispatcher.type

    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        self.dispatcher.add_consumer(consumer, sub_type)
        self.sought = False

    def remove_consumer(self, consumer: Consumer) -> None:
        self.dispatcher.remove_consumer(consumer)

    # -- delivery -----------------------------------------------------------------------------

    def deliveries_of(self, entry: Entry) -> list[Delivery]:
        """The messages of ``entry`` still to deliver (acknowledged ones skipped)."""
        position = entry.position
        if self.cursor.is_acked(position):
            return []
        try:
            decoded = decode_entry(entry.data)
        except CorruptEntryError as exc:
            log.error(
                "topic %s: entry %s is not a message entry (%s); skipped", self.topic_name, position, exc
            )
            return []
        ledger_id, entry_id = position.ledger_id, position.entry_id
        if decoded.deliver_at_ms and self.dispatcher.hold(decoded.deliver_at_ms, ledger_id, entry_id):
            return []  # delayed: tracked, re-read once due
        key_shared = self.dispatcher.type is SubscriptionType.KEY_SHARED
        out: list[Delivery] = []
        if not decoded.batched:
            message = decoded.messages[0]
            slot = sticky_key_slot(message.key) if key_shared else 0
            out.append(Delivery(ledger_id, entry_id, -1, 0, message, slot))
        else:
            size = len(decoded.messages)
            unacked = self._batches.get((ledger_id, entry_id))
            skipped = self.cursor.prefix_acked(position)  # acknowledged by a skip that ended in this entry
            if unacked is None and not skipped and not key_shared:  # the usual entry: every message
                out = [
                    Delivery(ledger_id, entry_id, index, size, message)
                    for index, message in enumerate(decoded.messages)
                ]
            else:
                for index, message in enumerate(decoded.messages):
                    if (unacked is not None and index not in unacked) or index < skipped:
                        continue
                    slot = sticky_key_slot(message.key) if key_shared else 0
                    out.append(Delivery(ledger_id, entry_id, index, size, message, slot))
        if decoded.deliver_at_ms:  # due, or delivered at once (not Shared, delays off): the time goes along
            for delivery in out:
                delivery.deliver_at_ms = decoded.deliver_at_ms
        if self._start_after is not None:
            start = self._start_after
            out = [d for d in out if d.key > start]
            if out:
                self._start_after = None
        return out

    async def read_positions(self, positions: list[tuple[int, int]]) -> list[Entry]:
        """The stored entries at ``positions`` (sorted; due delayed entries), read again: a run of
        consecutive entries of one ledger in one read; a position no longer stored is skipped."""
        ml = self.cursor.ml
        wanted = set(positions)
        out: list[Entry] = []
        index = 0
        while index < len(positions):
            ledger_id, first = positions[index]
            end = index + 1
            while end < len(positions) and positions[end] == (ledger_id, first + end - index):
                end += 1
            for entry in await ml.read_entries(Position(ledger_id, first), end - index):
                if (entry.position.ledger_id, entry.position.entry_id) in wanted:
                    out.append(entry)
            index = end
        return out

    def push(self, consumer: Consumer, delivery: Delivery, now: float) -> None:
        count = self._redelivery_counts.get(delivery.key, 0) if self._redelivery_counts else 0
        consumer.push(delivery, count, now)
        self.msg_out_counter += 1
        self.bytes_out_counter += len(delivery.message.payload)

    def push_many(self, consumer: Consumer, deliveries: list[Delivery], now: float) -> int:
        """:meth:`push` a run of messages to one consumer at once; returns how many it took (the first
        ones: the sink stops at its byte bound)."""
        counts = self._redelivery_counts
        redelivery_counts = [counts.get(d.key, 0) for d in deliveries] if counts else None
        out_bytes = consumer.bytes_out_counter
        taken = consumer.push_many(deliveries, redelivery_counts, now)
        self.msg_out_counter += taken
        self.bytes_out_counter += consumer.bytes_out_counter - out_bytes
        return taken

    # -- acknowledgements -----------------------------------------------------------------------

    def _take_pending(self, consumer: Consumer, key: MsgKey) -> Delivery | None:
        delivery = consumer.take_pending(key)
        if delivery is None:
            return self._take_pending_elsewhere(consumer, key)
        self.dispatcher.on_released(consumer, delivery)
        return delivery

    def _take_pending_elsewhere(self, consumer: Consumer, key: MsgKey) -> Delivery | None:
        """``key`` pending at another consumer of the subscription (delivered to a session that is gone)."""
        for other in self.dispatcher.consumers:
            if other is not consumer:
                delivery = other.take_pending(key)
                if delivery is not None:
                    self.dispatcher.on_released(other, delivery)
                    return delivery
        return None

    def _stored(self, ledger_id: int, entry_id: int) -> bool:
        info = self.cursor.ml.ledgers.get(ledger_id)
        return info is not None and 0 <= entry_id < info.entries

    def _stored_batch_size(self, position: Position) -> int:
        """How many messages the stored batch entry at ``position`` holds, from the message index; 0 when the
        index does not know it exactly (see the module docstring) or counts one message: an entry stored
        alone (batch index -1), or written before entries carried their message count."""
        count = self.cursor.ml.message_index.known_messages_in(position) or 0
        return count if count > 1 else 0

    def ack(self, consumer: Consumer, message_id: MessageId) -> bool:
        """Acknowledge one message (see the module docstring); False when the id was ignored."""
        m = message_id
        return self.ack_fields(consumer, m.partition, m.ledger_id, m.entry_id, m.batch_index)

    def ack_range(self, consumer: Consumer, first: MsgKey, last: MsgKey) -> int:
        """Acknowledge every message pending at ``consumer`` whose position is in ``[first, last]`` (the
        binary protocol's ACK_RANGE); returns how many were acknowledged. Done per entry: a batch entry
        whose messages are all acknowledged at once costs one cursor ack, not one per message."""
        pending = consumer.pending
        if consumer.pending_in_order:  # the usual case: stop at the first key past the range
            keys = []
            for key in pending:
                if key > last:
                    break
                if key >= first:
                    keys.append(key)
        else:
            keys = [key for key in pending if first <= key <= last]
        if not keys:
            return 0
        dispatcher = self.dispatcher
        entries: dict[tuple[int, int], list[int]] = {}
        sizes: dict[tuple[int, int], int] = {}
        for key in keys:
            delivery = consumer.take_pending(key)
            assert delivery is not None
            dispatcher.on_released(consumer, delivery)
            entry_key = (key[0], key[1])
            indexes = entries.get(entry_key)
            if indexes is None:
                entries[entry_key] = [key[2]]
                sizes[entry_key] = delivery.batch_size
            else:
                indexes.append(key[2])
        acked = 0
        for (ledger_id, entry_id), indexes in entries.items():
            acked += self._ack_entry(ledger_id, entry_id, indexes, sizes[(ledger_id, entry_id)])
        return acked

    def _ack_entry(self, ledger_id: int, entry_id: int, indexes: list[int], batch_size: int) -> int:
        """Acknowledge messages ``indexes`` (batch indexes, or ``[-1]``) of one entry that were pending."""
        if not self._stored(ledger_id, entry_id):
            return 0
        if self._redelivery_counts or self.dispatcher.redelivery_count:
            for index in indexes:
                key = (ledger_id, entry_id, index)
                self._redelivery_counts.pop(key, None)
                self.dispatcher.forget(key)
        position = Position(ledger_id, entry_id)
        acked = len(indexes)
        if indexes[0] >= 0:
            entry_key = (ledger_id, entry_id)
            unacked = self._batches.get(entry_key)
            if unacked is None:
                if self.cursor.is_acked(position):
                    return 0
                unacked = UnackedIndexes(batch_size, self.cursor.prefix_acked(position))
            acked = unacked.discard_all(indexes)
            if unacked:
                self._batches[entry_key] = unacked
                self.cursor.note_batch_unacked(position, len(unacked))
                return acked
            self._batches.pop(entry_key, None)
        try:
            self.cursor.ack(position)
        except InvalidAckError:
            return 0
        self.last_ack_ms = self._clock.time_ms()
        return acked

    def ack_fields(
        self,
        consumer: Consumer,
        partition: int,
        ledger_id: int,
        entry_id: int,
        batch_index: int,
    ) -> bool:
        """:meth:`ack` given the id's fields (its batch size is not among them: see the module docstring)."""
        if partition != consumer.partition or not self._stored(ledger_id, entry_id):
            return False
        key = (ledger_id, entry_id, batch_index)
        delivery = self._take_pending(consumer, key)
        self.dispatcher.forget(key)
        if batch_index >= 0:  # most acks of a batch entry leave messages unacked: no Position for those
            entry_key = (ledger_id, entry_id)
            unacked = self._batches.get(entry_key)
            if unacked is None:
                position = Position(ledger_id, entry_id)
                size = delivery.batch_size if delivery is not None else self._stored_batch_size(position)
                if not 0 <= batch_index < size or self.cursor.is_acked(position):
                    return False
                unacked = UnackedIndexes(size, self.cursor.prefix_acked(position))
                if not unacked.discard(batch_index):
                    return False
                self._batches[entry_key] = unacked
            elif not unacked.discard(batch_index):
                return False
            self._redelivery_counts.pop(key, None)
            if unacked:
                self.cursor.note_batch_unacked(Position(ledger_id, entry_id), len(unacked))
                return True
            del self._batches[entry_key]
        elif self._batches:  # the whole entry: no batch index of it stays unacknowledged
            self._batches.pop((ledger_id, entry_id), None)
        self._redelivery_counts.pop(key, None)
        try:
            self.cursor.ack(Position(ledger_id, entry_id))
        except InvalidAckError:
            return False
        self.last_ack_ms = self._clock.time_ms()
        return True

    def ack_group(self, consumer: Consumer, partition: int, keys: list[MsgKey]) -> int:
        """:meth:`ack_fields` of each key in order (a group of acks the client sent together); returns how
        many were applied. The acks of consecutive messages of one batch entry are applied as one: the
        pending messages taken and the window released once, the entry's bitmap and the cursor's count of
        its unacked messages updated once, the cursor acknowledged once when the last of them is."""
        if partition != consumer.partition:
            return 0
        acked = 0
        start = 0
        count = len(keys)
        while start < count:
            ledger_id, entry_id, _ = keys[start]
            end = start + 1
            while end < count and keys[end][1] == entry_id and keys[end][0] == ledger_id:
                end += 1
            run = keys[start:end] if end - start < count else keys
            if len(run) == 1 or min(key[2] for key in run) < 0:
                for key in run:
                    acked += self.ack_fields(consumer, partition, key[0], key[1], key[2])
            else:
                acked += self._ack_batch_run(consumer, ledger_id, entry_id, run)
            start = end
        return acked

    def _ack_batch_run(self, consumer: Consumer, ledger_id: int, entry_id: int, keys: list[MsgKey]) -> int:
        """:meth:`ack_fields` of batch indexes ``keys`` (each >= 0) of one entry, with the same outcome for
        each key, in one pass."""
        if not self._stored(ledger_id, entry_id):
            return 0
        dispatcher = self.dispatcher
        taken = consumer.take_pending_many(keys)
        if dispatcher.consumers != [consumer] or dispatcher.type is SubscriptionType.KEY_SHARED:
            for i, delivery in enumerate(taken):
                if delivery is None:
                    taken[i] = self._take_pending_elsewhere(consumer, keys[i])
                else:
                    dispatcher.on_released(consumer, delivery)
        if dispatcher.redelivery_count:
            for key in keys:
                dispatcher.forget(key)
        entry_key = (ledger_id, entry_id)
        unacked = self._batches.get(entry_key)
        position = Position(ledger_id, entry_id)
        counts = self._redelivery_counts
        stored_size = -1
        acked = 0
        for key, delivery in zip(keys, taken, strict=True):
            index = key[2]
            if unacked is None:
                if delivery is not None:
                    size = delivery.batch_size
                else:
                    if stored_size < 0:
                        stored_size = self._stored_batch_size(position)
                    size = stored_size
                if not 0 <= index < size or self.cursor.is_acked(position):
                    continue
                unacked = UnackedIndexes(size, self.cursor.prefix_acked(position))
                if not unacked.discard(index):
                    unacked = None
                    continue
            elif not unacked.discard(index):
                continue
            acked += 1
            if counts:
                counts.pop(key, None)
        if unacked is None:
            return acked
        if unacked:
            self._batches[entry_key] = unacked
            self.cursor.note_batch_unacked(position, len(unacked))
            return acked
        self._batches.pop(entry_key, None)
        try:
            self.cursor.ack(position)
        except InvalidAckError:
            return acked - 1
        self.last_ack_ms = self._clock.time_ms()
        return acked

    def nack(self, consumer: Consumer, message_id: MessageId) -> None:
        """Negative ack: redeliver after the consumer's ``negativeAckRedeliveryDelay``."""
        if message_id.partition != consumer.partition:
            return
        key = (message_id.ledger_id, message_id.entry_id, message_id.batch_index)
        delivery = self._take_pending(consumer, key)
        if delivery is not None:
            consumer.schedule_nack(delivery)

    def redeliver_due(self, consumer: Consumer, now: float) -> None:
        """Move the consumer's due negative acks and ack timeouts to the redelivery set."""
        nacked, timed_out = consumer.due_redeliveries(now)
        for delivery in timed_out:
            self.dispatcher.on_released(consumer, delivery)
        due = [delivery for delivery in nacked + timed_out if not self.acked(delivery)]
        self._redeliver(due)

    def redeliver_unacked(self, consumer: Consumer, entries: Collection[tuple[int, int]] | None) -> int:
        """The client asks for its unacknowledged messages again (Pulsar's REDELIVER_UNACKNOWLEDGED_MESSAGES):
        those of ``entries`` (``(ledgerId, entryId)``: every message of the entry), or all when None, that
        are pending at ``consumer`` - never another consumer's, never an acknowledged one. They go back to
        the dispatcher (to any consumer of a Shared subscription) with their redelivery count + 1; returns
        how many."""
        pending = consumer.pending
        if not pending:
            return 0
        if entries is None:
            keys = list(pending)
        else:
            wanted = set(entries)
            if not wanted:
                return 0
            keys = [key for key in pending if (key[0], key[1]) in wanted]
        if not keys:
            return 0
        due: list[Delivery] = []
        for delivery in consumer.take_pending_many(keys):
            if delivery is not None:
                self.dispatcher.on_released(consumer, delivery)
                if not self.acked(delivery):
                    due.append(delivery)
        self._redeliver(due)
        return len(due)

    def _redeliver(self, due: list[Delivery]) -> None:
        if not due:
            return
        counts = self._redelivery_counts
        for delivery in due:
            key = delivery.key
            counts[key] = min(counts.pop(key, 0) + 1, REDELIVERY_COUNT_MAX)  # re-inserted: counted last
        while len(counts) > REDELIVERY_COUNTS_MAX:
            del counts[next(iter(counts))]
        self.msg_redeliver_counter += len(due)
        due.sort(key=lambda d: d.key)
        self.dispatcher.redeliver(due)

    def redelivery_count(self, key: MsgKey) -> int:
        """How many times the message at ``key`` was handed out again (0 if never, or forgotten)."""
        return self._redelivery_counts.get(key, 0)

    def is_stored(self, ledger_id: int, entry_id: int) -> bool:
        return self._stored(ledger_id, entry_id)

    def stored_batch_size(self, ledger_id: int, entry_id: int) -> int:
        """How many messages the stored batch entry holds (0: not stored, not a batch, or not known)."""
        if not self._stored(ledger_id, entry_id):
            return 0
        return self._stored_batch_size(Position(ledger_id, entry_id))

    def acked(self, delivery: Delivery) -> bool:
        """Whether ``delivery``'s message was acknowledged meanwhile (through another copy of it: a negative
        ack, an ack timeout or its consumer leaving must not deliver it again)."""
        position = Position(delivery.ledger_id, delivery.entry_id)
        if self.cursor.is_acked(position):
            return True
        index = delivery.batch_index
        if index < 0:
            return False
        unacked = self._batches.get((delivery.ledger_id, delivery.entry_id))
        if unacked is not None:
            return index not in unacked
        return index < self.cursor.prefix_acked(position)

    # -- admin operations ----------------------------------------------------------------------

    def reset_to(self, position: Position) -> None:
        """Make ``position`` the next entry delivered (admin reset cursor, a client's seek)."""
        self._batches.clear()
        self.cursor.forget_batch_acks()
        self._redelivery_counts.clear()
        self.cursor.reset(position)
        self._drop_in_flight()

    def seek(self, position: Position) -> None:
        """A client's seek (Pulsar's reset cursor from a consumer): ``position`` is the next entry delivered;
        every consumer of the subscription is disconnected - as Pulsar does - so that its client drops what
        it had received and subscribes again."""
        self.reset_to(position)
        self.sought = True
        for consumer in list(self.dispatcher.consumers):
            if consumer.disconnect is not None:
                consumer.disconnect("the subscription was reset")

    def cursor_moved(self) -> None:
        """The cursor was moved from outside (admin skip, expiry, backlog eviction): drop what was in
        flight and dispatch again from the cursor's read position."""
        self._batches.clear()
        self.cursor.forget_batch_acks()
        self._redelivery_counts.clear()
        self._drop_in_flight()

    def skip(self, count: int) -> None:
        self.cursor.skip(count)
        self._drop_in_flight()

    def clear_backlog(self) -> None:
        self._batches.clear()
        self.cursor.forget_batch_acks()
        self._redelivery_counts.clear()
        self.cursor.clear_backlog()
        self._drop_in_flight()

    def _drop_in_flight(self) -> None:
        for consumer in self.dispatcher.consumers:
            consumer.clear_pending()
        self.dispatcher.rewind()

    def close(self) -> None:
        self.dispatcher.close()

    # -- figures --------------------------------------------------------------------------------

    def backlog(self) -> int:
        """Unacknowledged messages (an entry holding a batch counts its messages)."""
        return self.cursor.message_backlog()

    def stats(self) -> dict[str, object]:
        """Pulsar's ``SubscriptionStats`` fields Magnetar knows (rates: the last stats period's)."""
        dispatcher = self.dispatcher
        active = dispatcher.active
        return {
            "msgRateOut": self.rate_out.msgs_per_s,
            "msgThroughputOut": self.rate_out.bytes_per_s,
            "msgOutCounter": self.msg_out_counter,
            "bytesOutCounter": self.bytes_out_counter,
            "msgBacklog": self.backlog(),
            "unackedMessages": sum(len(c.pending) for c in dispatcher.consumers),
            "msgRateRedeliver": self.rate_redeliver.msgs_per_s,
            "type": str(dispatcher.type or SubscriptionType.EXCLUSIVE),
            "activeConsumerName": active.name if active is not None else None,
            "lastAckedTimestamp": self.last_ack_ms,
            "consumers": [c.stats() for c in dispatcher.consumers],
            "isDurable": self.durable,
            "durable": self.durable,
            "isReplicated": False,
            "replicated": False,
            "msgDelayed": dispatcher.delayed_count,
            "blockedSubscriptionOnUnackedMsgs": self.dispatcher.blocked_on_unacked,
            **dispatcher.throttled_events.stats(),
        }
