"""The managed ledger's message index prefix: round trips and hostile bytes (hypothesis), the bytes stored are
those the broker stored before the managed ledger owned them, entries stored that way read back, and the
broker's entry reaches the bookies' requests without a copy."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from fixtures.client import UNHURRIED, InProcessBookies
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.local_transport import LocalTransport
from magnetar.bookkeeper.client.transport import BookieId, ResponseCallback
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.bookkeeper.protocol.messages import AddRequest, Request
from magnetar.broker.run import ENTRY_INDEXING
from magnetar.broker.wire.entry_format import (
    StoredMessage,
    decode_entry,
    encode_batch,
    encode_message,
    entry_message_count,
)
from magnetar.managed_ledger.entry_prefix import (
    FIRST_INDEX_MAX,
    SIZE,
    EntryPrefixError,
    encode_prefix,
    first_index_of,
    split,
)
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3, write_quorum=3, ack_quorum=2, max_entries_per_ledger=4, min_ledger_rollover_time_min=0
)
indexes = st.integers(0, FIRST_INDEX_MAX)
stored_messages = st.builds(
    StoredMessage,
    payload=st.binary(max_size=200),
    producer_name=st.text(max_size=10),
    sequence_id=st.integers(0, 2**40),
    publish_time_ms=st.integers(0, 2**45),
    event_time_ms=st.integers(0, 2**45),
    key=st.none() | st.text(max_size=5),
    properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    chunk=st.none(),
)


def old_stamp(data: bytes, first_index: int) -> bytes:
    """What the broker stored before the managed ledger owned the prefix (its ``stamp_first_index``, verbatim:
    ``struct.Struct("<2sq").pack(b"Mi", first_index)`` joined with the entry)."""
    return b"".join((struct.Struct("<2sq").pack(b"Mi", first_index), data))


def entry_of(messages: list[StoredMessage]) -> bytes:
    return encode_batch(messages) if len(messages) > 1 else encode_message(messages[0])


@given(st.lists(stored_messages, min_size=1, max_size=4), indexes)
def test_the_prefix_is_the_bytes_stored_before_and_splits_off_without_a_copy(
    messages: list[StoredMessage], first: int
) -> None:
    data = entry_of(messages)
    stored = encode_prefix(first) + data
    assert stored == old_stamp(data, first)
    index, body = split(stored)
    assert index == first_index_of(stored) == first
    assert isinstance(body, memoryview)
    assert body.obj is stored  # a slice of the bytes read: no copy
    assert body == data
    assert decode_entry(body) == decode_entry(data)
    assert entry_message_count(body) == len(messages)
    # an entry stored before the prefix existed is its own body
    assert split(data)[0] is None
    assert split(data)[1] is data


@given(st.binary(max_size=40))
def test_any_bytes_split_or_raise_the_prefix_error(stored: bytes) -> None:
    try:
        index, body = split(stored)
    except EntryPrefixError:
        assert stored[:2] == b"Mi"
        return
    if index is None:
        assert body is stored
        assert stored[:2] != b"Mi"
    else:
        assert 0 <= index <= FIRST_INDEX_MAX
        assert bytes(body) == stored[SIZE:]


@pytest.mark.parametrize(
    "stored",
    [
        b"Mi",  # the magic alone
        b"Mi\x00\x00\x00",  # truncated index
        struct.pack("<2sq", b"Mi", -1),  # a negative index
        struct.pack("<2sq", b"Mi", -(2**63)),
    ],
)
def test_a_forged_or_truncated_prefix_is_refused(stored: bytes) -> None:
    with pytest.raises(EntryPrefixError, match="message index"):
        split(stored)


@pytest.mark.parametrize("first", [-1, 2**63, -(2**63)])
def test_an_index_out_of_range_is_never_stamped(first: int) -> None:
    with pytest.raises(ValueError, match="message index"):
        encode_prefix(first)


@dataclass
class RecordingTransport:
    """Forwards to the in-process bookies and keeps every add as the client handed it over."""

    inner: LocalTransport
    adds: list[AddRequest] = field(default_factory=list)

    def sends_parts(self) -> bool:
        return True

    def send(self, bookie: BookieId, request: Request, callback: ResponseCallback) -> None:
        if isinstance(request, AddRequest):
            self.adds.append(request)
            request = request.whole()
        self.inner.send(bookie, request, callback)


MESSAGES = [
    [StoredMessage(b"m%d-%d" % (i, j) * 50, "p", i * 10 + j, 1) for j in range(1 + i % 3)] for i in range(9)
]


async def test_the_broker_entry_goes_to_every_bookie_uncopied_and_is_stored_as_before(
    client_metadata: MemoryMetadataStore, in_process_bookies: InProcessBookies
) -> None:
    transport = RecordingTransport(in_process_bookies.transport)
    settings = ClientSettings(**UNHURRIED, ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with (
        open_bookkeeper(client_metadata, transport, settings) as bk,
        open_managed_ledger_factory(bk, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING) as factory,
    ):
        ml = await factory.open("t/ns/persistent/bytes")
        entries = [entry_of(group) for group in MESSAGES]
        positions = [
            await ml.add_entry(data, messages=len(group))
            for data, group in zip(entries, MESSAGES, strict=True)
        ]
        firsts = [sum(len(g) for g in MESSAGES[:i]) for i in range(len(MESSAGES))]
        for data, first in zip(entries, firsts, strict=True):
            sent = [a for a in transport.adds if any(part is data for part in a.tail)]
            assert len(sent) == 3  # one request per bookie of the write quorum, each holding the entry itself
            for add in sent:
                assert add.tail == (encode_prefix(first), data)
        # and read back through the managed ledger: the entry without the prefix, a view of the bytes read
        read_back = await ml.read_entries(positions[0], len(positions))
        assert [bytes(e.data) for e in read_back] == entries
        assert [e.first_index for e in read_back] == firsts
        assert [e.length for e in read_back] == [len(d) + SIZE for d in entries]
        await ml.close()
        # on the bookies (ledgers closed): the bytes stored before the managed ledger owned the prefix
        for position, data, first in zip(positions, entries, firsts, strict=True):
            handle = await bk.open_ledger(position.ledger_id, password=SETTINGS.password, recovery=False)
            (read,) = await handle.read_entries(position.entry_id, position.entry_id)
            await handle.close()
            assert read.payload == old_stamp(data, first)


async def test_entries_stored_by_the_old_path_read_and_count_with_the_new(
    client_metadata: MemoryMetadataStore, in_process_bookies: InProcessBookies
) -> None:
    """A topic written by the previous code (the broker stamped the prefix; the managed ledger stored the
    bytes as given) reopens with the managed ledger owning the prefix: counts, recovery and reads are the
    same."""
    settings = ClientSettings(**UNHURRIED, ensemble_size=3, write_quorum=3, ack_quorum=2)
    name = "t/ns/persistent/old-bytes"
    entries = [entry_of(group) for group in MESSAGES]
    firsts = [sum(len(g) for g in MESSAGES[:i]) for i in range(len(MESSAGES))]
    async with open_bookkeeper(client_metadata, in_process_bookies.transport, settings) as bk:
        async with open_managed_ledger_factory(bk, client_metadata, SETTINGS) as old:  # stores bytes as given
            ml = await old.open(name)
            positions = [
                await ml.add_entry(old_stamp(data, first), messages=len(group))
                for data, first, group in zip(entries, firsts, MESSAGES, strict=True)
            ]
            # the owner dies without closing: the next one recovers the last ledger from its last entry
        async with open_managed_ledger_factory(
            bk, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
        ) as new:
            ml = await new.open(name)
            assert ml.message_index.next_index == sum(len(g) for g in MESSAGES)
            read_back = await ml.read_entries(positions[0], len(positions))
            assert [bytes(e.data) for e in read_back] == entries
            assert [e.first_index for e in read_back] == firsts
            assert [decode_entry(e.data).messages for e in read_back] == [
                decode_entry(d).messages for d in entries
            ]
            await ml.close()
