"""ZooKeeper metadata store (``zk:host:port[,host:port][/chroot]``) through kazoo: Pulsar's
``ZKMetadataStore``, the store brokers and bookies of a cluster share.

Theory of operation. kazoo is a threaded client: a connection thread owns the socket and a callback thread
runs completions. We bridge it to trio in both directions:

* trio -> kazoo: every operation is one blocking function (kazoo's async call, then ``get`` bounded by
  ``operation_timeout_ms``) run with ``trio.to_thread.run_sync`` under a per-store ``CapacityLimiter``
  (``zk_blocking_calls_max`` threads). While the connection is down an operation fails at once (kazoo
  would queue it until it reconnects), and kazoo fails in-flight calls with ``ConnectionLoss`` when the
  connection drops (a silent server is detected within 2/3 of the session timeout), so no call hangs:
  with ZooKeeper down or hung, operations raise :class:`~.api.StoreUnavailableError` promptly.
* kazoo -> trio: connection-state changes and watch events arrive on kazoo's threads; they are handed to the
  trio loop with ``TrioToken.run_sync_soon`` (non-blocking, FIFO) and nothing else is done in kazoo's thread.

Notifications use one persistent recursive watch on the chroot (ZooKeeper >= 3.6 ``addWatch``), so listeners
see every Created / Modified / Deleted below it, as Pulsar's store does; such a watch never reports
NodeChildrenChanged, so a ChildrenChanged for the parent is derived from each Created and Deleted. kazoo 2.11
(the newest release) has no ``add_watch`` (python-zk/kazoo#715 is unmerged): :class:`_AddWatch` sends the
request (opcode 106) through kazoo's request queue, and :func:`_route_watch_events` reads the events that no
one-shot watcher claims from kazoo's connection. ZooKeeper keeps watches per connection and kazoo does not
restore them on reconnect, so the watch is re-added on every (re)connection and the session event is emitted
only once it is in place: after RECONNECTED / SESSION_REESTABLISHED notifications flow again (changes made
while disconnected are not replayed - listeners re-read, as Pulsar's caches do on these events).

Session events follow Pulsar: kazoo SUSPENDED -> CONNECTION_LOST; LOST (expired) -> SESSION_LOST; CONNECTED
with the same session -> RECONNECTED; with a new session (after LOST) -> SESSION_REESTABLISHED. The ephemeral
nodes of a lost session are gone; ZooKeeper assigns sequential suffixes from the parent's cversion.

The chroot is applied here, not by kazoo (kazoo warns on a missing chroot and cannot create a nested one):
the store creates it when it opens.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError as KazooBadVersionError,
)
from kazoo.exceptions import (
    ConnectionDropped,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RequestTimeoutError,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.exceptions import (
    NotEmptyError as KazooNotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Watch, int_struct, write_string
from kazoo.retry import KazooRetry

from magnetar.bookkeeper.metadata.api import (
    BadVersionError,
    GetResult,
    InvalidPathError,
    MetadataStoreError,
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
    check_value,
    parent_of,
    validate_path,
)
from magnetar.bookkeeper.metadata.health import MetadataHealth
from magnetar.bookkeeper.metadata.listeners import ListenerSet
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

_ADD_WATCH_OPCODE = 106
_PERSISTENT_RECURSIVE = 1
_WATCH_EVENT_TYPES = {
    1: NotificationType.CREATED,
    2: NotificationType.DELETED,
    3: NotificationType.MODIFIED,
    4: NotificationType.CHILDREN_CHANGED,
}
_PUT_RACE_ATTEMPTS = 5
"""An unconditional put alternates set / create while other clients create and delete the node."""
_DELETE_RECURSIVE_ATTEMPTS = 5
"""delete_recursive starts over when another client adds a child under the subtree meanwhile."""
_UNAVAILABLE = (
    ConnectionLoss,
    ConnectionDropped,
    SessionExpiredError,  # also kazoo's ConnectionClosedError, and its answer while reconnecting
    OperationTimeoutError,
    RequestTimeoutError,
    ZookeeperStoppedError,
    KazooTimeoutError,
)


@dataclass(frozen=True, slots=True)
class _AddWatch:
    """ZooKeeper's AddWatchRequest in the shape kazoo's connection sends (``type``, ``serialize``)."""

    type: ClassVar[int] = _ADD_WATCH_OPCODE
    path: str
    mode: int

    def serialize(self) -> bytearray:
        body = bytearray()
        body.extend(write_string(self.path))
        body.extend(int_struct.pack(self.mode))
        return body

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        del buffer, offset
        return True


def _route_watch_events(client: KazooClient, deliver: Callable[[NotificationType, str], None]) -> None:
    """Have kazoo's connection thread pass every watch event to ``deliver`` before its own dispatch.

    Events of a type kazoo does not know are dropped here: kazoo would log them with the deprecated
    ``Logger.warn``, whose DeprecationWarning would kill its connection thread under ``-W error``."""
    connection = client._connection
    original = connection._read_watch_event

    def read_watch_event(buffer: bytes, offset: int) -> Any:
        event, _ = Watch.deserialize(buffer, offset)
        kind = _WATCH_EVENT_TYPES.get(event.type)
        if kind is None:
            return None
        deliver(kind, event.path)
        return original(buffer, offset)

    connection._read_watch_event = read_watch_event


def _stat(path: str, zstat: Any) -> Stat:
    return Stat(path, zstat.version, zstat.ctime, zstat.mtime, zstat.ephemeralOwner != 0)


def _translate(exc: KazooException, path: str) -> MetadataStoreError:
    if isinstance(exc, NoNodeError):
        return NotFoundError(path)
    if isinstance(exc, KazooBadVersionError):
        return BadVersionError(f"{path}: version mismatch")
    if isinstance(exc, NodeExistsError):
        return BadVersionError(f"{path} already exists")
    if isinstance(exc, KazooNotEmptyError):
        return NotEmptyError(f"{path} has children")
    if isinstance(exc, NoChildrenForEphemeralsError):
        return InvalidPathError(f"an ephemeral ancestor of {path} cannot have children")
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailableError(f"ZooKeeper unavailable ({type(exc).__name__}) during {path}")
    return MetadataStoreError(f"ZooKeeper failed {path}: {type(exc).__name__} {exc}")


HANDSHAKE_SHARE_MIN = 3
"""kazoo waits ``session timeout / number of hosts`` for a connection's handshake; the host list is repeated
until that is at most a third of the session timeout."""


PROBE_TIMEOUT_S = 2.0
"""How long :func:`why_unreachable` waits for each server to accept a connection."""


async def why_unreachable(hosts: str) -> str:
    """Why each of ``hosts`` (``h:p[,h:p]``) gave no session, in a user's words: a TCP connection to each
    says whether the name resolves, whether anything listens on the port, or whether something listens but
    did not speak ZooKeeper (or TLS as configured) with us. Only used to word an error."""
    findings = []
    for server in (part.strip() for part in hosts.split(",") if part.strip()):
        host, _, port = server.rpartition(":")
        if not port.isdigit():
            findings.append(f"{server}: not HOST:PORT")
            continue
        findings.append(f"{server}: {await _probe(host.strip('[]'), int(port))}")
    return "; ".join(findings)


async def _probe(host: str, port: int) -> str:
    try:
        with trio.fail_after(PROBE_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        return f"no answer within {PROBE_TIMEOUT_S:g} s (a firewall, or the host is down?)"
    except socket.gaierror:
        return f"the host name {host!r} does not resolve"
    except OSError as exc:
        # trio tries every address of the name and reports each attempt's error in a group as the cause
        attempts = exc.__cause__.exceptions if isinstance(exc.__cause__, BaseExceptionGroup) else (exc,)
        if all(getattr(each, "errno", None) == errno.ECONNREFUSED for each in attempts):
            return "connection refused: nothing listens on that port (is ZooKeeper running?)"
        return f"cannot connect: {'; '.join(str(each) for each in attempts)}"
    await stream.aclose()
    return "a server accepts connections but gave no ZooKeeper session (is it ZooKeeper, and TLS as set?)"


def handshake_hosts(hosts: str) -> str:
    """``hosts`` repeated so that a handshake that stalls cannot use the whole session timeout.

    A connection that reaches a ZooKeeper server while it is still starting (it accepts, then answers nothing)
    waits kazoo's handshake timeout before the next attempt - the whole session timeout for a one-server
    ensemble, so the session expires although the server was back within a second. With the list repeated,
    the stalled attempt gives up after a third of it and the next one resumes the session."""
    servers = [server.strip() for server in hosts.split(",") if server.strip()]
    if "/" in hosts or not servers or len(servers) >= HANDSHAKE_SHARE_MIN:  # a chroot ends the list
        return hosts
    repeats = -(-HANDSHAKE_SHARE_MIN // len(servers))
    return ",".join(servers * repeats)


class ZkMetadataStore:
    """Open with :meth:`connect`; close with :meth:`aclose` (stops kazoo's threads and the session)."""

    def __init__(self, client: KazooClient, root: str, settings: MetadataStoreSettings) -> None:
        self._client = client
        self._root = "" if root == "/" else root
        self._settings = settings
        self._timeout_s = settings.operation_timeout_ms / 1000
        self._limiter = trio.CapacityLimiter(settings.zk_blocking_calls_max)
        self._token = trio.lowlevel.current_trio_token()
        self._listeners: ListenerSet[Notification] = ListenerSet()
        self._session_listeners: ListenerSet[SessionEvent] = ListenerSet()
        self.health = MetadataHealth()
        self._session_listeners.add(self.health.on_session_event)  # first: listeners see the new health
        self._ready = trio.Event()
        self._open_error: BaseException | None = None
        self._session_id: int | None = None
        self._session_lost = False
        self._closing = False

    @classmethod
    async def connect(
        cls, hosts: str, root: str = "/", settings: MetadataStoreSettings | None = None
    ) -> ZkMetadataStore:
        """Connect to ``hosts`` (``h:p[,h:p]``), create ``root`` if missing, arm the watch."""
        settings = settings or MetadataStoreSettings()
        validate_path(root)
        retry = KazooRetry(
            max_tries=-1, delay=0.05, backoff=2, max_delay=settings.zk_reconnect_delay_max_ms / 1000
        )
        client = KazooClient(
            hosts=handshake_hosts(hosts),
            timeout=settings.session_timeout_ms / 1000,
            connection_retry=retry,
            **settings.kazoo_tls_options(),
        )
        store = cls(client, root, settings)
        client.add_listener(store._on_kazoo_state)
        _route_watch_events(client, store._on_kazoo_watch)
        try:
            await trio.to_thread.run_sync(client.start_async)
            with trio.move_on_after(store._timeout_s):
                await store._ready.wait()
            if not store._ready.is_set():
                raise StoreUnavailableError(
                    f"no ZooKeeper session with {hosts} within {settings.operation_timeout_ms} ms "
                    f"({await why_unreachable(hosts)})"
                )
            if store._open_error is not None:
                raise MetadataStoreError(
                    f"ZooKeeper at {hosts} refused a persistent recursive watch (ZooKeeper >= 3.6 is "
                    f"required): {store._open_error!r}"
                )
            await store._run(
                lambda: client.ensure_path_async(store._root or "/").get(timeout=store._timeout_s), root
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await store.aclose()
            raise
        return store

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session (id, password) while connected; tests use it to act on the session."""
        client_id: tuple[int, bytes] | None = self._client.client_id
        return client_id

    # -- reads ---------------------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        return await self._run(partial(self._get_blocking, validate_path(path)), path)

    async def get_children(self, path: str) -> list[str]:
        return await self._run(partial(self._children_blocking, validate_path(path)), path)

    async def exists(self, path: str) -> bool:
        full = self._full(validate_path(path))
        return (
            await self._run(lambda: self._client.exists_async(full).get(timeout=self._timeout_s), path)
            is not None
        )

    # -- writes --------------------------------------------------------------------------------------------

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        if validate_path(path) == "/":
            raise InvalidPathError("cannot write the root node")
        check_value(value)
        check_expected_version(expected_version)
        put = partial(self._put_blocking, path, bytes(value), expected_version, ephemeral, sequential)
        return await self._run(put, path)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        if validate_path(path) == "/":
            raise InvalidPathError("cannot delete the root node")
        await self._run(partial(self._delete_blocking, path, expected_version), path)

    async def delete_recursive(self, path: str) -> None:
        if validate_path(path) == "/":
            raise InvalidPathError("cannot delete the root node")
        await self._run(partial(self._delete_recursive_blocking, path), path)

    # -- notifications and lifecycle -----------------------------------------------------------------------

    def register_listener(self, listener: NotificationListener) -> Unregister:
        return self._listeners.add(listener)

    def register_session_listener(self, listener: SessionListener) -> Unregister:
        return self._session_listeners.add(listener)

    async def aclose(self) -> None:
        """Close the session (ZooKeeper deletes its ephemeral nodes) and stop kazoo's threads."""
        if self._closing:
            return
        self._closing = True
        client = self._client

        def stop() -> None:
            client.remove_listener(self._on_kazoo_state)
            client.stop()
            client.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop)

    # -- blocking operations (worker threads) --------------------------------------------------------------

    def _get_blocking(self, path: str) -> GetResult | None:
        try:
            value, zstat = self._client.get_async(self._full(path)).get(timeout=self._timeout_s)
        except NoNodeError:
            return None
        return GetResult(value or b"", _stat(path, zstat))

    def _children_blocking(self, path: str) -> list[str]:
        try:
            children: list[str] = self._client.get_children_async(self._full(path)).get(
                timeout=self._timeout_s
            )
        except NoNodeError:
            return []
        return sorted(children)

    def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> Stat:
        created, zstat = self._client.create_async(
            self._full(path),
            value,
            ephemeral=ephemeral,
            sequence=sequential,
            makepath=True,
            include_data=True,
        ).get(timeout=self._timeout_s)
        return _stat(self._relative(created), zstat)

    def _set(self, path: str, value: bytes, version: int) -> Stat:
        zstat = self._client.set_async(self._full(path), value, version).get(timeout=self._timeout_s)
        return _stat(path, zstat)

    def _put_blocking(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if sequential:
            return self._create(path, value, ephemeral, sequential=True)
        if expected_version == -1:
            return self._create(path, value, ephemeral, sequential=False)
        if expected_version is not None:
            try:
                return self._set(path, value, expected_version)
            except NoNodeError:
                raise BadVersionError(
                    f"{path} does not exist (expected version {expected_version})"
                ) from None
        for _ in range(_PUT_RACE_ATTEMPTS):
            try:
                return self._set(path, value, -1)
            except NoNodeError:
                pass
            try:
                return self._create(path, value, ephemeral, sequential=False)
            except NodeExistsError:
                pass
        raise BadVersionError(
            f"{path} kept appearing and disappearing; gave up after {_PUT_RACE_ATTEMPTS} tries"
        )

    def _delete_blocking(self, path: str, expected_version: int | None) -> None:
        full = self._full(path)
        if expected_version is not None and expected_version < 0:
            # ZooKeeper reads a negative version as "any"; the contract reads it as a version no node has.
            if self._client.exists_async(full).get(timeout=self._timeout_s) is None:
                raise NotFoundError(path)
            raise BadVersionError(f"{path} exists, expected version {expected_version}")
        version = -1 if expected_version is None else expected_version
        self._client.delete_async(full, version).get(timeout=self._timeout_s)

    def _delete_recursive_blocking(self, path: str) -> None:
        for _ in range(_DELETE_RECURSIVE_ATTEMPTS):
            nodes = [self._full(path)]
            index = 0
            while index < len(nodes):  # breadth first: every node is listed after its parent
                try:
                    children = self._client.get_children_async(nodes[index]).get(timeout=self._timeout_s)
                except NoNodeError:
                    children = []
                nodes.extend(f"{nodes[index]}/{child}" for child in children)
                index += 1
            try:
                for node in reversed(nodes):
                    with contextlib.suppress(NoNodeError):
                        self._client.delete_async(node).get(timeout=self._timeout_s)
                return
            except KazooNotEmptyError:
                continue
        raise NotEmptyError(
            f"{path}: children kept appearing; gave up after {_DELETE_RECURSIVE_ATTEMPTS} tries"
        )

    async def _run(self, operation: Callable[[], T], path: str) -> T:
        if self._closing:
            raise StoreUnavailableError("metadata store is closed")

        def call() -> T:
            if self._client.state != KazooState.CONNECTED:
                # kazoo would queue the request until it reconnects; fail fast instead, as ZooKeeper's
                # own client does while disconnected, and let the caller decide whether to retry.
                raise StoreUnavailableError(
                    f"not connected to ZooKeeper ({self._client.state}) during {path}"
                )
            try:
                return operation()
            except KazooException as exc:
                raise _translate(exc, path) from exc
            except KazooTimeoutError as exc:
                raise StoreUnavailableError(
                    f"ZooKeeper did not answer within {self._settings.operation_timeout_ms} ms during {path}"
                ) from exc

        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    # -- paths ---------------------------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return self._root + path if path != "/" else (self._root or "/")

    def _relative(self, zk_path: str) -> str:
        if zk_path == self._root:
            return "/"
        assert zk_path.startswith(self._root + "/"), zk_path
        return zk_path[len(self._root) :]

    # -- kazoo threads -> trio -------------------------------------------------------------------------------

    def _to_trio(self, function: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # the run is over: nobody is left to tell
            self._token.run_sync_soon(function, *args)

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's connection thread: never block here."""
        if state == KazooState.CONNECTED:
            client_id = self._client.client_id
            session_id = None if client_id is None else client_id[0]
            result = self._client.handler.async_result()
            self._client._call(_AddWatch(self._root or "/", _PERSISTENT_RECURSIVE), result)
            result.rawlink(lambda done: self._to_trio(self._on_watch_armed, session_id, done.exception))
        else:
            self._to_trio(self._on_connection_lost, state)

    def _on_kazoo_watch(self, kind: NotificationType, zk_path: str) -> None:
        """kazoo's connection thread: never block here."""
        self._to_trio(self._on_watch_event, kind, zk_path)

    # -- trio thread ---------------------------------------------------------------------------------------

    def _on_watch_armed(self, session_id: int | None, error: BaseException | None) -> None:
        if self._closing:
            return
        if error is not None:
            # A dropped connection is followed by SUSPENDED and a new attempt; anything else is fatal for
            # notifications, and reported by connect() when it happens on the first connection.
            log.warning("ZooKeeper refused the persistent watch on %s: %r", self._root or "/", error)
            if not self._ready.is_set() and not isinstance(error, _UNAVAILABLE):
                self._open_error = error
                self._ready.set()
            return
        previous, self._session_id = self._session_id, session_id
        if not self._ready.is_set():
            self._ready.set()
            return
        new_session = self._session_lost or session_id != previous
        self._session_lost = False
        self._session_listeners.emit(
            SessionEvent.SESSION_REESTABLISHED if new_session else SessionEvent.RECONNECTED
        )

    def _on_connection_lost(self, state: str) -> None:
        if self._closing or not self._ready.is_set():
            return
        if state == KazooState.SUSPENDED:
            self._session_listeners.emit(SessionEvent.CONNECTION_LOST)
        elif state == KazooState.LOST:
            self._session_lost = True
            self._session_listeners.emit(SessionEvent.SESSION_LOST)

    def _on_watch_event(self, kind: NotificationType, zk_path: str) -> None:
        if self._closing or not zk_path.startswith(self._root + "/"):
            return  # the chroot node itself, or (without a chroot) the root: not a node of the contract
        path = self._relative(zk_path)
        if path == "/":
            return
        self._listeners.emit(Notification(kind, path))
        if kind in (NotificationType.CREATED, NotificationType.DELETED):
            self._listeners.emit(Notification(NotificationType.CHILDREN_CHANGED, parent_of(path)))
