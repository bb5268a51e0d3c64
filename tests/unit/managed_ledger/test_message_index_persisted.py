"""Message counts survive a reopen and a failover without reading the entries: every entry carries its first
message's index, every ledger's first index is in the metadata (docs/entry-format.md)."""

from __future__ import annotations

from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.run import ENTRY_INDEXING
from magnetar.broker.wire.entry_format import StoredMessage, encode_batch, encode_message, entry_message_count
from magnetar.managed_ledger.entry_prefix import EntryIndexing
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    max_entries_per_ledger=100,
    min_ledger_rollover_time_min=0,
    mark_delete_rate_per_s=1000,
)
SIZES = [1 + i % 5 for i in range(250)]
"""750 messages in 250 entries over three ledgers."""


def entry(size: int, i: int) -> bytes:
    messages = [StoredMessage(b"m%d" % j, "p", i * 10 + j, 1) for j in range(size)]
    return encode_batch(messages) if size > 1 else encode_message(messages[0])


async def fill(ml: ManagedLedger) -> list[Position]:
    return [await ml.add_entry(entry(size, i), messages=size) for i, size in enumerate(SIZES)]


async def test_counts_are_the_same_after_a_reopen_and_entries_carry_their_index(
    client_metadata: MemoryMetadataStore, bookkeeper_client: BookKeeper
) -> None:
    name = "t/ns/persistent/indexed"
    async with open_managed_ledger_factory(
        bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
    ) as first:
        ml = await first.open(name)
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        positions = await fill(ml)
        stored = await ml.read_entries(positions[0], 250)
        assert [(e.first_index, entry_message_count(e.data)) for e in stored[:4]] == [
            (0, 1),
            (1, 2),
            (3, 3),
            (6, 4),
        ]
        cursor.ack_cumulative(positions[130])
        cursor.ack(positions[160])
        assert await cursor.skip_messages(4) == 4  # entry 131 (2 messages) and 2 of entry 132's 3
        assert cursor.prefix_acked(positions[132]) == 2
        expected = sum(SIZES[132:]) - 2 - SIZES[160]
        assert cursor.message_backlog() == expected
    info = await MetaStore(client_metadata).get_ledger_info(name)
    assert info is not None
    assert [i.first_index for i in info.value.ledgers][:3] == [0, sum(SIZES[:100]), sum(SIZES[:200])]

    reads: list[int] = []

    def counted_read(data: bytes | memoryview) -> int:
        reads.append(1)
        return ENTRY_INDEXING.messages_in(data)

    counting = EntryIndexing(counted_read)
    async with open_managed_ledger_factory(
        bookkeeper_client, client_metadata, SETTINGS, entry_indexing=counting
    ) as second:
        ml = await second.open(name)
        assert ml.message_index.next_index == sum(SIZES)
        assert ml.message_index.is_coarse(positions[0].ledger_id)
        cursor = ml.cursors["sub"]
        assert cursor.message_backlog() == expected
        # read at the open: the last ledger's last entry, the entries after mark-delete and after each end
        # of the acknowledged range (the range's start is learned with them) - not the 250 entries
        assert len(reads) <= 4, len(reads)
        reads.clear()
        assert cursor.prefix_acked(positions[132]) == 2
        location = await cursor.locate_unacked(1)  # the third message of entry 132
        assert location is not None
        assert (location.position, location.offset) == (positions[132], 2)
        assert await cursor.skip_messages(10) == 10
        assert cursor.message_backlog() == expected - 10
        assert len(reads) <= 8, len(reads)  # a bisection among the ledger's 100 entries
        # every message found where it is, in ledgers known only by their bounds after the reopen
        probe = await ml.open_cursor("probe", start_at_earliest=True)
        truth = [(p, offset) for p, size in zip(positions, SIZES, strict=True) for offset in range(size)]
        for n in range(1, sum(SIZES) + 1, 37):
            location = await probe.locate_unacked(n)
            assert location is not None
            assert (location.position, location.offset) == truth[n - 1], n
        await ml.add_entry(entry(3, 999), messages=3)
        assert cursor.message_backlog() == expected - 7


async def test_a_new_owner_counts_the_same_after_a_failover(
    client_metadata: MemoryMetadataStore, bookkeeper_client: BookKeeper
) -> None:
    """The first owner is never closed: the second recovers its ledger (reading the last entry's index)."""
    name = "t/ns/persistent/failover"
    async with open_managed_ledger_factory(
        bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
    ) as first:
        ml = await first.open(name)
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        positions = await fill(ml)
        cursor.ack_cumulative(positions[220])
        await cursor.flush()
        expected = sum(SIZES[221:])
        assert cursor.message_backlog() == expected
        async with open_managed_ledger_factory(
            bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
        ) as second:
            taken = await second.open(name)
            assert taken.message_index.next_index == sum(SIZES)
            assert taken.cursors["sub"].message_backlog() == expected


async def test_an_empty_ledger_left_by_a_dead_owner_still_bounds_the_one_before(
    client_metadata: MemoryMetadataStore, bookkeeper_client: BookKeeper
) -> None:
    """Reopened cleanly, the topic lists a new empty ledger; its owner dies before adding to it. The next
    owner drops that ledger, and the ledger before it - closed, not recovered - ends at its first index."""
    name = "t/ns/persistent/empty-last"
    async with open_managed_ledger_factory(
        bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
    ) as first:
        ml = await first.open(name)
        await ml.open_cursor("sub", start_at_earliest=True)
        await fill(ml)
    async with open_managed_ledger_factory(
        bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
    ) as second:
        ml = await second.open(name)  # lists an empty ledger, then "dies" (never closed before the takeover)
        async with open_managed_ledger_factory(
            bookkeeper_client, client_metadata, SETTINGS, entry_indexing=ENTRY_INDEXING
        ) as third:
            taken = await third.open(name)
            assert taken.message_index.next_index == sum(SIZES)
            assert taken.cursors["sub"].message_backlog() == sum(SIZES)
