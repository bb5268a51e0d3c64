"""``magnetar standalone``: everything in one process on an embedded default (Pulsar's ``pulsar standalone``).

* metadata store: embedded RocksDB under ``DATA_DIR/metadata`` (one process; ephemeral nodes die with it);
* ``--bookies N`` bookies, each with the disk storage engine under ``DATA_DIR/bookie-<i>``, serving the bookie
  protocol on ``127.0.0.1:<bookie_port + i>`` (stable ports, because a bookie's id is its address and ledgers
  remember the ids of their bookies: data written before a restart must be found again after it);
* the broker (WebSocket API, admin REST API, ``/metrics``) on ``--http-port`` (default 8080), talking to the
  bookies through in-process calls (the same bookie request logic, without TCP and the codec in between);
* replication E/W/A = 1/1/1 for one bookie, 2/2/2 for two, 3/3/2 for three or more (overridable).

Each bookie runs its garbage collector and entry-log compactor (``magnetar.gc``). The bookies' HTTP API -
BookKeeper's ``/api/v1/bookie/...`` paths, GC endpoints included, and their metrics - is served on the
broker's HTTP port (:mod:`.standalone_http`). Every broker and bookie setting is a standalone setting
(:mod:`.standalone_settings`, which also holds the defaults sized for one machine).

Security is off by default, as in Pulsar's standalone. ``--authentication-enabled`` with a token key turns
on token authentication and authorization for the broker (WebSocket API, lookup, admin API) and for the
bookies' TCP ports; ``--super-user-roles`` names the administrators. ``--http-port-tls`` with a certificate
and key adds an HTTPS/WSS port. The bookies' TCP ports listen on loopback only and nothing of the standalone
needs them (its broker reaches its bookies in process): with authentication on they admit only the superusers
(a tenant's token is refused), and adds and fencing reads need each ledger's password, which only the broker
knows (see ``managed_ledger_password``). The start-up log says so, per bookie.

Data survives restarts. Ctrl-C (SIGINT) or SIGTERM stops it cleanly: the broker unloads its topics (cursors
persisted), bookies drain, the storage engines take a final checkpoint. Once serving it prints a
``{"event": "standalone-ready", ...}`` line on stdout.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.broker_admin import BrokerAdmin
from magnetar.admin.processes.config import (
    ConfigError,
    config_file_from,
    environment_models,
    load_settings,
    warn_unknown_environment,
)
from magnetar.admin.processes.gc_wiring import attach_garbage_collector
from magnetar.admin.processes.process_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    STOP_SIGNALS,
    Hints,
    announce,
    explain,
    first_signal,
    tune_gc,
)
from magnetar.admin.processes.standalone_http import add_standalone_bookie_routes
from magnetar.admin.processes.standalone_settings import StandaloneSettings
from magnetar.bookkeeper.bookie import (
    Bookie,
    BookieIdentityError,
    bookie_id_for,
    open_bookie_listener,
    verify_bookie_identity,
)
from magnetar.bookkeeper.bookie.storage import open_ledger_store
from magnetar.bookkeeper.client import LocalTransport, open_bookkeeper
from magnetar.bookkeeper.metadata import MetadataStore, StoreInUseError, open_metadata_store
from magnetar.bookkeeper.runtime import (
    ListenError,
    check_connection_limits,
    check_ports_free,
    install_from_environment,
    raise_nofile_limit,
)
from magnetar.bookkeeper.runtime.http import Router
from magnetar.broker.run import BrokerHandle, broker_ports, run_broker
from magnetar.broker.service import BrokerService
from magnetar.gc import BookieGarbageCollector

__all__ = ["StandaloneSettings", "main", "open_bookies", "serve"]

log = logging.getLogger("magnetar.standalone")

RouteRegistration = Callable[[Router, BrokerService], None]


class DataDirError(Exception):
    """The data directory cannot be created or used."""


HINTS: Hints = {
    DataDirError: "choose another directory with --data-dir or MAGNETAR_DATA_DIR",
    BookieIdentityError: (
        "in a standalone, bookie i keeps its data in DATA_DIR/bookie-<i> and its id is "
        "127.0.0.1:<bookie_port + i>: start it with the --bookie-port its data directory was created with, "
        "or with a new --data-dir to start fresh"
    ),
    StoreInUseError: (
        "is another magnetar standalone running on this data directory? Stop it, or start this one with "
        "another directory: --data-dir or MAGNETAR_DATA_DIR"
    ),
}


ENVIRONMENT_MODELS = environment_models(StandaloneSettings)
"""The settings a standalone reads from ``MAGNETAR_*`` variables: its own, and its broker's and its bookies'
by their flat names (``MAGNETAR_RETENTION_CHECK_INTERVAL_S``, ``MAGNETAR_STORAGE_ENGINE__...``)."""


def main(
    overrides: dict[str, Any],
    register_routes: RouteRegistration | None = None,
    *,
    config_file: str | None = None,
) -> int:
    try:
        loaded = load_settings(StandaloneSettings, overrides, config_file_from(config_file))
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    warn_unknown_environment(*ENVIRONMENT_MODELS)
    for warning in loaded.ignored:
        log.warning("%s", warning)
    settings = loaded.settings
    try:
        return trio.run(serve, settings, register_routes)
    except Exception as exc:  # ExceptionGroup included
        log.error("standalone failed: %s", explain(exc, HINTS), exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


@dataclass
class StandaloneBookies:
    transport: LocalTransport
    bookies: list[Bookie] = field(default_factory=list)
    collectors: list[BookieGarbageCollector] = field(default_factory=list)


@asynccontextmanager
async def open_bookies(
    settings: StandaloneSettings, metadata: MetadataStore
) -> AsyncIterator[StandaloneBookies]:
    """Start the bookies (disk engines, TCP servers, registration, garbage collectors) and a local transport
    routed to them."""
    transport = LocalTransport()
    running = StandaloneBookies(transport)
    bookies = running.bookies
    async with AsyncExitStack() as stack:
        # Every port is bound before any bookie's identity (its cookie, bound to its port) is written: a
        # start that fails on a taken port leaves the directories as they were, and the retry with another
        # --bookie-port is a new bookie, not a changed one.
        listeners = [
            await _bind_bookie_port(stack, settings.bookie_settings(index), index)
            for index in range(settings.bookies)
        ]
        for index in range(settings.bookies):  # cookies: refuse a bookie whose data is gone (identity.py)
            own = settings.bookie_settings(index)
            await verify_bookie_identity(metadata, own, bookie_id_for(own.advertised_host(), own.port))
        # The storage engines outlive the bookies that serve them: opened first, closed last (each close
        # drains its journal and takes a final checkpoint).
        stores = [
            await stack.enter_async_context(open_ledger_store(settings.bookie_settings(i).storage_settings()))
            for i in range(settings.bookies)
        ]
        async with trio.open_nursery() as nursery:
            await nursery.start(transport.run)
            for index, store in enumerate(stores):
                bookie_settings = settings.bookie_settings(index)
                bookie = Bookie(bookie_settings, store, metadata, listener=listeners[index])
                endpoint = await nursery.start(bookie.run)
                transport.add_bookie(endpoint.bookie_id, bookie.core)
                bookies.append(bookie)
                collector = attach_garbage_collector(bookie, store, metadata)
                if collector is not None:
                    await nursery.start(collector.run)
                    running.collectors.append(collector)
                log.info(
                    "bookie %s ready (data in %s); its TCP port is bound to loopback and unused by the "
                    "broker, which calls it in process; %s",
                    endpoint.bookie_id,
                    bookie_settings.data_dir,
                    _bookie_port_access(bookie_settings),
                )
            try:
                yield running
            finally:
                with trio.CancelScope(shield=True):
                    for bookie in bookies:
                        bookie.request_stop()
                    for bookie in bookies:
                        await bookie.stopped.wait()
                nursery.cancel_scope.cancel()


async def _bind_bookie_port(
    stack: AsyncExitStack, settings: BookieSettings, index: int
) -> trio.SocketListener:
    """Bind bookie ``index``'s port (the standalone's ``bookie_port + index``), closed when ``stack`` exits
    (the bookie's server closes it first once it runs); a failure names the standalone's setting."""
    try:
        listener = await open_bookie_listener(settings)
    except ListenError as exc:
        if exc.setting != "port":
            raise
        note = f"bookie {index} listens on bookie_port + {index}" if index else ""
        raise exc.renamed(f"bookie {index} (bookie protocol)", "bookie_port", note) from None
    stack.push_async_callback(listener.aclose)
    return listener


def _bookie_port_access(settings: BookieSettings) -> str:
    if not settings.authentication_enabled:
        return "authentication off: local processes may read ledgers (writes need a ledger's password)"
    roles = ", ".join(sorted(settings.bookie_client_roles)) or "none"
    return f"authentication on: only superuser roles ({roles}) may connect"


async def serve(settings: StandaloneSettings, register_routes: RouteRegistration | None = None) -> int:
    data_dir = settings.data_dir.resolve()
    try:
        await trio.Path(data_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot use {data_dir} as the data directory: {exc.strerror}") from exc
    broker_settings = settings.broker_settings()
    raise_nofile_limit()
    check_connection_limits(
        broker_settings.http.http_connections_max, 2 if broker_settings.http_port_tls is not None else 1
    )
    await check_ports_free(broker_ports(broker_settings))  # before anything is written (see open_bookies)
    async with (
        open_metadata_store(f"rocksdb://{data_dir / 'metadata'}") as metadata,
        open_bookies(settings, metadata) as running,
        open_bookkeeper(metadata, running.transport, broker_settings.client_settings()) as bk,
    ):
        extras = BrokerAdmin(broker_settings).run_kwargs()  # admin API, retention, storage metrics
        broker_routes: RouteRegistration = register_routes or extras["register_routes"]

        def routes(router: Router, service: BrokerService) -> None:
            broker_routes(router, service)
            add_standalone_bookie_routes(router, service, running.bookies, running.collectors)

        extras["register_routes"] = routes
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                start = functools.partial(run_broker, broker_settings, metadata, bk, **extras)
                handle: BrokerHandle = await nursery.start(start)
                tune_gc()
                monitor = install_from_environment()
                e, w, a = settings.quorums()
                log.info(
                    "Magnetar standalone ready at %s (data in %s, %d bookie(s), E/W/A %d/%d/%d)",
                    handle.http_url,
                    data_dir,
                    settings.bookies,
                    e,
                    w,
                    a,
                )
                ready: dict[str, Any] = {
                    "event": "standalone-ready",
                    "httpUrl": handle.http_url,
                    "port": handle.port,
                    "brokerUrl": handle.broker_url,
                    "brokerServicePort": handle.broker_service_port,
                }
                if handle.tls_port is not None:
                    ready.update(httpUrlTls=handle.http_url_tls, tlsPort=handle.tls_port)
                if handle.broker_service_port_tls is not None:
                    ready.update(
                        brokerUrlTls=handle.broker_url_tls,
                        brokerServicePortTls=handle.broker_service_port_tls,
                    )
                announce(ready)
                await first_signal(signals, log)
                handle.stop()
                await handle.stopped.wait()
                if monitor is not None:
                    log.warning("%s", monitor.report())
    log.info("standalone stopped cleanly")
    return 0
