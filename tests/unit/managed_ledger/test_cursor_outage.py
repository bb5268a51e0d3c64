"""Cursor persistence while the metadata store is away: position entries go on to the cursor ledger (bookies
only), a full cursor ledger takes entries past its cap, and a new owner recovers what was persisted during the
outage."""

from __future__ import annotations

import trio
from fixtures.client import UNHURRIED, open_in_process_bookies

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    min_ledger_rollover_time_min=0,
    mark_delete_rate_per_s=1000,
    cursor_max_entries_per_ledger=2,
)
CLIENT = ClientSettings(**UNHURRIED, ensemble_size=3, write_quorum=3, ack_quorum=2)


async def test_positions_persisted_during_an_outage_are_what_a_new_owner_recovers() -> None:
    ours, theirs = MemoryMetadataStore("cursor-outage-1"), MemoryMetadataStore("cursor-outage-1")
    topic = "t/ns/persistent/cursor-outage"
    async with (
        open_in_process_bookies(ours, 3) as bookies,
        open_bookkeeper(ours, bookies.transport, CLIENT) as bk_ours,
        open_bookkeeper(theirs, bookies.transport, CLIENT) as bk_theirs,
        open_managed_ledger_factory(bk_ours, ours, SETTINGS) as factory_ours,
        open_managed_ledger_factory(bk_theirs, theirs, SETTINGS) as factory_theirs,
    ):
        ml = await factory_ours.open(topic)
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        positions = [await ml.add_entry(f"m{i}".encode()) for i in range(10)]
        cursor.ack(positions[0])
        await cursor.flush()  # the first persistence creates the cursor ledger (needs the store)
        ours.disconnect()
        for position in positions[1:6]:  # three flushes fill the 2-entry cursor ledger and go past it
            cursor.ack(position)
            with trio.fail_after(5):
                await cursor.flush()
        # nothing failed: the state is on the bookies, not waiting for the store
        assert cursor.mark_delete == positions[5]
        assert not cursor._dirty
        ours.expire_session()

        taken_over = await factory_theirs.open(topic)
        assert taken_over.cursors["sub"].mark_delete == positions[5]


async def test_a_cursor_without_a_ledger_yet_waits_for_the_store_and_persists_afterwards() -> None:
    store = MemoryMetadataStore("cursor-outage-2")
    async with (
        open_in_process_bookies(store, 3) as bookies,
        open_bookkeeper(store, bookies.transport, CLIENT) as bk,
        open_managed_ledger_factory(bk, store, SETTINGS) as factory,
    ):
        ml = await factory.open("t/ns/persistent/cursor-waits")
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        positions = [await ml.add_entry(f"m{i}".encode()) for i in range(3)]
        store.disconnect()
        cursor.ack(positions[1])
        cursor.ack(positions[0])
        await cursor.flush()  # fails quietly: no cursor ledger yet, and none can be created
        assert cursor._dirty
        store.reconnect()
        await cursor.flush()
        assert not cursor._dirty
        stored = await factory.meta.get_cursor_info("t/ns/persistent/cursor-waits", "sub")
        assert stored is not None
        assert stored.value.cursor_ledger_id >= 0
