"""Registration in the metadata store, read-only mode, the disk monitor and the settings validator."""

from __future__ import annotations

import logging

import pydantic
import pytest
import trio
import trio.testing
from fixtures.bookie_server import add_request, bookie_settings, call, running_bookie

from magnetar.bookkeeper.bookie.disk_monitor import DiskMonitor, DiskThresholds, ReadOnlyState
from magnetar.bookkeeper.bookie.registration import RegistrationError
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata.bookies import (
    BookieLists,
    BookieServiceInfo,
    list_bookies,
    read_bookie_info,
    readonly_path,
    writable_path,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.messages import AddResponse
from magnetar.bookkeeper.protocol.status import BookieStatus


class ProbedStore(MemoryLedgerStore):
    """A memory store whose disk usage the test sets."""

    def __init__(self) -> None:
        super().__init__(capacity_bytes=1000)
        self.used_fraction = 0.0
        self.journal_used_fraction = 0.0

    def disk_usage(self) -> DiskUsage:
        return DiskUsage(1000, round(1000 * (1 - self.used_fraction)))

    def journal_disk_usage(self) -> DiskUsage:
        return DiskUsage(1000, round(1000 * (1 - self.journal_used_fraction)))


async def test_bookie_registers_writable_then_readonly_then_unregisters() -> None:
    metadata = MemoryMetadataStore()
    async with running_bookie(metadata=metadata, http_port=8123) as bk:
        bookie_id = bk.bookie_id
        assert await list_bookies(metadata) == BookieLists(writable=[bookie_id], readonly=[])
        info = await read_bookie_info(metadata, bookie_id)
        assert info == BookieServiceInfo(bookie_id, "127.0.0.1", bk.endpoint.port, 8123, False)
        stat = await metadata.get(writable_path(bookie_id))
        assert stat is not None
        assert stat.stat.ephemeral

        bk.bookie.state.set(True, "test")
        await trio.testing.wait_all_tasks_blocked()
        assert await list_bookies(metadata) == BookieLists(writable=[], readonly=[bookie_id])
        readonly_info = await read_bookie_info(metadata, bookie_id)
        assert readonly_info is not None
        assert readonly_info.readonly

        bk.bookie.state.set(False, "test")
        await trio.testing.wait_all_tasks_blocked()
        assert await list_bookies(metadata) == BookieLists(writable=[bookie_id], readonly=[])
    assert await list_bookies(metadata) == BookieLists()


async def test_bookie_registers_again_after_a_session_loss() -> None:
    metadata = MemoryMetadataStore()
    async with running_bookie(metadata=metadata) as bk:
        registration = bk.bookie.registration
        assert registration is not None
        assert registration.registrations == 1
        metadata.expire_session()
        await trio.testing.wait_all_tasks_blocked()
        assert registration.registrations == 2
        assert await list_bookies(metadata) == BookieLists(writable=[bk.bookie_id])


async def test_a_metadata_outage_changes_nothing_but_waits_to_register_a_mode_switch() -> None:
    shared = "bookie-outage-test"
    metadata, observer = MemoryMetadataStore(shared), MemoryMetadataStore(shared)
    async with running_bookie(metadata=metadata) as bk, open_tcp_transport() as transport:
        registration = bk.bookie.registration
        assert registration is not None
        metadata.disconnect()
        metadata.expire_session()  # the registration is gone on the server; the bookie learns it later
        accepted = await call(transport, bk.bookie_id, add_request(7, 0))
        assert accepted.status is BookieStatus.EOK  # writes need no metadata
        bk.bookie.state.set(True, "test")  # a mode switch during the outage waits for the store
        await trio.testing.wait_all_tasks_blocked()
        assert await list_bookies(observer) == BookieLists()
        metadata.reconnect()
        with trio.fail_after(5):
            while await list_bookies(observer) != BookieLists(readonly=[bk.bookie_id]):
                await trio.sleep(0.01)
        assert registration.registrations == 2


async def _free_port() -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    return port


async def test_stale_registration_of_the_same_id_must_expire_first() -> None:
    shared = "stale-registration-test"
    squatter = MemoryMetadataStore(shared)
    metadata = MemoryMetadataStore(shared)
    port = await _free_port()
    try:
        await squatter.put(writable_path(f"127.0.0.1:{port}"), b"{}", -1, ephemeral=True)
        with pytest.RaisesGroup(RegistrationError, flatten_subgroups=True):
            async with running_bookie(metadata=metadata, port=port, registration_timeout_ms=100):
                pytest.fail("the bookie must not serve under an id another session holds")
    finally:
        await squatter.aclose()
        await metadata.aclose()


async def test_stale_registration_that_expires_lets_the_bookie_register() -> None:
    shared = "expiring-registration-test"
    squatter = MemoryMetadataStore(shared)
    metadata = MemoryMetadataStore(shared)
    port = await _free_port()
    bookie_id = f"127.0.0.1:{port}"
    await squatter.put(writable_path(bookie_id), b"{}", -1, ephemeral=True)

    async def expire_later() -> None:
        await trio.sleep(0.1)
        squatter.expire_session()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(expire_later)
            async with running_bookie(metadata=metadata, port=port, registration_timeout_ms=10_000) as bk:
                assert bk.bookie_id == bookie_id
                assert await list_bookies(metadata) == BookieLists(writable=[bookie_id])
    finally:
        await squatter.aclose()
        await metadata.aclose()


async def test_disk_full_turns_the_bookie_read_only_until_below_the_low_water_mark() -> None:
    metadata = MemoryMetadataStore()
    store = ProbedStore()
    async with running_bookie(store=store, metadata=metadata) as bk, open_tcp_transport() as transport:
        monitor = bk.bookie.monitor
        store.used_fraction = 0.96
        monitor.check()
        await trio.testing.wait_all_tasks_blocked()
        assert bk.bookie.state.readonly
        assert await list_bookies(metadata) == BookieLists(readonly=[bk.bookie_id])
        refused = await call(transport, bk.bookie_id, add_request(1, 0))
        assert isinstance(refused, AddResponse)
        assert refused.status is BookieStatus.EREADONLY
        assert b"bookie_SERVER_STATUS 0.0" in bk.bookie.render_metrics()
        store.used_fraction = 0.92  # between lwm and threshold: stays read-only (no flapping)
        monitor.check()
        assert bk.bookie.state.readonly
        store.used_fraction = 0.85
        monitor.check()
        await trio.testing.wait_all_tasks_blocked()
        assert not bk.bookie.state.readonly
        assert await list_bookies(metadata) == BookieLists(writable=[bk.bookie_id])
        accepted = await call(transport, bk.bookie_id, add_request(1, 0))
        assert accepted.status is BookieStatus.EOK


async def test_full_disk_at_start_registers_read_only() -> None:
    metadata = MemoryMetadataStore()
    store = ProbedStore()
    store.used_fraction = 0.99
    async with running_bookie(store=store, metadata=metadata) as bk:
        assert bk.bookie.state.readonly
        assert await list_bookies(metadata) == BookieLists(readonly=[bk.bookie_id])
        assert bk.bookie.registration is not None
        assert bk.bookie.registration.registered_path == readonly_path(bk.bookie_id)


def test_disk_monitor_thresholds_and_warning(caplog: pytest.LogCaptureFixture) -> None:
    usage = [0.5]
    state = ReadOnlyState()
    monitor = DiskMonitor(
        lambda: DiskUsage(100, round(100 * (1 - usage[0]))),
        state,
        DiskThresholds(0.95, 0.8, 0.9),
        interval_ms=1,
    )
    with caplog.at_level(logging.WARNING):
        assert monitor.check() == 0.5
        assert not caplog.records
        usage[0] = 0.85
        monitor.check()
        monitor.check()
    warnings = [r for r in caplog.records if "disk_usage_warn_threshold" in r.getMessage()]
    assert len(warnings) == 1  # once per excursion
    assert not state.readonly
    usage[0] = 0.96
    monitor.check()
    assert state.readonly
    usage[0] = 0.89
    monitor.check()
    assert not state.readonly


def test_a_full_journal_volume_alone_turns_the_bookie_read_only() -> None:
    ledger, journal = [0.5], [0.5]
    state = ReadOnlyState()
    monitor = DiskMonitor(
        lambda: DiskUsage(100, round(100 * (1 - ledger[0]))),
        state,
        DiskThresholds(0.95, 0.9, 0.9),
        interval_ms=1,
        journal_probe=lambda: DiskUsage(100, round(100 * (1 - journal[0]))),
    )
    assert monitor.check() == 0.5
    journal[0] = 0.97
    assert monitor.check() == 0.5  # the ledger volume's usage
    assert state.readonly
    assert "journal disk usage above disk_usage_threshold: 97.0% > 95%" in state.reason
    assert monitor.full_volumes == ["journal"]
    assert monitor.journal_full
    ledger[0] = 0.96
    journal[0] = 0.5
    monitor.check()
    assert state.readonly  # the ledger volume is full now
    assert monitor.full_volumes == ["ledger"]
    assert not monitor.journal_full
    ledger[0] = 0.92  # between the low-water mark and the threshold: still full
    monitor.check()
    assert state.readonly
    ledger[0] = 0.5
    monitor.check()
    assert not state.readonly
    assert monitor.full_volumes == []


async def test_a_full_journal_volume_makes_the_bookie_not_ready() -> None:
    metadata = MemoryMetadataStore()
    store = ProbedStore()
    async with running_bookie(store=store, metadata=metadata) as bk:
        assert bk.bookie.is_ready
        store.journal_used_fraction = 0.99
        bk.bookie.monitor.check()
        await trio.testing.wait_all_tasks_blocked()
        assert not bk.bookie.is_ready
        assert await list_bookies(metadata) == BookieLists(readonly=[bk.bookie_id])
        store.journal_used_fraction = 0.1
        bk.bookie.monitor.check()
        await trio.testing.wait_all_tasks_blocked()
        assert bk.bookie.is_ready
        assert await list_bookies(metadata) == BookieLists(writable=[bk.bookie_id])


def test_monitor_does_not_lift_a_read_only_mode_it_did_not_impose() -> None:
    state = ReadOnlyState()
    state.set(True, "operator")
    monitor = DiskMonitor(lambda: DiskUsage(100, 90), state, DiskThresholds(), interval_ms=1)
    monitor.check()
    assert state.readonly


def test_failing_probe_leaves_the_mode_alone() -> None:
    state = ReadOnlyState()

    def probe() -> DiskUsage:
        raise OSError("disk gone")

    assert DiskMonitor(probe, state, DiskThresholds(), interval_ms=1).check() is None
    assert not state.readonly


def test_settings_validate_threshold_relations_and_read_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(pydantic.ValidationError, match="lwm"):
        bookie_settings(disk_usage_lwm_threshold=0.97)
    with pytest.raises(pydantic.ValidationError, match="warn"):
        bookie_settings(disk_usage_warn_threshold=0.99)
    with pytest.raises(ValueError, match="thresholds"):
        DiskThresholds(0.9, 0.8, 0.95)
    monkeypatch.setenv("MAGNETAR_INFLIGHT_REQUESTS_MAX", "17")
    monkeypatch.setenv("MAGNETAR_DISK_USAGE_THRESHOLD", "0.5")
    monkeypatch.setenv("MAGNETAR_DISK_USAGE_LWM_THRESHOLD", "0.4")
    monkeypatch.setenv("MAGNETAR_DISK_USAGE_WARN_THRESHOLD", "0.45")
    settings = bookie_settings()
    assert settings.inflight_requests_max == 17
    assert settings.disk_usage_threshold == 0.5


def test_service_info_json_round_trip_and_rejects_garbage() -> None:
    info = BookieServiceInfo("h:1", "h", 1, 8080, True)
    assert BookieServiceInfo.from_json(info.to_json()) == info
    assert BookieServiceInfo.from_json(BookieServiceInfo("h:1", "h", 1).to_json()).http_port is None
    with pytest.raises(ValueError, match="registration"):
        BookieServiceInfo.from_json(b"{}")
