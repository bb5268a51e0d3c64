"""A binary-protocol consumer's acknowledgements, turned back into the stored positions the core knows.

A batch MESSAGE carries the messages of one stored entry that one dispatch handed to the consumer; the client
numbers them ``0 .. k-1`` (it cannot know their stored batch indexes) and acknowledges in those numbers. So
each consumer remembers, per entry, the stored batch indexes of the batch MESSAGEs it was sent and has not
acknowledged (:class:`DeliveredGroups`). The dispatcher hands a binary consumer whole entries, so there is one
such MESSAGE per entry but where a Key_Shared subscription splits an entry between its consumers and holds
part of it back for ordering; an ack is then taken for the oldest (clients acknowledge in order). The map is
bounded (:data:`DELIVERED_ENTRIES_MAX` entries, oldest forgotten first, :data:`GROUPS_PER_ENTRY_MAX` MESSAGEs
an entry), and an entry is forgotten when it is acknowledged whole or handed back for redelivery.

An acknowledgement (:func:`apply_ack`) names an entry and, with batch-index acks on
(``batch_index_ack_enabled``), an ``ack_set``: a bit set over the batch, 64 bits a word, 1 = *not yet*
acknowledged. Rules (Pulsar's, with its bounds):

* an entry acknowledged without ``ack_set`` acknowledges the messages of its group (every message, for an
  entry this consumer was not sent: a client acknowledging after it reconnected);
* with ``ack_set``, the messages whose bit is 0; the batch it refers to is the group (or, for an entry this
  consumer was not sent, the entry as stored: indexes are then stored indexes, and the entry's size comes from
  the broker's message index, never from the client). An ``ack_set`` with more words than that batch needs is
  refused (ignored, as Pulsar ignores an ack it cannot apply), as is one for an entry that is not stored;
* a cumulative ack with ``ack_set`` acknowledges every entry before it and, of its own entry, the messages
  whose bit is 0; a cumulative ack of an entry that is not stored is ignored (Pulsar refuses a mark-delete
  past the last entry);
* whatever the ids, an ack never acknowledges anything but stored positions, and never fails the connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import replace

from magnetar.broker.core import Subscriber
from magnetar.broker.protocols.pulsar_binary.commands import AckId

DELIVERED_ENTRIES_MAX = 100_000
"""Entries whose batch MESSAGEs one consumer remembers."""
GROUPS_PER_ENTRY_MAX = 8
"""Batch MESSAGEs of one entry one consumer remembers (more than one only where an entry is split)."""
AFTER_ALL = 2**31
"""A batch index above every real one."""

Entry = tuple[int, int]


class DeliveredGroups:
    """Per entry, the stored batch indexes of each batch MESSAGE sent to one consumer and not acknowledged,
    oldest first."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[Entry, deque[list[int]]] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def sent(self, entry: Entry, indexes: list[int]) -> None:
        groups = self._groups
        sent = groups.get(entry)
        if sent is None:
            groups[entry] = deque((indexes,))
            if len(groups) > DELIVERED_ENTRIES_MAX:
                del groups[next(iter(groups))]
            return
        sent.append(indexes)
        if len(sent) > GROUPS_PER_ENTRY_MAX:
            sent.popleft()

    def get(self, entry: Entry) -> list[int] | None:
        """The oldest batch MESSAGE of ``entry`` not acknowledged (the one an ack of it is taken for)."""
        sent = self._groups.get(entry)
        return sent[0] if sent else None

    def pop(self, entry: Entry) -> None:
        """The oldest batch MESSAGE of ``entry`` was acknowledged whole."""
        sent = self._groups.get(entry)
        if sent is None:
            return
        sent.popleft()
        if not sent:
            del self._groups[entry]

    def drop_through(self, entry: Entry, *, inclusive: bool = True) -> None:
        """Forget every entry before ``entry``, and ``entry`` itself when ``inclusive`` (a cumulative ack)."""
        for key in [k for k in self._groups if k < entry or (inclusive and k == entry)]:
            del self._groups[key]

    def forget(self, entries: Collection[Entry] | None = None) -> None:
        """Forget ``entries`` (all when None): they were handed back for redelivery."""
        if entries is None:
            self._groups.clear()
            return
        for entry in entries:
            self._groups.pop(entry, None)


def _unset_bits(words: tuple[int, ...], size: int) -> list[int] | None:
    """The indexes ``0 .. size-1`` whose bit is 0 in ``words`` (acknowledged), or None when ``words`` has more
    words than a batch of ``size`` needs."""
    if len(words) > (size + 63) // 64:
        return None
    out = []
    for index in range(size):
        word = index >> 6
        if word >= len(words) or not (words[word] >> (index & 63)) & 1:
            out.append(index)
    return out


def apply_ack(
    groups: DeliveredGroups, subscriber: Subscriber, message_id: AckId, *, cumulative: bool
) -> None:
    """Apply one acknowledged id of the client's ACK (see the module docstring)."""
    entry = (message_id.ledger_id, message_id.entry_id)
    partition = subscriber.partition
    ack_set = message_id.ack_set
    if cumulative:
        if not subscriber.is_stored(entry[0], entry[1]):
            return  # up to an entry that does not exist: refused, as Pulsar refuses such a mark-delete
        if not ack_set:
            groups.drop_through(entry)
            subscriber.ack_range((0, 0, -1), (entry[0], entry[1], AFTER_ALL))
            return
        acked = _acked_indexes(groups, subscriber, entry, ack_set)
        if acked is None:
            return
        subscriber.ack_range((0, 0, -1), (entry[0], entry[1], -2))  # every entry before this one
        groups.drop_through(entry, inclusive=False)
        _ack_indexes(groups, subscriber, entry, acked)
        return
    if not ack_set:
        group = groups.get(entry)
        if group is None:
            subscriber.ack_fields(partition, entry[0], entry[1], -1)
            return
        groups.pop(entry)
        subscriber.ack_group([(entry[0], entry[1], index) for index in group])
        return
    acked = _acked_indexes(groups, subscriber, entry, ack_set)
    if acked is not None:
        _ack_indexes(groups, subscriber, entry, acked)


def apply_acks(
    groups: DeliveredGroups, subscriber: Subscriber, ids: Sequence[AckId], *, cumulative: bool
) -> None:
    """Apply the ids of one ACK. Ids of one entry that carry an ``ack_set`` are merged first (a message is
    acknowledged if any of them says so): a client acknowledging many messages of a batch at once sends
    the entry once per message, each with the same bit set, and the batch is walked once, not once per
    message."""
    if cumulative or len(ids) == 1:
        for message_id in ids:
            apply_ack(groups, subscriber, message_id, cumulative=cumulative)
        return
    merged: dict[Entry, AckId] = {}
    for message_id in ids:
        if not message_id.ack_set:
            apply_ack(groups, subscriber, message_id, cumulative=False)
            continue
        entry = (message_id.ledger_id, message_id.entry_id)
        prior = merged.get(entry)
        if prior is None:
            merged[entry] = message_id
        elif prior.ack_set != message_id.ack_set:
            words = tuple(a & b for a, b in zip(prior.ack_set, message_id.ack_set, strict=False))
            merged[entry] = replace(prior, ack_set=words or (0,))
    for message_id in merged.values():
        apply_ack(groups, subscriber, message_id, cumulative=False)


def _acked_indexes(
    groups: DeliveredGroups, subscriber: Subscriber, entry: Entry, ack_set: tuple[int, ...]
) -> list[int] | None:
    """The stored batch indexes an ``ack_set`` acknowledges, or None when it is refused."""
    group = groups.get(entry)
    if group is not None:
        unset = _unset_bits(ack_set, len(group))
        return None if unset is None else [group[i] for i in unset]
    size = subscriber.stored_batch_size(entry[0], entry[1])
    if size <= 0:
        return None  # not stored, or not a batch the broker knows the size of: ignored
    return _unset_bits(ack_set, size)


def _ack_indexes(groups: DeliveredGroups, subscriber: Subscriber, entry: Entry, indexes: list[int]) -> None:
    if not indexes:
        return
    group = groups.get(entry)
    if group is not None and set(indexes).issuperset(group):
        groups.pop(entry)  # else the group stays as sent: the client numbers by the MESSAGE it received
    subscriber.ack_group([(entry[0], entry[1], index) for index in indexes])
