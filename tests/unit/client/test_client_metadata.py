"""Ledger metadata rules and serialization, ledger paths, id generation, listing, and the CAS update loop."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper.client.errors import (
    LedgerExistsError,
    MetadataVersionError,
    MetaStoreError,
    NoSuchLedgerError,
)
from magnetar.bookkeeper.client.ledger_manager import LedgerManager, ledger_id_of, ledger_path
from magnetar.bookkeeper.client.metadata import (
    LedgerMetadata,
    LedgerState,
    MetadataFormatError,
)
from magnetar.bookkeeper.client.settings import ClientSettings
from magnetar.bookkeeper.client.update_loop import MetadataUpdateLoop
from magnetar.bookkeeper.metadata.api import BadVersionError, Stat
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.digest import DigestType

ENSEMBLE = ("a:1", "b:1", "c:1")


def meta(**changes: object) -> LedgerMetadata:
    fields: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum": 3,
        "ack_quorum": 2,
        "ensembles": ((0, ENSEMBLE),),
        "digest_type": DigestType.CRC32C,
        "password": b"pw",
    }
    fields.update(changes)
    return LedgerMetadata(**fields)  # type: ignore[arg-type]


# -- validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"ack_quorum": 4},
        {"write_quorum": 4},
        {"ack_quorum": 0},
        {"ensembles": ()},
        {"ensembles": ((0, ("a:1", "b:1")),)},
        {"ensembles": ((0, ("a:1", "a:1", "b:1")),)},
        {"ensembles": ((1, ENSEMBLE),)},
        {"ensembles": ((0, ENSEMBLE), (0, ENSEMBLE))},
        {"last_entry_id": 5},
        {"length": 10},
        {"state": LedgerState.CLOSED, "last_entry_id": -2},
        {"password": None},
        {"digest_type": None},
    ],
)
def test_invalid_metadata_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(MetadataFormatError):
        meta(**changes)


def test_settings_check_quorums() -> None:
    assert ClientSettings(ensemble_size=3, write_quorum=2, ack_quorum=2).ack_quorum == 2
    with pytest.raises(ValueError, match="ack_quorum <= write_quorum <= ensemble_size"):
        ClientSettings(ensemble_size=2, write_quorum=3, ack_quorum=2)


def test_ensemble_derivations() -> None:
    md = meta().with_ensemble(5, ["a:1", "d:1", "c:1"])
    assert md.ensembles == ((0, ENSEMBLE), (5, ("a:1", "d:1", "c:1")))
    assert md.ensemble_for(4) == ENSEMBLE
    assert md.ensemble_for(5) == ("a:1", "d:1", "c:1")
    replaced = md.with_ensemble(5, ["e:1", "d:1", "c:1"])
    assert replaced.ensembles[-1] == (5, ("e:1", "d:1", "c:1"))
    assert len(replaced.ensembles) == 2
    with pytest.raises(MetadataFormatError):
        md.with_ensemble(4, ENSEMBLE)
    closed = md.in_recovery().closed(9, 100)
    assert (closed.state, closed.last_entry_id, closed.length) == (LedgerState.CLOSED, 9, 100)


def test_serialization_round_trip() -> None:
    md = meta(custom_metadata={"pulsar/managed-ledger": b"\x00\xffname"}, ctime_ms=123, creator_token=77)
    md = md.with_ensemble(3, ["d:1", "b:1", "c:1"]).closed(7, 64)
    data = md.to_bytes()
    assert data.startswith(b"MagnetarLedgerMetadataFormatVersion\t1\n")
    assert LedgerMetadata.from_bytes(data) == md


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"BookieMetadataFormatVersion\t3\n{}",
        b"MagnetarLedgerMetadataFormatVersion\t2\n{}",
        b"MagnetarLedgerMetadataFormatVersion\t1\nnot json",
        b"MagnetarLedgerMetadataFormatVersion\t1\n{}",
        b"\xff\xfe",
    ],
)
def test_unreadable_metadata_is_a_format_error(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.from_bytes(data)


def test_stored_metadata_breaking_the_rules_is_refused() -> None:
    data = meta().to_bytes().replace(b'"ackQuorumSize": 2', b'"ackQuorumSize": 9')
    with pytest.raises(MetadataFormatError):
        LedgerMetadata.from_bytes(data)


# -- paths and ids -----------------------------------------------------------------------------------------


def test_hierarchical_paths() -> None:
    assert ledger_path("/ledgers", 1) == "/ledgers/00/0000/L0001"
    assert ledger_path("/ledgers", 1234567890) == "/ledgers/12/3456/L7890"
    assert ledger_path("/ledgers", 2**31 - 2) == "/ledgers/21/4748/L3646"
    assert ledger_path("/ledgers", 2**31 - 1) == "/ledgers/000/0000/0021/4748/L3647"
    assert ledger_path("/ledgers", 2**62) == "/ledgers/461/1686/0184/2738/L7904"
    for ledger_id in (0, 1, 99, 2**31 - 2, 2**31 - 1, 2**62):
        parts = ledger_path("/ledgers", ledger_id).split("/")[2:]
        assert ledger_id_of(parts) == ledger_id
    assert ledger_id_of(["available", "b:1"]) is None
    assert ledger_id_of(["00", "0000", "X0001"]) is None


async def test_ids_are_unique_and_idgen_nodes_are_removed() -> None:
    store = MemoryMetadataStore()
    manager = LedgerManager(store)
    ids = [await manager.generate_id() for _ in range(5)]
    assert ids == sorted(set(ids))
    assert await store.get_children("/ledgers/idgen") == []


async def test_crud_and_listing_walk_both_hierarchies() -> None:
    manager = LedgerManager(MemoryMetadataStore())
    for ledger_id in (2**40, 3, 1, 10_000_000):
        await manager.create(ledger_id, meta())
    with pytest.raises(LedgerExistsError):
        await manager.create(3, meta())
    assert [i async for i in manager.ledger_ids()] == [1, 3, 10_000_000, 2**40]
    await manager.remove(3)
    with pytest.raises(NoSuchLedgerError):
        await manager.read(3)
    with pytest.raises(NoSuchLedgerError):
        await manager.remove(3)
    await manager.store.put("/ledgers/00/0000/L0009", b"garbage", None)
    with pytest.raises(MetaStoreError):
        await manager.read(9)


# -- the update loop ------------------------------------------------------------------------------------


class ConflictingStore(MemoryMetadataStore):
    """Every ledger write first meets a concurrent writer that bumps the version (``conflicts`` times)."""

    def __init__(self, conflicts: int) -> None:
        super().__init__()
        self.conflicts = conflicts

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        if expected_version is not None and expected_version >= 0 and self.conflicts > 0:
            self.conflicts -= 1
            current = await self.get(path)
            assert current is not None
            await super().put(path, current.value, current.stat.version)
            raise BadVersionError("concurrent writer")
        return await super().put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)


async def test_update_loop_rereads_and_reevaluates_on_conflicts() -> None:
    store = ConflictingStore(conflicts=3)
    manager = LedgerManager(store)
    created = await manager.create(1, meta())
    evaluated: list[int] = []

    def needs_update(md: LedgerMetadata) -> bool:
        evaluated.append(1)
        return md.state is LedgerState.OPEN

    loop = MetadataUpdateLoop(manager, 1, created, needs_update, lambda md: md.in_recovery(), retries_max=5)
    result = await loop.run()
    assert result.metadata.state is LedgerState.IN_RECOVERY
    assert (loop.conflicts, len(evaluated)) == (3, 4)
    assert (await manager.read(1)) == result


async def test_update_loop_stops_when_the_predicate_says_done() -> None:
    manager = LedgerManager(MemoryMetadataStore())
    created = await manager.create(1, meta())
    await manager.write(1, created.metadata.closed(-1, 0), created.version)
    loop = MetadataUpdateLoop(
        manager, 1, created, lambda md: not md.is_closed, lambda md: md.closed(5, 5), retries_max=5
    )
    result = await loop.run()
    assert (result.metadata.last_entry_id, loop.conflicts) == (-1, 1)


async def test_update_loop_gives_up_after_its_retry_budget() -> None:
    store = ConflictingStore(conflicts=10)
    manager = LedgerManager(store)
    created = await manager.create(1, meta())
    loop = MetadataUpdateLoop(
        manager, 1, created, lambda md: True, lambda md: md.in_recovery(), retries_max=3
    )
    with pytest.raises(MetadataVersionError, match="metadata_retries_max=3"):
        await loop.run()
