"""A topic's persistence policy reaches the managed ledger as the quorum of its next ledgers: at open
(the first ledger) and at every rollover; the ledgers already created keep theirs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.settings import ManagedLedgerSettings

SETTINGS = ManagedLedgerSettings(
    ensemble_size=3, write_quorum=3, ack_quorum=2, max_entries_per_ledger=5, min_ledger_rollover_time_min=0
)


@pytest.fixture
async def factory(
    client_metadata: MemoryMetadataStore, bookkeeper_client: BookKeeper
) -> AsyncIterator[ManagedLedgerFactory]:
    async with open_managed_ledger_factory(bookkeeper_client, client_metadata, SETTINGS) as f:
        yield f


def current_quorum(ml: ManagedLedger) -> tuple[int, int, int]:
    assert ml.current is not None
    md = ml.current.versioned.metadata
    return md.ensemble_size, md.write_quorum, md.ack_quorum


async def test_quorum_at_open_and_at_rollover(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t/ns/persistent/q", quorum=(2, 2, 1))
    assert current_quorum(ml) == (2, 2, 1)
    first = ml.current
    ml.quorum = (3, 2, 2)  # a policy change on the loaded topic
    for i in range(6):  # past max_entries_per_ledger: the next ledger is created
        await ml.add_entry(f"m{i}".encode())
    assert ml.current is not first
    assert current_quorum(ml) == (3, 2, 2)
    assert first is not None
    assert first.versioned.metadata.ensemble_size == 2  # kept its own
    ml.quorum = None  # the policy removed: the settings' quorum again
    for i in range(5):
        await ml.add_entry(f"n{i}".encode())
    assert current_quorum(ml) == (3, 3, 2)
