"""A clean close while a flush of the cursor is still in flight must not let that flush's older state win.

The simulation of a topic and its subscription (``tests/sim/sim_topic.py``) found it: a flush's position
entry was on its way to a bookie when the topic was unloaded; the close wrote the final snapshot to the
metadata node and closed the cursor ledger, the flush's add then failed, and its fallback wrote its own,
older snapshot over the final one - the next owner recovered a mark-delete below what the close had
persisted (acknowledged messages delivered again). The close now waits for a flush in flight and writes the
final snapshot after it.
"""

from __future__ import annotations

import trio
from fixtures.client import UNHURRIED, open_in_process_bookies

from magnetar.bookkeeper.client import BKError, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3, write_quorum=3, ack_quorum=2, min_ledger_rollover_time_min=0, mark_delete_rate_per_s=1000
)
CLIENT = ClientSettings(**UNHURRIED, ensemble_size=3, write_quorum=3, ack_quorum=2)


async def test_a_close_during_a_flush_keeps_the_final_mark_delete() -> None:
    ours, theirs = MemoryMetadataStore("cursor-close-race"), MemoryMetadataStore("cursor-close-race")
    topic = "t/ns/persistent/cursor-close-race"
    async with (
        open_in_process_bookies(ours, 3) as bookies,
        open_bookkeeper(ours, bookies.transport, CLIENT) as bk_ours,
        open_bookkeeper(theirs, bookies.transport, CLIENT) as bk_theirs,
        open_managed_ledger_factory(bk_ours, ours, SETTINGS) as factory_ours,
        open_managed_ledger_factory(bk_theirs, theirs, SETTINGS) as factory_theirs,
    ):
        ml = await factory_ours.open(topic)
        cursor = await ml.open_cursor("sub", start_at_earliest=True)
        positions = [await ml.add_entry(f"m{i}".encode()) for i in range(4)]
        cursor.ack(positions[0])
        await cursor.flush()  # the cursor ledger exists
        store = cursor._store
        assert store is not None
        assert store._ledger is not None
        handle = store._ledger
        sent = trio.Event()

        async def slow_failing_add(data: bytes) -> int:  # a position entry whose add ends in a failure
            sent.set()
            await trio.sleep(1.0)
            raise BKError("the add timed out")

        handle.add_entry = slow_failing_add  # type: ignore[method-assign]
        cursor.ack(positions[1])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cursor.flush)
            await sent.wait()  # the flush of mark-delete positions[1] is in flight
            cursor.ack(positions[2])
            cursor.ack(positions[3])
            await factory_ours.close_ledger(topic)  # clean close: the final state is positions[3]
        taken_over = await factory_theirs.open(topic)
        assert taken_over.cursors["sub"].mark_delete == positions[3]
