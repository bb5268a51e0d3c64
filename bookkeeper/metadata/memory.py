"""In-memory metadata store (``memory://`` and ``memory://NAME``), for tests and simulations.

``memory://`` gives a private tree. ``memory://NAME`` shares one tree among every store opened with the same
name in this process, and each store is its own session: ephemeral nodes of a store disappear when it is
closed or when :meth:`MemoryMetadataStore.expire_session` simulates a ZooKeeper session expiry. That lets a
test run two "brokers" against one store and kill one of them.

Outages are simulated as ZooKeeper clients see them: :meth:`~MemoryMetadataStore.disconnect` (every operation
of this store fails with :class:`~.api.StoreUnavailableError`, others go on), :meth:`~MemoryMetadataStore.
expire_session` while disconnected (the server drops the session's ephemeral nodes at once, so other stores
see them go; this store learns it only when it reconnects) and :meth:`~MemoryMetadataStore.reconnect`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.bookkeeper.metadata.api import (
    BadVersionError,
    GetResult,
    InvalidPathError,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationListener,
    NotificationType,
    SessionEvent,
    SessionListener,
    Stat,
    StoreUnavailableError,
    Unregister,
    check_expected_version,
    check_put_condition,
    check_value,
    join,
    parent_of,
    sequential_name,
    validate_path,
)
from magnetar.bookkeeper.metadata.health import MetadataHealth
from magnetar.bookkeeper.metadata.listeners import ListenerSet

_session_ids = itertools.count(1)


@dataclass(slots=True)
class _Node:
    value: bytes
    version: int
    created_ms: int
    modified_ms: int
    owner_session: int | None  # None = persistent
    children: set[str] = field(default_factory=set)
    sequence: int = 0

    def stat(self, path: str) -> Stat:
        return Stat(path, self.version, self.created_ms, self.modified_ms, self.owner_session is not None)


class _Tree:
    """One tree shared by the stores that opened it; owns the fan-out of notifications."""

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self.clock_ms = clock_ms
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, None)}
        self.stores: set[MemoryMetadataStore] = set()

    def notify(self, kind: NotificationType, path: str) -> None:
        event = Notification(kind, path)
        for store in list(self.stores):
            store.deliver(event)


_shared_trees: dict[str, _Tree] = {}


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class MemoryMetadataStore:
    def __init__(self, name: str | None = None, clock_ms: Callable[[], int] = _wall_ms) -> None:
        if name:
            tree = _shared_trees.get(name)
            if tree is None:
                tree = _shared_trees[name] = _Tree(clock_ms)
        else:
            tree = _Tree(clock_ms)
        self._tree = tree
        self._session = next(_session_ids)
        self._closed = False
        self._listeners: ListenerSet[Notification] = ListenerSet()
        self._session_listeners: ListenerSet[SessionEvent] = ListenerSet()
        self.health = MetadataHealth()
        self._session_listeners.add(self.health.on_session_event)  # first: listeners see the new health
        self._connected = True
        self._expired_while_disconnected = False
        tree.stores.add(self)

    # -- reads -------------------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        self._check_open()
        node = self._tree.nodes.get(validate_path(path))
        return None if node is None else GetResult(node.value, node.stat(path))

    async def get_children(self, path: str) -> list[str]:
        self._check_open()
        node = self._tree.nodes.get(validate_path(path))
        return [] if node is None else sorted(node.children)

    async def exists(self, path: str) -> bool:
        self._check_open()
        return validate_path(path) in self._tree.nodes

    # -- writes ------------------------------------------------------------------------------------------

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        self._check_open()
        validate_path(path)
        check_value(value)
        check_expected_version(expected_version)
        if path == "/":
            raise InvalidPathError("cannot write the root node")
        nodes = self._tree.nodes
        if sequential:
            parent = self._ensure_parents(parent_of(path))
            path = sequential_name(path, parent.sequence)
            parent.sequence += 1
        node = nodes.get(path)
        check_put_condition(path, None if node is None else node.version, expected_version)
        now = self._tree.clock_ms()
        if node is not None:
            node.value = bytes(value)
            node.version += 1
            node.modified_ms = now
            self._tree.notify(NotificationType.MODIFIED, path)
            return node.stat(path)
        parent_path = parent_of(path)
        parent = self._ensure_parents(parent_path)
        if parent.owner_session is not None:
            raise InvalidPathError(f"ephemeral node {parent_path} cannot have children")
        node = _Node(bytes(value), 0, now, now, self._session if ephemeral else None)
        nodes[path] = node
        parent.children.add(path.rsplit("/", 1)[1])
        self._tree.notify(NotificationType.CREATED, path)
        self._tree.notify(NotificationType.CHILDREN_CHANGED, parent_path)
        return node.stat(path)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._check_open()
        if validate_path(path) == "/":
            raise InvalidPathError("cannot delete the root node")
        node = self._tree.nodes.get(path)
        if node is None:
            raise NotFoundError(path)
        if expected_version is not None and expected_version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, expected {expected_version}")
        if node.children:
            raise NotEmptyError(f"{path} has children")
        self._remove(path)

    async def delete_recursive(self, path: str) -> None:
        self._check_open()
        if validate_path(path) == "/":
            raise InvalidPathError("cannot delete the root node")
        node = self._tree.nodes.get(path)
        if node is None:
            return
        for child in sorted(node.children):
            await self.delete_recursive(join(path, child))
        self._remove(path)

    # -- notifications and sessions -----------------------------------------------------------------------

    def register_listener(self, listener: NotificationListener) -> Unregister:
        return self._listeners.add(listener)

    def register_session_listener(self, listener: SessionListener) -> Unregister:
        return self._session_listeners.add(listener)

    def deliver(self, event: Notification) -> None:
        self._listeners.emit(event)

    def expire_session(self) -> None:
        """Simulate a session expiry: drop this session's ephemeral nodes, then start a new session.

        While disconnected the nodes are dropped at once but the events wait for :meth:`reconnect`."""
        if not self._connected:
            self._drop_ephemerals()
            self._expired_while_disconnected = True
            return
        self._session_listeners.emit(SessionEvent.CONNECTION_LOST)
        self._drop_ephemerals()
        self._session_listeners.emit(SessionEvent.SESSION_LOST)
        self._session = next(_session_ids)
        self._session_listeners.emit(SessionEvent.SESSION_REESTABLISHED)

    def disconnect(self) -> None:
        """Simulate a lost connection: this store's operations fail until :meth:`reconnect`."""
        if not self._connected:
            return
        self._connected = False
        self._session_listeners.emit(SessionEvent.CONNECTION_LOST)

    def reconnect(self) -> None:
        """End a simulated disconnection: the same session, or a new one if it expired meanwhile."""
        if self._connected:
            return
        self._connected = True
        if self._expired_while_disconnected:
            self._expired_while_disconnected = False
            self._session_listeners.emit(SessionEvent.SESSION_LOST)
            self._session = next(_session_ids)
            self._session_listeners.emit(SessionEvent.SESSION_REESTABLISHED)
        else:
            self._session_listeners.emit(SessionEvent.RECONNECTED)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._drop_ephemerals()
        self._closed = True
        self._tree.stores.discard(self)

    # -- internals -----------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError("metadata store is closed")
        if not self._connected:
            raise StoreUnavailableError("not connected to the metadata store (simulated outage)")

    def _ensure_parents(self, path: str) -> _Node:
        node = self._tree.nodes.get(path)
        if node is not None:
            return node
        parent_path = parent_of(path)
        parent = self._ensure_parents(parent_path)
        if parent.owner_session is not None:
            raise InvalidPathError(f"ephemeral node {parent_path} cannot have children")
        now = self._tree.clock_ms()
        node = self._tree.nodes[path] = _Node(b"", 0, now, now, None)
        parent.children.add(path.rsplit("/", 1)[1])
        self._tree.notify(NotificationType.CREATED, path)
        self._tree.notify(NotificationType.CHILDREN_CHANGED, parent_path)
        return node

    def _remove(self, path: str) -> None:
        del self._tree.nodes[path]
        parent_path = parent_of(path)
        self._tree.nodes[parent_path].children.discard(path.rsplit("/", 1)[1])
        self._tree.notify(NotificationType.DELETED, path)
        self._tree.notify(NotificationType.CHILDREN_CHANGED, parent_path)

    def _drop_ephemerals(self) -> None:
        owned = [p for p, n in self._tree.nodes.items() if n.owner_session == self._session]
        for path in owned:
            self._remove(path)
