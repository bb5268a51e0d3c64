"""A metadata-store outage fails managed-ledger operations; it never escapes a background task.

Found by the failure suite (tests/chaos): a broker whose ZooKeeper session had expired (it was paused past
its session timeout) flushed its cursors; the store answered StoreUnavailableError, which no handler of the
cursor's flush task expected, so it escaped the managed ledger's nursery and the broker process exited. The
store's failures are now translated into the layer's MetadataUnavailableError at the MetaStore boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from fixtures.client import InProcessBookies

from magnetar.bookkeeper.client import BookKeeper, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore, StoreUnavailableError
from magnetar.managed_ledger.errors import ManagedLedgerError, MetadataUnavailableError
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.meta_store import ROOT
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    max_entries_per_ledger=20,
    min_ledger_rollover_time_min=0,
    mark_delete_rate_per_s=1000,
    metadata_operation_timeout_s=0.5,
    rollover_retry_interval_ms=50,
)


class OutageStore:
    """The memory store, unreachable for managed-ledger paths while ``down`` (the client's paths still work,
    as bookie writes go on during a ZooKeeper outage)."""

    def __init__(self, store: MemoryMetadataStore) -> None:
        self._store = store
        self.down = False
        self.failures = 0

    def _check(self, path: str) -> None:
        if self.down and path.startswith(ROOT):
            self.failures += 1
            raise StoreUnavailableError(f"not connected to ZooKeeper (SUSPENDED) during {path}")

    async def get(self, path: str) -> Any:
        self._check(path)
        return await self._store.get(path)

    async def put(self, path: str, value: bytes, expected_version: int | None, **kwargs: Any) -> Any:
        self._check(path)
        return await self._store.put(path, value, expected_version, **kwargs)

    async def get_children(self, path: str) -> list[str]:
        self._check(path)
        return await self._store.get_children(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
async def outage(client_metadata: MemoryMetadataStore) -> OutageStore:
    return OutageStore(client_metadata)


@pytest.fixture
async def factory(
    outage: OutageStore, in_process_bookies: InProcessBookies, client_metadata: MemoryMetadataStore
) -> AsyncIterator[ManagedLedgerFactory]:
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    bk: BookKeeper
    async with (
        open_bookkeeper(client_metadata, in_process_bookies.transport, settings) as bk,
        open_managed_ledger_factory(bk, outage, SETTINGS) as opened,  # type: ignore[arg-type]
    ):
        yield opened


async def test_cursor_flushes_during_an_outage_fail_quietly_and_persist_afterwards(
    factory: ManagedLedgerFactory, outage: OutageStore
) -> None:
    ml = await factory.open("t/ns/persistent/outage-cursor")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    positions = [await ml.add_entry(f"m{i}".encode()) for i in range(5)]
    outage.down = True
    for position in positions[:3]:
        cursor.ack(position)  # each schedules a flush in the managed ledger's nursery
    with trio.fail_after(5):
        while outage.failures == 0:
            await trio.sleep(0.01)  # the flush task runs on its own timer
    await cursor.flush()  # fails again, quietly: the state stays dirty
    outage.down = False
    await cursor.flush()
    assert cursor.mark_delete == positions[2]
    # the task survived, and so did the managed ledger: still writable
    assert await ml.add_entry(b"after") > positions[-1]


async def test_an_add_made_by_the_failure_callback_of_a_rollover_is_not_parked(
    factory: ManagedLedgerFactory, outage: OutageStore, in_process_bookies: InProcessBookies
) -> None:
    """A topic writes its next batch from the callback that fails the previous one (its in-flight count drops
    to 0). When that callback ran inside the failed rollover, the new add found the rollover still marked as
    running, queued itself and waited for a retry that nothing started: the topic waited for it forever (the
    ZooKeeper chaos scenario's "no recovery" once the topic stopped pipelining small batches). A rollover
    fails when it must replace a failed ledger and cannot list the new one in metadata_operation_timeout_s."""
    ml = await factory.open("t/ns/persistent/outage-reentrant")
    for i in range(3):
        await ml.add_entry(f"m{i}".encode())
    crashed = in_process_bookies.ids[0]
    in_process_bookies.crash(crashed)  # the current ledger fails (no spare bookie to replace it with)
    with pytest.raises(ManagedLedgerError):
        await ml.add_entry(b"doomed")
    in_process_bookies.restart(crashed)
    outcomes: list[object] = []

    def add_next(result: object) -> None:
        outcomes.append(result)
        if len(outcomes) == 1:
            outage.down = False  # the store is back by the time the next batch goes out
            ml.add_entry_nowait(b"next batch", outcomes.append)

    outage.down = True  # the failed ledger's replacement cannot be listed: after 0.5 s it fails
    ml.add_entry_nowait(b"first batch", add_next)
    with trio.fail_after(10):
        while len(outcomes) < 2:
            await trio.sleep(0.01)
    assert isinstance(outcomes[0], ManagedLedgerError)
    assert isinstance(outcomes[1], Position)  # written to the next ledger, created by a new attempt
    assert outcomes[1].ledger_id == ml.current_ledger_id


async def test_opening_during_an_outage_is_a_managed_ledger_error(
    factory: ManagedLedgerFactory, outage: OutageStore
) -> None:
    outage.down = True
    with pytest.raises(MetadataUnavailableError):
        await factory.open("t/ns/persistent/outage-open")
    outage.down = False
    ml = await factory.open("t/ns/persistent/outage-open")
    await ml.add_entry(b"x")
