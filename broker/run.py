"""Composition entry point: one broker (service + HTTP server) on a metadata store and a BookKeeper client.

``magnetar broker`` and ``magnetar standalone`` call :func:`run_broker`::

    handle = await nursery.start(run_broker, settings, metadata, bk)   # -> BrokerHandle (bound port, URL)
    ...
    handle.stop()   # graceful: unload topics, release bundles, drain the HTTP server

``register_routes(router, service)`` lets the admin layer add its REST routes before the server starts;
``on_trim_candidate`` is handed to the managed-ledger factory and each of ``factory_services`` is started with
``nursery.start(service_fn, factory)`` once the factory is open (the retention service of ``gc``, which the
broker may not import). With ``http_port_tls`` set the same router is served over TLS on that port too
(Pulsar's ``webServicePortTls``); the broker registers both URLs (``httpUrl``, ``httpUrlTls``), and lookups
and redirects of clients that came over TLS point at the TLS one.
Connections from the other live brokers' addresses are not counted per address
(:mod:`.ownership.peer_addresses`): both servers ask one :class:`~.ownership.peer_addresses.PeerAddresses`,
kept up to date while the broker runs. Start-up creates the cluster, tenant ``public`` and namespace
``public/default`` when they are missing (``initialize_metadata`` and the ``cluster_metadata_init`` setting),
as Pulsar standalone does.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio

from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.runtime import Clock
from magnetar.bookkeeper.runtime.http import HttpServer, Router
from magnetar.broker.http_app import build_router
from magnetar.broker.ownership import PeerAddresses, maintain_peer_addresses
from magnetar.broker.policies import initialize_cluster_metadata
from magnetar.broker.service import BrokerService
from magnetar.broker.sessions.binary_door import BinaryFrontDoor
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire import entry_message_count
from magnetar.managed_ledger import entry_prefix
from magnetar.managed_ledger.entry_prefix import EntryIndexing
from magnetar.managed_ledger.factory import open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)

RouteRegistration = Callable[[Router, BrokerService], None]
FactoryService = Callable[..., Awaitable[None]]
"""``async def run(factory, *, task_status)``: a service over the managed-ledger factory."""


@dataclass
class BrokerHandle:
    service: BrokerService
    router: Router
    port: int
    http_url: str
    tls_port: int | None = None
    http_url_tls: str = ""
    broker_service_port: int = 0
    """The bound port of Pulsar's binary protocol."""
    broker_url: str = ""
    """``pulsar://host:port``: what lookups answer as ``brokerUrl``."""
    broker_service_port_tls: int | None = None
    """The bound TLS port of Pulsar's binary protocol (None: not served)."""
    broker_url_tls: str = ""
    """``pulsar+ssl://host:port``: what lookups answer as ``brokerUrlTls``."""
    _stop: trio.Event = field(default_factory=trio.Event)
    stopped: trio.Event = field(default_factory=trio.Event)

    def stop(self) -> None:
        """Begin the graceful shutdown; ``stopped`` is set once it is complete."""
        self._stop.set()


WILDCARDS = {"0.0.0.0", "::"}
"""Bind addresses that name no address of this broker's own."""

HTTP_SERVICE = "broker HTTP"
HTTPS_SERVICE = "broker HTTPS"
BINARY_SERVICE = "broker binary protocol"
BINARY_TLS_SERVICE = "broker binary protocol over TLS"


def broker_ports(settings: BrokerSettings) -> list[tuple[int, str, str, str]]:
    """The ports :func:`run_broker` binds, as ``(port, host, server, setting)``: for a process that checks
    them (:func:`~magnetar.bookkeeper.runtime.listen.check_ports_free`) before it writes anything."""
    ports = [(settings.http_port, settings.bind_address, HTTP_SERVICE, "http_port")]
    if settings.broker_service_port:
        ports.append(
            (settings.broker_service_port, settings.bind_address, BINARY_SERVICE, "broker_service_port")
        )
    if settings.broker_service_port_tls:
        ports.append(
            (
                settings.broker_service_port_tls,
                settings.bind_address,
                BINARY_TLS_SERVICE,
                "broker_service_port_tls",
            )
        )
    if settings.http_port_tls is not None and settings.web_ssl_context() is not None:
        ports.append((settings.http_port_tls, settings.bind_address, HTTPS_SERVICE, "http_port_tls"))
    return ports


ENTRY_INDEXING = EntryIndexing(entry_message_count)
"""Every entry a broker stores carries the index of its first message, in the managed ledger's prefix; the
managed ledger asks the broker's entry format only how many messages an entry holds."""


async def run_broker(  # noqa: PLR0915 (one composition root: every listener starts here)
    settings: BrokerSettings,
    metadata: MetadataStore,
    bk: BookKeeper,
    *,
    register_routes: RouteRegistration | None = None,
    on_trim_candidate: Callable[[ManagedLedger], None] | None = None,
    factory_services: Sequence[FactoryService] = (),
    initialize_metadata: bool = True,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    task_status: trio.TaskStatus[BrokerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    ml_settings = settings.managed_ledger_settings(rng)
    hook = on_trim_candidate or (lambda ml: None)
    async with open_managed_ledger_factory(
        bk,
        metadata,
        ml_settings,
        clock=clock,
        rng=rng,
        on_trim_candidate=hook,
        entry_indexing=ENTRY_INDEXING,
    ) as factory:
        service = BrokerService(settings, metadata, factory, clock=clock, rng=rng)
        router = build_router(service)
        if register_routes is not None:
            register_routes(router, service)
        peers = PeerAddresses({settings.bind_address, settings.advertised_host()} - WILDCARDS)
        server, tls_server = _http_servers(settings, router, peers)
        async with trio.open_nursery() as nursery:
            ports: list[int] = await nursery.start(server.serve)
            http_url = f"http://{settings.advertised_host()}:{ports[0]}"
            tls_port: int | None = None
            http_url_tls = ""
            if tls_server is not None:
                tls_port = (await nursery.start(tls_server.serve))[0]
                http_url_tls = f"https://{settings.advertised_host()}:{tls_port}"
            broker_url = ""
            broker_url_tls = ""
            binary_ssl = settings.binary_ssl_context()
            binary_door = BinaryFrontDoor(
                service,
                broker_url=lambda: broker_url,
                broker_url_tls=lambda: broker_url_tls,
                ssl_context=binary_ssl,
                keepalive_s=settings.keep_alive_interval_seconds,
                max_message_size=settings.max_message_size,
                chunked_message_bytes_max=settings.chunked_message_bytes_max,
                entry_bytes_max=settings.client.entry_payload_bytes_max - entry_prefix.SIZE,
            )
            binary_scopes = [trio.CancelScope(), trio.CancelScope()]  # plain and TLS listeners
            listeners = await nursery.start(
                _serve_binary,
                binary_scopes[0],
                binary_door.serve,
                settings.broker_service_port,
                settings.bind_address,
            )
            binary_port = int(listeners[0].socket.getsockname()[1])
            broker_url = f"pulsar://{settings.advertised_host()}:{binary_port}"
            binary_tls_port: int | None = None
            if binary_ssl is not None and settings.broker_service_port_tls is not None:
                tls_listeners = await nursery.start(
                    _serve_binary,
                    binary_scopes[1],
                    binary_door.serve_tls,
                    settings.broker_service_port_tls,
                    settings.bind_address,
                )
                binary_tls_port = int(tls_listeners[0].socket.getsockname()[1])
                broker_url_tls = f"pulsar+ssl://{settings.advertised_host()}:{binary_tls_port}"
            if initialize_metadata and settings.cluster_metadata_init:
                await initialize_cluster_metadata(service.policies, settings.cluster, http_url)
            service_scope = trio.CancelScope()

            async def run_service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with service_scope:
                    internal = settings.internal_listener()
                    await service.run(
                        http_url,
                        http_url_tls=http_url_tls,
                        native_url=internal.url if internal is not None and internal.url else broker_url,
                        native_url_tls=(
                            internal.url_tls if internal is not None and internal.url_tls else broker_url_tls
                        ),
                        advertised_listeners=settings.listeners(),
                        task_status=task_status,
                    )

            await nursery.start(run_service)
            peers_scope = trio.CancelScope()
            nursery.start_soon(_maintain_peers, peers_scope, settings, metadata, peers, service.broker_id)
            services_scope = trio.CancelScope()

            async def run_factory_services(
                *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
            ) -> None:
                with services_scope:
                    async with trio.open_nursery() as services:
                        for factory_service in factory_services:
                            await services.start(factory_service, factory)
                        task_status.started()

            await nursery.start(run_factory_services)
            handle = BrokerHandle(
                service,
                router,
                ports[0],
                http_url,
                tls_port,
                http_url_tls,
                binary_port,
                broker_url,
                binary_tls_port,
                broker_url_tls,
            )
            log.info("broker serving at %s", http_url)
            task_status.started(handle)
            try:
                await handle._stop.wait()
            finally:
                with trio.CancelScope(shield=True):
                    await service.shutdown()
                    server.shutdown()
                    for scope in binary_scopes:  # closes the listeners (closing them under accept() fails it)
                        scope.cancel()
                    if tls_server is not None:
                        tls_server.shutdown()
                    service_scope.cancel()
                    services_scope.cancel()
                    peers_scope.cancel()
        handle.stopped.set()


async def _serve_binary(
    scope: trio.CancelScope,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    port: int,
    host: str,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A binary-protocol listener (and its connections) until ``scope`` is cancelled."""
    with scope:
        await trio.serve_tcp(handler, port, host=host, task_status=task_status)


def _http_servers(
    settings: BrokerSettings, router: Router, peers: PeerAddresses
) -> tuple[HttpServer, HttpServer | None]:
    """The plain port's server and, when TLS is configured, the TLS port's."""
    server = HttpServer(
        router,
        settings.http_settings(),
        service=HTTP_SERVICE,
        port_setting="http_port",
        unlimited_address=peers,
    )
    ssl_context = settings.web_ssl_context()
    if ssl_context is None:
        return server, None
    tls_server = HttpServer(
        router,
        settings.http_tls_settings(),
        ssl_context=ssl_context,
        service=HTTPS_SERVICE,
        port_setting="http_port_tls",
        unlimited_address=peers,
    )
    return server, tls_server


async def _maintain_peers(
    scope: trio.CancelScope, settings: BrokerSettings, metadata: MetadataStore, peers: PeerAddresses, me: str
) -> None:
    """Keep ``peers`` up to date until ``scope`` is cancelled; nothing to do without a per-address limit."""
    limit = settings.http.http_connections_per_ip_max
    if limit == 0:
        return
    log.info(
        "connections from other live brokers are not counted against http_connections_per_ip_max=%d, except "
        "from this broker's own address (%s: there a peer cannot be told from a local client)",
        limit,
        ", ".join(sorted(peers.own_hosts)),
    )
    with scope:
        await maintain_peer_addresses(metadata, peers, me)
