"""The retention service over a real managed ledger (in-process bookies): trimming, TTL, backlog quotas."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio
from fixtures.client import open_in_process_bookies

from magnetar.bookkeeper.client import BookKeeper, ClientSettings, NoSuchLedgerError, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore, MetadataStoreError
from magnetar.gc.backlog_quota import QuotaVerdict
from magnetar.gc.policies import BacklogPolicy, BacklogQuotaLimit, FixedPolicies, TopicRetentionPolicies
from magnetar.gc.retention import RetentionService
from magnetar.gc.settings import RetentionSettings
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings
from magnetar.managed_ledger.trim import RetentionPolicy

_TIME = struct.Struct(">q")


def entry(publish_ms: int, size: int = 100) -> bytes:
    """A test entry: its publish time (8 bytes) and padding."""
    return _TIME.pack(publish_ms) + b"x" * (size - _TIME.size)


def publish_time_of(data: bytes) -> int:
    if len(data) < _TIME.size:
        raise ValueError("short entry")
    return int(_TIME.unpack_from(data)[0])


class FakeClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def monotonic(self) -> float:
        return self.now_ms / 1000

    def time_ms(self) -> int:
        return self.now_ms


@dataclass
class MutablePolicies:
    policies: TopicRetentionPolicies

    async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
        return self.policies


@dataclass
class Env:
    metadata: MemoryMetadataStore
    bk: BookKeeper
    factory: ManagedLedgerFactory
    service: RetentionService
    source: MutablePolicies
    clock: FakeClock


@pytest.fixture
def ml_settings() -> ManagedLedgerSettings:
    return ManagedLedgerSettings(
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        max_entries_per_ledger=100,
        min_ledger_rollover_time_min=0,
        mark_delete_rate_per_s=1000,
    )


@pytest.fixture
async def env(ml_settings: ManagedLedgerSettings) -> AsyncIterator[Env]:
    metadata = MemoryMetadataStore()
    clock = FakeClock()
    source = MutablePolicies(TopicRetentionPolicies(RetentionPolicy(0, 0)))
    service = RetentionService(source, RetentionSettings(), publish_time_of=publish_time_of, clock=clock)
    async with (
        open_in_process_bookies(metadata, 1) as bookies,
        open_bookkeeper(
            metadata, bookies.transport, ClientSettings(ensemble_size=1, write_quorum=1, ack_quorum=1)
        ) as bk,
        open_managed_ledger_factory(
            bk, metadata, ml_settings, on_trim_candidate=service.on_trim_candidate
        ) as f,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(service.run, f)
        yield Env(metadata, bk, f, service, source, clock)
        nursery.cancel_scope.cancel()
    await metadata.aclose()


async def produce(ml: ManagedLedger, count: int, payload: bytes) -> Position:
    done = trio.Event()
    results: list[object] = []

    def callback(result: object) -> None:
        results.append(result)
        if len(results) == count:
            done.set()

    for _ in range(count):
        await ml.wait_for_capacity()
        ml.add_entry_nowait(payload, callback)
    await done.wait()
    assert all(isinstance(r, Position) for r in results), results[:3]
    last = results[-1]
    assert isinstance(last, Position)
    return last


async def stored_ledger_ids(metadata: MemoryMetadataStore, name: str) -> list[int]:
    info = await MetaStore(metadata).get_ledger_info(name)
    assert info is not None
    return [ledger.ledger_id for ledger in info.value.ledgers]


async def assert_deleted_from_bookkeeper(bk: BookKeeper, ledger_ids: list[int]) -> None:
    for ledger_id in ledger_ids:
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(ledger_id, password=b"", recovery=False)


@pytest.mark.parametrize("ml_settings", [ManagedLedgerSettings(
    ensemble_size=1, write_quorum=1, ack_quorum=1, max_entries_per_ledger=500,
    min_ledger_rollover_time_min=0, mark_delete_rate_per_s=1000,
)])  # fmt: skip
async def test_retention_rules_on_three_ledgers(env: Env) -> None:
    """The issue's retention scenario at the managed-ledger level, scaled down (the 120,000-message version
    runs end to end in tests/e2e/test_admin_broker.py): 1,200 entries of 10 KB make three ledgers (500, 500,
    200); once consumed, -1/-1 keeps everything, a 6 MB size limit deletes the oldest ledger only, 0/0
    deletes both closed ledgers from the metadata store and BookKeeper, and the current ledger stays."""
    name = "public/default/persistent/retention"
    env.source.policies = TopicRetentionPolicies(RetentionPolicy(-1, -1))
    ml = await env.factory.open(name)
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    await produce(ml, 1_200, entry(env.clock.now_ms, size=10_000))
    first, second, current = [info.ledger_id for info in ml.ledgers]
    assert [info.entries for info in ml.ledgers] == [500, 500, 200]
    consumed = 0
    while consumed < 1_200:
        batch = await cursor.read_entries(100)
        consumed += len(batch)
        cursor.ack_cumulative(batch[-1].position)
    await cursor.flush()
    await env.service.wait_idle()

    assert await env.service.trim(ml) == []  # -1/-1: infinite retention
    assert await stored_ledger_ids(env.metadata, name) == [first, second, current]

    env.source.policies = TopicRetentionPolicies(RetentionPolicy(-1, 6))  # 12 MB stored, keep >= 6 MB
    assert await env.service.trim(ml) == [first]
    assert await stored_ledger_ids(env.metadata, name) == [second, current]

    env.source.policies = TopicRetentionPolicies(RetentionPolicy(0, 0))
    assert await env.service.trim(ml) == [second]
    assert await stored_ledger_ids(env.metadata, name) == [current]
    await assert_deleted_from_bookkeeper(env.bk, [first, second])
    assert ml.current_ledger_id == current
    remaining = await ml.read_entries(Position(current, 0), 10)
    assert len(remaining) == 10
    assert env.service.stats.ledgers_deleted == 2


async def test_rollover_and_acks_trigger_trims(env: Env) -> None:
    """No periodic pass needed: the factory's hook queues a trim after rollovers and cursor moves."""
    name = "public/default/persistent/events"
    ml = await env.factory.open(name)
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    last = await produce(ml, 250, entry(env.clock.now_ms))
    ids = [info.ledger_id for info in ml.ledgers]
    assert len(ids) == 3
    await env.service.wait_idle()
    assert await stored_ledger_ids(env.metadata, name) == ids  # nothing consumed yet: nothing trimmed
    entries = []
    while len(entries) < 250:
        entries += await cursor.read_entries(100)
    cursor.ack_cumulative(last)
    await cursor.flush()  # persisting moves the slowest cursor into the current ledger: a trim candidate
    await env.service.wait_idle()
    assert await stored_ledger_ids(env.metadata, name) == [ids[2]]
    await assert_deleted_from_bookkeeper(env.bk, ids[:2])


async def test_unacked_data_is_never_trimmed(env: Env) -> None:
    name = "public/default/persistent/unacked"
    ml = await env.factory.open(name)
    cursor = await ml.open_cursor("slow", start_at_earliest=True)
    await produce(ml, 250, entry(env.clock.now_ms))
    cursor.ack_cumulative(Position(ml.ledgers.infos()[0].ledger_id, 99))  # only the first ledger
    await cursor.flush()
    await env.service.wait_idle()
    await env.service.trim_all()
    assert len(await stored_ledger_ids(env.metadata, name)) == 2


async def test_trim_queue_coalesces_and_is_bounded() -> None:
    @dataclass
    class Named:
        name: str

    service = RetentionService(FixedPolicies(), RetentionSettings(trim_queue_max=2))
    for name in ["a", "a", "b", "b", "c"]:
        service.on_trim_candidate(Named(name))  # type: ignore[arg-type]
    assert list(service._pending) == ["a", "b"]
    assert service.stats.trim_events_dropped == 1


async def test_unreadable_policies_skip_the_topic(env: Env) -> None:
    class Broken:
        async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
            raise MetadataStoreError("unreachable")

    ml = await env.factory.open("public/default/persistent/broken")
    service = RetentionService(Broken())
    assert await service.trim(ml) == []
    assert service.stats.trims == 0


async def test_message_ttl_acknowledges_old_messages(env: Env) -> None:
    ml = await env.factory.open("public/default/persistent/ttl")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    now = env.clock.now_ms
    await produce(ml, 150, entry(now - 600_000))  # ten minutes old
    await produce(ml, 70, entry(now - 5_000))  # five seconds old
    assert cursor.backlog() == 220
    moved: list[tuple[str, str]] = []
    env.service.on_cursor_moved = lambda m, name: moved.append((m.name, name))
    assert await env.service.expire(ml, ttl_s=60) == 150
    assert cursor.backlog() == 70
    assert moved == [(ml.name, "sub")]  # the broker's dispatcher is told
    assert await env.service.expire(ml, ttl_s=60) == 0
    env.clock.now_ms += 120_000
    assert await env.service.expire(ml, ttl_s=60) == 70
    assert cursor.backlog() == 0


async def test_size_quota_eviction_moves_slow_cursors(env: Env) -> None:
    ml = await env.factory.open("public/default/persistent/evict")
    slow = await ml.open_cursor("slow", start_at_earliest=True)
    await produce(ml, 200, entry(env.clock.now_ms, size=1000))  # 200,000 bytes behind "slow"
    quota = BacklogQuotaLimit(limit_bytes=50_000, policy=BacklogPolicy.CONSUMER_BACKLOG_EVICTION)
    policies = TopicRetentionPolicies(RetentionPolicy(0, 0), size_quota=quota)
    assert await env.service.check_backlog_quota(ml, policies)
    assert slow.backlog() == 45  # 0.9 * 50,000 bytes of 1,000-byte entries
    assert env.service.stats.backlog_entries_evicted == 155
    assert env.service.quota.verdict(ml.name) is QuotaVerdict.OK
    assert not await env.service.check_backlog_quota(ml, policies)


async def test_producer_quota_policies_hold_and_reject(env: Env) -> None:
    ml = await env.factory.open("public/default/persistent/hold")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    last = await produce(ml, 100, entry(env.clock.now_ms, size=1000))
    hold = TopicRetentionPolicies(size_quota=BacklogQuotaLimit(limit_bytes=10_000))
    assert await env.service.check_backlog_quota(ml, hold)
    assert env.service.quota.verdict(ml.name) is QuotaVerdict.HOLD
    released = trio.Event()

    async def held_producer() -> None:
        await env.service.quota.wait_until_within_quota(ml.name)
        released.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(held_producer)
        await trio.testing.wait_all_tasks_blocked()
        assert not released.is_set()
        cursor.ack_cumulative(last)
        assert not await env.service.check_backlog_quota(ml, hold)
        await released.wait()
    assert env.service.quota.verdict(ml.name) is QuotaVerdict.OK

    await produce(ml, 100, entry(env.clock.now_ms, size=1000))
    reject = TopicRetentionPolicies(
        size_quota=BacklogQuotaLimit(limit_bytes=10_000, policy=BacklogPolicy.PRODUCER_EXCEPTION)
    )
    assert await env.service.check_backlog_quota(ml, reject)
    assert env.service.quota.verdict(ml.name) is QuotaVerdict.REJECT


async def test_message_age_quota(env: Env) -> None:
    ml = await env.factory.open("public/default/persistent/age")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    now = env.clock.now_ms
    await produce(ml, 30, entry(now - 3_600_000))
    await produce(ml, 20, entry(now))
    evict = TopicRetentionPolicies(
        age_quota=BacklogQuotaLimit(limit_time_s=600, policy=BacklogPolicy.CONSUMER_BACKLOG_EVICTION)
    )
    assert await env.service.check_backlog_quota(ml, evict)
    assert cursor.backlog() == 20
    assert not await env.service.check_backlog_quota(ml, evict)
    hold = TopicRetentionPolicies(age_quota=BacklogQuotaLimit(limit_time_s=60))
    env.clock.now_ms += 120_000
    assert await env.service.check_backlog_quota(ml, hold)
    assert env.service.quota.verdict(ml.name) is QuotaVerdict.HOLD


async def test_inactive_topics_are_kept_unless_enabled(env: Env) -> None:
    ml = await env.factory.open("public/default/persistent/idle")
    asked: list[str] = []

    async def delete(candidate: ManagedLedger) -> bool:
        asked.append(candidate.name)
        return True

    service = RetentionService(FixedPolicies(), delete_inactive_topic=delete)
    service._factory = env.factory
    await service.delete_inactive()
    assert asked == []  # the default: never delete
    enabled = RetentionService(
        FixedPolicies(), RetentionSettings(delete_inactive_topics_enabled=True), delete_inactive_topic=delete
    )
    enabled._factory = env.factory
    await enabled.delete_inactive()
    assert asked == [ml.name]
    assert enabled.stats.inactive_topics_deleted == 1
