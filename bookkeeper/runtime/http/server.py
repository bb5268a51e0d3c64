"""The HTTP/1.1 + WebSocket server: listeners, the connection limit and graceful shutdown.

Theory of operation. ``HttpServer.serve`` binds the listeners, reports the bound ports through
``task_status.started`` and accepts connections; each connection runs in a task of the server's connection
nursery (process -> server -> connection -> WebSocket reader/writer). At most ``http_connections_max``
connections are served; one more is answered ``503 {"reason": ...}`` and closed, like Jetty refusing beyond
Pulsar's ``maxHttpServerConnections`` — the refusal itself runs in a small, bounded pool so a flood of
connections cannot pile up tasks. With ``http_connections_per_ip_max`` set, one client address holding that
many connections gets ``429`` for the next one (Pulsar's ``brokerMaxConnectionsPerIp``); other addresses are
unaffected. An address the ``unlimited_address`` predicate names (a broker's peers, whose proxied sessions
all come from one address each) is not counted per address; its connections count toward the other limits.
All servers of the process together accept no more connections than the open-files limit leaves after the
descriptors kept for storage (:mod:`..descriptors`): beyond it, 503 too. The request
bodies being read or handled at once, across all connections, hold at most
``http_bodies_in_flight_bytes_max`` bytes (:mod:`.body_budget`), and the received WebSocket data not
handled yet, across all sessions, about ``ws_received_bytes_in_flight_max`` (:mod:`.ws_budget`).

TLS. Given an ``ssl_context`` (see :mod:`magnetar.bookkeeper.runtime.auth.tls`), every accepted connection
is wrapped in :class:`trio.SSLStream` and its handshake runs in the connection's own task within
``http_tls_handshake_timeout_ms``; a client that fails it is dropped and nobody else notices. WebSocket
sessions run over the same TLS stream (``wss://``).

Graceful shutdown (:meth:`HttpServer.shutdown`, or the ``shutdown`` event of :func:`serve_http`) stops
accepting, closes idle keep-alive connections, lets in-flight requests finish (their responses carry
``Connection: close``), closes WebSockets with 1001, and cancels whatever is still running after
``shutdown_grace_ms``. Cancelling ``serve`` from outside is the ungraceful stop: everything ends at once.
"""

from __future__ import annotations

import errno
import logging
import ssl
from collections.abc import Callable

import trio

from magnetar.bookkeeper.runtime import ConnectionCounter, open_listeners, process_connection_slots
from magnetar.bookkeeper.runtime.auth.tls import peer_address
from magnetar.bookkeeper.runtime.http.body_budget import BodyBudget
from magnetar.bookkeeper.runtime.http.connection import HttpConnection
from magnetar.bookkeeper.runtime.http.router import Router
from magnetar.bookkeeper.runtime.http.settings import HttpSettings
from magnetar.bookkeeper.runtime.http.types import json_bytes, status_phrase
from magnetar.bookkeeper.runtime.http.ws_budget import ReceiveBudget

log = logging.getLogger(__name__)

REFUSALS_IN_FLIGHT_MAX = 32
"""Connections being answered 503 at once; beyond this an excess connection is closed without an answer."""
REFUSAL_TIMEOUT_S = 1.0
"""How long a refused connection may take to receive its 503."""
ACCEPT_RETRY_DELAY_S = 0.1
"""Pause before accepting again after the process ran out of file descriptors or memory."""
_ACCEPT_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_OUT_OF_DESCRIPTORS = "too many connections for the process's open-files limit (ulimit -n)"


def _refusal_bytes(status: int = 503, reason: str = "too many connections") -> bytes:
    body = json_bytes({"reason": reason})
    head = (
        f"HTTP/1.1 {status} {status_phrase(status)}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def _no_address(address: str) -> bool:
    return False


class HttpServer:
    """Serves one :class:`Router` on the address and port of ``settings``."""

    def __init__(
        self,
        app: Router,
        settings: HttpSettings,
        *,
        ssl_context: ssl.SSLContext | None = None,
        service: str = "HTTP server",
        port_setting: str = "http_port",
        unlimited_address: Callable[[str], bool] | None = None,
    ) -> None:
        self._app = app
        self._settings = settings
        self._ssl_context = ssl_context
        self._service = service
        """Who serves here, as a port conflict names it (``broker HTTP``)."""
        self._port_setting = port_setting
        """The setting that chose the port (``http_port``, ``http_port_tls``)."""
        self._connections: set[HttpConnection] = set()
        self._per_ip = ConnectionCounter(settings.http_connections_per_ip_max)
        self._unlimited_address = unlimited_address or _no_address
        """Whether a client address is left out of ``http_connections_per_ip_max`` (asked once per
        connection, at accept; must not block)."""
        self._body_budget = BodyBudget(settings.http_bodies_in_flight_bytes_max, settings.body_share_bytes())
        self._ws_budget = ReceiveBudget(settings.ws_received_bytes_in_flight_max)
        self._refusing = 0
        self._slots = process_connection_slots()
        self._shutdown = trio.Event()
        self.ports: list[int] = []

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def shutdown(self) -> None:
        """Begin a graceful shutdown; ``serve`` returns once it is complete."""
        self._shutdown.set()

    async def serve(self, *, task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await open_listeners(
            self._settings.http_port,
            self._settings.http_bind_address,
            service=self._service,
            setting=self._port_setting,
        )
        self.ports = sorted({listener.socket.getsockname()[1] for listener in listeners})
        log.info("HTTP server listening on %s port(s) %s", self._settings.http_bind_address, self.ports)
        async with trio.open_nursery() as connections:
            try:
                async with trio.open_nursery() as acceptors:
                    for listener in listeners:
                        acceptors.start_soon(self._accept_loop, listener, connections)
                    task_status.started(self.ports)
                    await self._shutdown.wait()
                    acceptors.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    for listener in listeners:
                        await listener.aclose()
            log.info("HTTP server shutting down: %d connection(s) open", len(self._connections))
            for conn in list(self._connections):
                conn.begin_shutdown()
            connections.cancel_scope.deadline = trio.current_time() + self._settings.shutdown_grace_ms / 1000

    async def _accept_loop(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_RESOURCE_ERRORS:
                    raise
                log.error("accept failed (%s); retrying in %ss", exc, ACCEPT_RETRY_DELAY_S)
                await trio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            client = peer_address(stream)
            address = client[0] if client is not None else "?"
            if len(self._connections) >= self._settings.http_connections_max:
                await self._refuse_soon(connections, stream, _refusal_bytes())
                continue
            per_ip = not self._unlimited_address(address)
            if per_ip and not self._per_ip.try_acquire(address):
                limit = self._settings.http_connections_per_ip_max
                reason = f"too many connections from {address} (http_connections_per_ip_max={limit})"
                await self._refuse_soon(connections, stream, _refusal_bytes(429, reason))
                continue
            if not self._slots.try_take():
                if per_ip:
                    self._per_ip.release(address)
                await self._refuse_soon(connections, stream, _refusal_bytes(503, _OUT_OF_DESCRIPTORS))
                continue
            served: trio.abc.Stream = stream
            if self._ssl_context is not None:
                served = trio.SSLStream(stream, self._ssl_context, server_side=True, https_compatible=True)
            conn = HttpConnection(
                served,
                self._app,
                self._settings,
                client=client,
                body_budget=self._body_budget,
                ws_budget=self._ws_budget,
            )
            self._connections.add(conn)
            connections.start_soon(self._run_connection, conn, address if per_ip else None)

    async def _run_connection(self, conn: HttpConnection, counted_address: str | None) -> None:
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            if counted_address is not None:
                self._per_ip.release(counted_address)
            self._slots.give_back()

    async def _refuse_soon(self, connections: trio.Nursery, stream: trio.SocketStream, answer: bytes) -> None:
        if self._refusing < REFUSALS_IN_FLIGHT_MAX:
            self._refusing += 1
            connections.start_soon(self._refuse, stream, answer)
        else:
            await trio.aclose_forcefully(stream)

    async def _refuse(self, stream: trio.SocketStream, answer: bytes) -> None:
        """Answer 503/429 in plain HTTP and close (a TLS client sees a failed handshake); read what the client
        sent so closing does not reset the connection before the client has read the answer."""
        try:
            with trio.move_on_after(REFUSAL_TIMEOUT_S):
                await stream.send_all(answer)
                await stream.send_eof()
                while await stream.receive_some(65536):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self._refusing -= 1
            await trio.aclose_forcefully(stream)


async def serve_http(
    app: Router,
    settings: HttpSettings,
    *,
    shutdown: trio.Event | None = None,
    ssl_context: ssl.SSLContext | None = None,
    service: str = "HTTP server",
    port_setting: str = "http_port",
    task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled, or until ``shutdown`` is set (then gracefully); over TLS when an
    ``ssl_context`` is given (:func:`~magnetar.bookkeeper.runtime.auth.tls.server_ssl_context`).

    Start it with ``ports = await nursery.start(serve_http, app, settings)``: the started value is the list
    of bound ports (one entry unless the bind address resolves to several families on different ports).
    ``service`` and ``port_setting`` name the server and its port's setting when it cannot listen
    (:class:`~magnetar.bookkeeper.runtime.listen.ListenError`)."""
    server = HttpServer(app, settings, ssl_context=ssl_context, service=service, port_setting=port_setting)
    async with trio.open_nursery() as nursery:
        ports: list[int] = await nursery.start(server.serve)
        task_status.started(ports)
        if shutdown is not None:
            await shutdown.wait()
            server.shutdown()
