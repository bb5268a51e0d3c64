"""The metadata-health signal (``store.health``) through connection loss, session loss and recovery, and the
memory store's simulated outages that drive it in the tests of the layers above."""

from __future__ import annotations

import pytest
import trio

from magnetar.bookkeeper.metadata import (
    HealthChange,
    HealthState,
    MemoryMetadataStore,
    MetadataHealth,
    SessionEvent,
    StoreUnavailableError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_that_keeps_its_session() -> None:
    clock = Clock()
    health = MetadataHealth(clock)
    changes: list[HealthChange] = []
    health.add_listener(changes.append)
    assert health.healthy
    assert health.generation == 0
    assert health.outage_s() == 0.0
    health.on_session_event(SessionEvent.CONNECTION_LOST)
    clock.now += 7.5
    assert not health.healthy
    assert health.state is HealthState.DISCONNECTED
    assert health.outage_s() == 7.5
    assert not health.uninterrupted_since(0)
    health.on_session_event(SessionEvent.RECONNECTED)
    assert health.healthy
    assert health.generation == 1
    assert health.sessions_lost_total == 0
    assert health.uninterrupted_since(1)
    assert not health.uninterrupted_since(0)
    assert changes == [
        HealthChange(False, HealthState.DISCONNECTED, 1, 0.0, False),
        HealthChange(True, HealthState.CONNECTED, 1, 7.5, False),
    ]


def test_an_outage_that_loses_its_session() -> None:
    clock = Clock()
    health = MetadataHealth(clock)
    changes: list[HealthChange] = []
    health.add_listener(changes.append)
    health.on_session_event(SessionEvent.CONNECTION_LOST)
    clock.now += 30
    health.on_session_event(SessionEvent.SESSION_LOST)
    assert health.state is HealthState.SESSION_LOST
    assert health.session_lost_in_outage
    health.on_session_event(SessionEvent.SESSION_REESTABLISHED)
    assert health.healthy
    assert (health.generation, health.sessions_lost_total) == (1, 1)
    assert not health.session_lost_in_outage  # about the current outage: there is none
    assert changes[-1] == HealthChange(True, HealthState.CONNECTED, 1, 30.0, True)
    # one outage is one generation, however many events it had
    assert len(changes) == 2


def test_repeated_events_change_nothing() -> None:
    health = MetadataHealth(Clock())
    changes: list[HealthChange] = []
    health.add_listener(changes.append)
    health.on_session_event(SessionEvent.RECONNECTED)
    health.on_session_event(SessionEvent.CONNECTION_LOST)
    health.on_session_event(SessionEvent.CONNECTION_LOST)
    assert health.generation == 1
    assert len(changes) == 1


async def test_waiting_for_health_is_bounded() -> None:
    health = MetadataHealth()
    assert await health.wait_healthy(0)
    health.on_session_event(SessionEvent.CONNECTION_LOST)
    assert not await health.wait_healthy(0.05)
    async with trio.open_nursery() as nursery:
        results: list[bool] = []

        async def wait() -> None:
            results.append(await health.wait_healthy(10))

        nursery.start_soon(wait)
        await trio.sleep(0.01)
        health.on_session_event(SessionEvent.RECONNECTED)
    assert results == [True]


async def test_a_disconnected_memory_store_fails_operations_and_reconnects_with_its_session() -> None:
    store = MemoryMetadataStore("health-1")
    other = MemoryMetadataStore("health-1")
    events: list[SessionEvent] = []
    store.register_session_listener(events.append)
    await store.put("/mine", b"x", -1, ephemeral=True)
    store.disconnect()
    assert not store.health.healthy
    with pytest.raises(StoreUnavailableError):
        await store.get("/mine")
    assert await other.exists("/mine")  # the session lives on while the client is away
    store.reconnect()
    assert events == [SessionEvent.CONNECTION_LOST, SessionEvent.RECONNECTED]
    assert store.health.healthy
    assert await store.exists("/mine")
    await store.aclose()
    await other.aclose()


async def test_a_session_expiring_while_disconnected_is_learned_on_reconnection() -> None:
    store = MemoryMetadataStore("health-2")
    other = MemoryMetadataStore("health-2")
    events: list[SessionEvent] = []
    store.register_session_listener(events.append)
    await store.put("/mine", b"x", -1, ephemeral=True)
    store.disconnect()
    store.expire_session()
    assert not await other.exists("/mine")  # the server dropped it at once
    assert events == [SessionEvent.CONNECTION_LOST]
    store.reconnect()
    assert events == [
        SessionEvent.CONNECTION_LOST,
        SessionEvent.SESSION_LOST,
        SessionEvent.SESSION_REESTABLISHED,
    ]
    assert store.health.healthy
    assert store.health.sessions_lost_total == 1
    await store.put("/mine", b"again", -1, ephemeral=True)
    await store.aclose()
    await other.aclose()
