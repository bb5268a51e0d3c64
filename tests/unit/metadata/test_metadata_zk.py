"""ZooKeeper backend: sessions, reconnection and an unreachable server, against a real ZooKeeper."""

from __future__ import annotations

import threading
import uuid

import pytest
import trio
from fixtures.metadata import TEST_ZK_SETTINGS, Recorder
from fixtures.tcp_proxy import TcpProxy
from fixtures.zookeeper import ZooKeeperServer
from kazoo.client import KazooClient
from kazoo.protocol.serialization import int_int_struct, write_string

from magnetar.bookkeeper.metadata import (
    HealthState,
    Notification,
    NotificationType,
    SessionEvent,
    StoreUnavailableError,
)
from magnetar.bookkeeper.metadata.factory import open_metadata_store
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings
from magnetar.bookkeeper.metadata.zk_store import ZkMetadataStore, _route_watch_events, handshake_hosts

pytestmark = pytest.mark.zookeeper

UNAVAILABLE_WITHIN_S = 15.0
"""Bound on an operation against a dead or hung ZooKeeper (session 4 s: kazoo drops a silent connection
after 2/3 of it)."""


def _chroot() -> str:
    return f"/test-{uuid.uuid4().hex[:12]}"


def _non_trio_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.name.startswith("Trio thread")}


def _healed(events: list[SessionEvent]) -> bool:
    """The connection came back after it was lost (with the same session or a new one)."""
    return SessionEvent.CONNECTION_LOST in events and events[-1] in (
        SessionEvent.RECONNECTED,
        SessionEvent.SESSION_REESTABLISHED,
    )


async def test_session_expiry_drops_ephemerals_and_reestablishes(
    zookeeper_server: ZooKeeperServer, nursery: trio.Nursery
) -> None:
    proxy = TcpProxy("127.0.0.1", zookeeper_server.port or 0)
    await nursery.start(proxy.run)
    chroot = _chroot()
    short_session = MetadataStoreSettings(session_timeout_ms=1_500, operation_timeout_ms=5_000)
    async with (
        open_metadata_store(f"zk:127.0.0.1:{proxy.port}{chroot}", short_session) as store,
        open_metadata_store(zookeeper_server.url(chroot), TEST_ZK_SETTINGS) as observer,
    ):
        sessions: Recorder[SessionEvent] = Recorder()
        store.register_session_listener(sessions)
        await store.put("/owner", b"me", -1, ephemeral=True)
        observed: Recorder[Notification] = Recorder()
        observer.register_listener(observed)
        assert isinstance(store, ZkMetadataStore)
        old_session = store.client_id

        proxy.partition()
        await sessions.wait_for_all([SessionEvent.CONNECTION_LOST])
        assert not store.health.healthy
        assert store.health.state is HealthState.DISCONNECTED
        with pytest.raises(StoreUnavailableError):
            await store.get("/owner")
        # The server expires the session it no longer hears from, and its ephemeral node with it.
        await observed.wait_for_all([Notification(NotificationType.DELETED, "/owner")])
        proxy.heal()
        await sessions.wait_for_sequence(
            [SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
        )
        assert SessionEvent.RECONNECTED not in sessions.events
        assert store.health.healthy
        assert (store.health.generation, store.health.sessions_lost_total) == (1, 1)
        assert old_session is not None
        assert store.client_id is not None
        assert store.client_id[0] != old_session[0]
        assert not await store.exists("/owner")

        # Notifications flow on the new session: the watch was re-armed before the event.
        notes: Recorder[Notification] = Recorder()
        store.register_listener(notes)
        await observer.put("/after", b"", -1)
        await notes.wait_for_all([Notification(NotificationType.CREATED, "/after")])
        await store.put("/owner", b"me again", -1, ephemeral=True)
    nursery.cancel_scope.cancel()


async def test_notifications_and_session_survive_a_server_restart(private_zookeeper: ZooKeeperServer) -> None:
    settings = MetadataStoreSettings(session_timeout_ms=20_000, operation_timeout_ms=5_000)
    async with open_metadata_store(private_zookeeper.url(_chroot()), settings) as store:
        sessions: Recorder[SessionEvent] = Recorder()
        notes: Recorder[Notification] = Recorder()
        store.register_session_listener(sessions)
        store.register_listener(notes)
        await store.put("/owner", b"me", -1, ephemeral=True)

        await trio.to_thread.run_sync(private_zookeeper.restart)
        # The client must be back before the session would expire (then it is the same session); on a loaded
        # machine that can take longer than the usual event bound (a connect that reached the restarting
        # server before it served waits for its handshake timeout).
        await sessions.wait_for_sequence(
            [SessionEvent.CONNECTION_LOST, SessionEvent.RECONNECTED], settings.session_timeout_ms / 1000
        )
        assert SessionEvent.SESSION_LOST not in sessions.events
        assert store.health.healthy
        assert (store.health.generation, store.health.sessions_lost_total) == (1, 0)

        await store.put("/after-restart", b"x", -1)
        await notes.wait_for_all([Notification(NotificationType.CREATED, "/after-restart")])
        assert await store.exists("/owner")  # same session: the ephemeral node survived


async def test_stopped_server_fails_operations_promptly(private_zookeeper: ZooKeeperServer) -> None:
    async with open_metadata_store(private_zookeeper.url(_chroot()), TEST_ZK_SETTINGS) as store:
        sessions: Recorder[SessionEvent] = Recorder()
        store.register_session_listener(sessions)
        await store.put("/a", b"x", -1)
        await trio.to_thread.run_sync(private_zookeeper.stop)
        with trio.fail_after(UNAVAILABLE_WITHIN_S):
            with pytest.raises(StoreUnavailableError):
                await store.get("/a")
            with pytest.raises(StoreUnavailableError):
                await store.put("/b", b"y", None)
        await sessions.wait_for_all([SessionEvent.CONNECTION_LOST])
        await trio.to_thread.run_sync(private_zookeeper.start)
        await sessions.wait_for(_healed, "the connection to come back")
        got = await store.get("/a")
        assert got is not None
        assert got.value == b"x"


async def test_hung_server_fails_operations_within_the_session_bound(
    private_zookeeper: ZooKeeperServer,
) -> None:
    async with open_metadata_store(private_zookeeper.url(_chroot()), TEST_ZK_SETTINGS) as store:
        sessions: Recorder[SessionEvent] = Recorder()
        store.register_session_listener(sessions)
        await store.put("/a", b"x", -1)
        private_zookeeper.pause()
        try:
            with trio.fail_after(UNAVAILABLE_WITHIN_S), pytest.raises(StoreUnavailableError):
                await store.get("/a")
        finally:
            private_zookeeper.resume()
        await sessions.wait_for(_healed, "the connection to come back")
        got = await store.get("/a")
        assert got is not None
        assert got.value == b"x"


async def test_unreachable_server_fails_open_and_leaves_no_threads() -> None:
    with trio.socket.socket() as probe:  # a port nobody listens on
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = _non_trio_threads()
    settings = MetadataStoreSettings(operation_timeout_ms=1_000)
    with (
        trio.fail_after(UNAVAILABLE_WITHIN_S),
        pytest.raises(StoreUnavailableError, match="no ZooKeeper session"),
    ):
        async with open_metadata_store(f"zk:127.0.0.1:{port}", settings):
            pass
    assert _non_trio_threads() == before


async def test_close_stops_kazoo_threads(zookeeper_url: str) -> None:
    before = _non_trio_threads()
    async with open_metadata_store(zookeeper_url, TEST_ZK_SETTINGS) as store:
        await store.put("/a", b"", None)
        assert _non_trio_threads() > before
    assert _non_trio_threads() == before


async def test_nested_chroot_is_created_and_isolated(zookeeper_server: ZooKeeperServer) -> None:
    parent = _chroot()
    async with (
        open_metadata_store(zookeeper_server.url(f"{parent}/tenant/a"), TEST_ZK_SETTINGS) as a,
        open_metadata_store(zookeeper_server.url(f"{parent}/tenant/b"), TEST_ZK_SETTINGS) as b,
        open_metadata_store(zookeeper_server.url(parent), TEST_ZK_SETTINGS) as whole,
    ):
        await a.put("/x", b"a", None)
        await b.put("/x", b"b", None)
        got = await whole.get("/tenant/a/x")
        assert got is not None
        assert got.value == b"a"
        assert await a.get_children("/") == ["x"]
        assert await whole.get_children("/tenant") == ["a", "b"]


def test_watch_events_of_unknown_types_are_dropped_quietly() -> None:
    """kazoo logs unknown event types with the deprecated Logger.warn: under -W error that would kill its
    connection thread, so the store drops them before kazoo sees them (ZooKeeper 3.6+ has such types, e.g.
    PersistentWatchRemoved)."""
    client = KazooClient(hosts="127.0.0.1:1")  # never started: no threads, no connection
    delivered: list[tuple[NotificationType, str]] = []
    _route_watch_events(client, lambda kind, path: delivered.append((kind, path)))

    def event(kind: int, path: str) -> bytes:
        return bytes(int_int_struct.pack(kind, 3) + write_string(path))

    client._connection._read_watch_event(event(7, "/x"), 0)
    client._connection._read_watch_event(event(1, "/a/b"), 0)
    client._connection._read_watch_event(event(3, "/a/b"), 0)
    assert delivered == [(NotificationType.CREATED, "/a/b"), (NotificationType.MODIFIED, "/a/b")]


def test_short_host_lists_are_repeated_so_a_stalled_handshake_cannot_expire_the_session() -> None:
    # kazoo's handshake timeout is the session timeout divided by the number of hosts
    assert handshake_hosts("127.0.0.1:2181") == "127.0.0.1:2181,127.0.0.1:2181,127.0.0.1:2181"
    assert handshake_hosts("a:1, b:2") == "a:1,b:2,a:1,b:2"
    assert handshake_hosts("a:1,b:2,c:3") == "a:1,b:2,c:3"
    assert handshake_hosts("a:1/chroot") == "a:1/chroot"
