"""The bookie server: the wire protocol over TCP in front of a :class:`~.core.BookieCore`.

Theory of operation (BookKeeper's ``BookieNettyServer`` + ``BookieRequestProcessor``):

* :class:`BookieServer` accepts connections (at most ``connections_max``; more are closed at once) and runs
  each in its own task, a :class:`~.connection.BookieConnection` (decoding, isolation, back-pressure,
  bursts, TLS and authentication per connection: see :mod:`.connection`).
* **Strangers.** With authentication on, at most ``unauthenticated_connections_max`` connections wait for
  their AUTH at once: a new one closes the oldest of them.
* **Drain.** :meth:`BookieServer.drain` stops accepting and reading, lets the in-flight requests finish and
  their responses go out (bounded by ``drain_timeout_ms``), then closes the connections.

:class:`Bookie` composes one bookie: read-only state, request core, server, disk monitor and registration in
the metadata store, over an injected :class:`~.storage.ledger_store.LedgerStore` (the owner runs and closes
the store). ``endpoint = await nursery.start(bookie.run)`` returns once it serves and is registered;
:meth:`Bookie.request_stop` begins the orderly shutdown: drain, unregister, return.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.bookie.auth import BookieAuthenticator, bookie_ssl_context
from magnetar.bookkeeper.bookie.connection import BookieConnection
from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.disk_monitor import DiskMonitor, DiskThresholds, ReadOnlyState
from magnetar.bookkeeper.bookie.metrics import BookieMetrics
from magnetar.bookkeeper.bookie.registration import BookieRegistration
from magnetar.bookkeeper.bookie.settings import BookieServerSettings, bookie_id_for
from magnetar.bookkeeper.bookie.storage import LedgerStore
from magnetar.bookkeeper.metadata import BookieServiceInfo, MetadataStore
from magnetar.bookkeeper.runtime import open_listeners
from magnetar.bookkeeper.runtime.auth.tls import peer_address

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BookieEndpoint:
    bookie_id: str
    """``advertised_host:port``, the name clients and the metadata store use."""
    host: str
    """The address the listener is bound to."""
    port: int


class BookieServer:
    def __init__(
        self,
        core: BookieCore,
        settings: BookieServerSettings,
        metrics: BookieMetrics,
        *,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: BookieAuthenticator | None = None,
    ) -> None:
        self.core = core
        self.settings = settings
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.authenticator = authenticator
        self._connections: set[BookieConnection] = set()
        self._unauthenticated: dict[BookieConnection, None] = {}
        """Connections waiting for their AUTH, oldest first (authentication on only)."""
        self._accept_scope = trio.CancelScope()
        self._draining = False
        self._all_closed = trio.Event()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def serve(
        self,
        listener: trio.SocketListener | None = None,
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen (on ``listener`` if the caller bound it already); ``task_status.started((host, port))``
        gives the bound address (port 0: the real one)."""
        if listener is None:
            listener = await open_bookie_listener(self.settings)
        host, port = listener.socket.getsockname()[:2]
        log.info("bookie protocol listening on %s:%d (%s)", host, port, self._access_summary())
        async with trio.open_nursery() as nursery:
            task_status.started((host, port))
            with self._accept_scope:
                async with listener:
                    await self._accept_loop(listener, nursery)

    def _access_summary(self) -> str:
        """Who may use the protocol, for the start-up log line."""
        tls = ", TLS" if self.ssl_context is not None else ""
        if self.authenticator is None:
            return "authentication off: any client may connect" + tls
        roles = sorted(self.authenticator.allowed_roles)
        if not roles:
            log.warning(
                "authentication is on and no role may use the bookie protocol: set auth_allowed_roles "
                "(the brokers' role) or super_user_roles"
            )
        return f"authentication on, roles admitted: {', '.join(roles) or 'none'}{tls}"

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # EMFILE and friends: back off, keep serving
                log.error("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            if len(self._connections) >= self.settings.connections_max:
                self.metrics.connections_rejected += 1
                if self.metrics.connections_rejected % 100 == 1:  # the first, then every 100th
                    limit = self.settings.connections_max
                    log.warning("connections_max=%d reached: closing new connections", limit)
                await stream.aclose()
                continue
            peer = peer_address(stream)
            served: trio.abc.Stream = stream
            if self.ssl_context is not None:
                served = trio.SSLStream(stream, self.ssl_context, server_side=True)
            connection = BookieConnection(self, served, "?" if peer is None else f"{peer[0]}:{peer[1]}")
            self._connections.add(connection)
            self.metrics.connections = len(self._connections)
            if self.authenticator is not None:
                self._admit_unauthenticated(connection)
            nursery.start_soon(connection.run)

    def _admit_unauthenticated(self, connection: BookieConnection) -> None:
        """Count a new connection as waiting for its AUTH; close the oldest waiting ones above the limit."""
        waiting = self._unauthenticated
        while len(waiting) >= self.settings.unauthenticated_connections_max:
            oldest = next(iter(waiting))
            del waiting[oldest]
            self.metrics.unauthenticated_evicted += 1
            if self.metrics.unauthenticated_evicted % 100 == 1:  # the first, then every 100th
                limit = self.settings.unauthenticated_connections_max
                log.warning(
                    "unauthenticated_connections_max=%d reached: closing the oldest (%s) to admit %s",
                    limit,
                    oldest.peer,
                    connection.peer,
                )
            oldest.abort()
        waiting[connection] = None
        self.metrics.connections_unauthenticated = len(waiting)

    def connection_authenticated(self, connection: BookieConnection) -> None:
        self._unauthenticated.pop(connection, None)
        self.metrics.connections_unauthenticated = len(self._unauthenticated)

    def connection_closed(self, connection: BookieConnection) -> None:
        self._connections.discard(connection)
        self.metrics.connections = len(self._connections)
        self.connection_authenticated(connection)  # no longer waiting either
        if self._draining and not self._connections:
            self._all_closed.set()

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting and reading; wait (bounded) for in-flight requests to be answered; close all."""
        self._draining = True
        self._accept_scope.cancel()
        if not self._connections:
            self._all_closed.set()
        for connection in list(self._connections):
            connection.stop_reading()
        with trio.move_on_after(timeout_s):
            await self._all_closed.wait()
        if self._connections:
            log.warning(
                "drain timed out: closing %d connections with requests pending", len(self._connections)
            )
            for connection in list(self._connections):
                connection.abort()


async def open_bookie_listener(settings: BookieServerSettings) -> trio.SocketListener:
    """Bind the bookie's port. A composition root that must know the bookie id (``host:port``) before it
    opens the storage - to check the bookie's cookies with ``--port 0`` - binds first and hands the listener
    to :class:`Bookie`."""
    listeners = await open_listeners(
        settings.port, settings.bind_address, service="bookie protocol", setting="port"
    )
    listener, extra = listeners[0], listeners[1:]
    for other in extra:  # a host name with several addresses: serve the first, one port
        await other.aclose()
    return listener


async def serve_bookie(
    core: BookieCore,
    settings: BookieServerSettings,
    *,
    metrics: BookieMetrics | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``core`` over TCP until cancelled: ``host, port = await nursery.start(serve_bookie, core, s)``.

    The bare wire server (no registration, no disk monitor); :class:`Bookie` is the whole bookie. TLS and
    authentication follow ``settings`` as in :class:`Bookie`.
    """
    server = BookieServer(
        core,
        settings,
        metrics or BookieMetrics(),
        ssl_context=bookie_ssl_context(settings),
        authenticator=BookieAuthenticator.from_settings(settings),
    )
    await server.serve(task_status=task_status)


class Bookie:
    """One bookie: request core, TCP server, disk monitor, registration. The owner runs/closes the store."""

    def __init__(
        self,
        settings: BookieServerSettings,
        store: LedgerStore,
        metadata: MetadataStore | None = None,
        *,
        state: ReadOnlyState | None = None,
        listener: trio.SocketListener | None = None,
    ) -> None:
        self.settings = settings
        self._listener = listener
        """Bound by the caller (see :func:`open_bookie_listener`), or None: :meth:`run` binds."""
        self.store = store
        self.metadata = metadata
        self.state = state or ReadOnlyState()
        self.metrics = BookieMetrics(store_stats=getattr(store, "stats", None))
        self.core = BookieCore(store, is_readonly=lambda: self.state.readonly)
        self.server = BookieServer(
            self.core,
            settings,
            self.metrics,
            ssl_context=bookie_ssl_context(settings),
            authenticator=BookieAuthenticator.from_settings(settings),
        )
        self.monitor = DiskMonitor(
            store.disk_usage,
            self.state,
            DiskThresholds(
                settings.disk_usage_threshold,
                settings.disk_usage_warn_threshold,
                settings.disk_usage_lwm_threshold,
            ),
            interval_ms=settings.disk_check_interval_ms,
            on_usage=self._on_usage,
            journal_probe=store.journal_disk_usage,
            on_journal_usage=self._on_journal_usage,
        )
        self.state.add_listener(self._on_mode)
        self.metrics.readonly = self.state.readonly
        self.registration: BookieRegistration | None = None
        self.endpoint: BookieEndpoint | None = None
        self._stop = trio.Event()
        self.stopped = trio.Event()
        """Set when :meth:`run` has finished (after the orderly shutdown, or when cancelled)."""

    def _on_usage(self, used: float) -> None:
        self.metrics.disk_usage_ratio = used

    def _on_journal_usage(self, used: float) -> None:
        self.metrics.journal_disk_usage_ratio = used

    def _on_mode(self, readonly: bool) -> None:
        self.metrics.readonly = readonly

    def render_metrics(self) -> bytes:
        return self.metrics.render_metrics()

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def is_ready(self) -> bool:
        """Serving, registered (when a metadata store is used), not shutting down, and with room in the
        journal (a full journal volume fails every normal add: see the disk monitor)."""
        if self.endpoint is None or self.stopping or self.stopped.is_set() or self.monitor.journal_full:
            return False
        return self.registration is None or self.registration.registered_path is not None

    def service_info(self, readonly: bool) -> BookieServiceInfo:
        assert self.endpoint is not None
        host = self.settings.advertised_host()
        return BookieServiceInfo(
            self.endpoint.bookie_id,
            host,
            self.endpoint.port,
            self.settings.http_port,
            readonly,
            self.settings.rack,
        )

    async def run(self, *, task_status: trio.TaskStatus[BookieEndpoint] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        finally:
            self.stopped.set()

    async def _run(self, task_status: trio.TaskStatus[BookieEndpoint]) -> None:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(self.server.serve, self._listener)
            bookie_id = bookie_id_for(self.settings.advertised_host(), port)
            self.endpoint = BookieEndpoint(bookie_id, host, port)
            self.monitor.check()  # a full disk registers read-only from the start
            nursery.start_soon(self.monitor.run)
            if self.metadata is not None:
                self.registration = BookieRegistration(
                    self.metadata,
                    self.service_info,
                    self.state,
                    timeout_ms=self.settings.registration_timeout_ms,
                    retry_ms=self.settings.registration_retry_ms,
                )
                await nursery.start(self.registration.run)
            log.info(
                "bookie %s is serving (%s)", bookie_id, "read-only" if self.state.readonly else "writable"
            )
            task_status.started(self.endpoint)
            await self._stop.wait()
            await self._shutdown(nursery)

    async def _shutdown(self, nursery: trio.Nursery) -> None:
        assert self.endpoint is not None
        log.info(
            "bookie %s stopping: draining %d connections",
            self.endpoint.bookie_id,
            self.server.connection_count,
        )
        with trio.CancelScope(shield=True):
            await self.server.drain(self.settings.drain_timeout_ms / 1000)
            if self.registration is not None:
                await self.registration.unregister()
        log.info("bookie %s stopped serving", self.endpoint.bookie_id)
        nursery.cancel_scope.cancel()
