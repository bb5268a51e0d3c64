"""The bookie process (``magnetar bookie``): the composition root that wires a bookie together.

It opens the metadata store, builds the ledger store named by ``storage``, serves the bookie protocol and
registers the bookie (``/ledgers/available/<host:port>``). With the disk engine it also runs the garbage
collector and entry-log compactor (``magnetar.gc``; settings ``gc.*``, e.g. ``MAGNETAR_GC__GC_WAIT_TIME_S``),
whose endpoints (``/api/v1/bookie/gc``, ``gc_details``, ``list_disk_file``, ``entry_log_usage``) join the
bookie's HTTP endpoints. It also runs AutoRecovery (:mod:`.autorecovery_wiring`; settings ``autorecovery.*``,
e.g. ``MAGNETAR_AUTORECOVERY__ENABLED=false`` to leave it to ``magnetar autorecovery`` processes): a vote in
the auditor election and a replication worker, plus the AutoRecovery REST API (``/api/v1/autorecovery/...``,
``/api/v1/bookie/cluster_info``, ``list_bookies``, ``/api/v1/ledger/...``) on the bookie's HTTP port. With
``authentication_enabled`` those endpoints need a token of one of ``super_user_roles`` (``is_ready`` and
``/heartbeat`` stay open, ``/metrics`` follows ``authenticate_metrics_endpoint``: see
:mod:`magnetar.bookkeeper.bookie.http_api`); the AutoRecovery routes are operator endpoints.

Discovering the port (``--port 0``): once the bookie serves and is registered it prints one JSON line on
stdout, ``{"event": "bookie-ready", "bookieId": ..., "host": ..., "port": ...}``, and, with
``--port-file PATH``, writes the same document to PATH atomically (removed again on a clean exit). Logs go to
stderr. SIGTERM or SIGINT stops it in order: drain connections, unregister, close the store; exit code 0.
A startup failure (port in use, bookie id held by another session, bad settings) exits non-zero with a log
line saying why.

Identity (:mod:`magnetar.bookkeeper.bookie.identity`). The port is bound first, so that the bookie id is
known with ``--port 0`` too; then, before the storage engine opens its directories, the bookie's cookies are
checked (written at its first start). A bookie whose data is gone (a wiped or replaced volume), whose address
changed or whose volumes were swapped is refused: one ``bookie refused to start:`` log line says which and
what to do, and the exit code is non-zero. ``magnetar bookie --format [--force]`` empties the bookie's
directories and deletes its cookie from the metadata store, so that it starts next time as a new bookie.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from magnetar.admin.processes.autorecovery_wiring import (
    BookieProcessSettings,
    add_autorecovery_http,
    open_autorecovery,
    operator_guard,
)
from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.admin.processes.config import (
    ConfigError,
    config_file_from,
    load_settings,
    warn_unknown_environment,
)
from magnetar.admin.processes.gc_http_api import add_gc_routes
from magnetar.admin.processes.gc_wiring import attach_garbage_collector
from magnetar.admin.processes.process_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    METADATA_HINTS,
    STOP_SIGNALS,
    Hints,
    announce,
    explain,
    first_signal,
)
from magnetar.bookkeeper.autorecovery import EMBEDDED_SCOPE, AutoRecoveryService
from magnetar.bookkeeper.bookie import (
    Bookie,
    BookieHttpAccess,
    all_of,
    bookie_directories,
    bookie_id_for,
    bookie_router,
    find_identity_error,
    format_bookie,
    open_bookie_listener,
    verify_bookie_identity,
)
from magnetar.bookkeeper.bookie.storage import (
    LedgerStore,
    MemoryLedgerStore,
    StorageInUseError,
    open_ledger_store,
)
from magnetar.bookkeeper.metadata import MetadataStore, open_metadata_store
from magnetar.bookkeeper.runtime import check_connection_limits, check_ports_free, raise_nofile_limit
from magnetar.bookkeeper.runtime.http import HttpSettings, Router, serve_http
from magnetar.gc import BookieGarbageCollector

log = logging.getLogger("magnetar.bookie")

HTTP_SERVICE = "bookie HTTP"

HINTS: Hints = {
    StorageInUseError: (
        "is another bookie running on this data directory? Stop it, or give this bookie another directory "
        "with --data-dir or MAGNETAR_DATA_DIR"
    ),
    **METADATA_HINTS,
}


def main(
    overrides: dict[str, Any],
    config_file: str | None = None,
    *,
    format_data: bool = False,
    force: bool = False,
) -> int:
    try:
        settings = load_settings(BookieProcessSettings, overrides, config_file_from(config_file)).settings
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    warn_unknown_environment(BookieProcessSettings)
    if settings.authentication_enabled and not settings.bookie_client_roles:
        log.error(
            "authentication_enabled needs the roles that may use the bookie protocol: auth_allowed_roles "
            "(the brokers' role, the subject of their bookkeeper_auth_token) and/or super_user_roles"
        )
        return EXIT_USAGE
    try:
        if format_data:
            return trio.run(format_command, settings, force)
        return trio.run(serve, settings)
    except Exception as exc:  # ExceptionGroup included
        refusal = find_identity_error(exc)
        if refusal is not None:
            log.error("bookie refused to %s: %s", "format" if format_data else "start", refusal)
        else:
            log.error("bookie failed: %s", explain(exc, HINTS), exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


async def format_command(settings: BookieSettings, force: bool) -> int:
    """``magnetar bookie --format``: empty the directories, delete the cookie (BookKeeper's bookieformat)."""
    bookie_id = bookie_id_for(settings.advertised_host(), settings.port) if settings.port else None
    if bookie_id is None:
        log.warning("--port 0: the bookie has no fixed id, so no cookie is deleted from the metadata store")
    async with open_metadata_store(settings.metadata_url, settings.metadata_settings()) as metadata:
        result = await format_bookie(metadata, bookie_id, bookie_directories(settings), force=force)
    announce(
        {
            "event": "bookie-formatted",
            "bookieId": bookie_id,
            "deleted": result.deleted,
            "cookieDeleted": result.cookie_deleted,
        }
    )
    return 0


async def serve(settings: BookieProcessSettings) -> int:
    raise_nofile_limit()
    if settings.http_port is not None:
        check_connection_limits(HttpSettings().http_connections_max)
    async with open_metadata_store(settings.metadata_url, settings.metadata_settings()) as metadata:
        listener = await open_bookie_listener(settings)  # the bookie id is host:port, known from here on
        try:
            if settings.http_port is not None:  # every port before the identity is written
                await check_ports_free(
                    [(settings.http_port, settings.bind_address, HTTP_SERVICE, "http_port")]
                )
            port = listener.socket.getsockname()[1]
            await verify_bookie_identity(metadata, settings, bookie_id_for(settings.advertised_host(), port))
            return await _serve_checked(settings, metadata, listener)
        finally:
            await listener.aclose()  # the bookie's server closes it first unless the start failed


async def _serve_checked(
    settings: BookieProcessSettings, metadata: MetadataStore, listener: trio.SocketListener
) -> int:
    async with open_store(settings) as store:
        bookie = Bookie(settings, store, metadata, listener=listener)
        collector = attach_garbage_collector(bookie, store, metadata)
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                access = BookieHttpAccess(settings)
                router = bookie_router(bookie, access)
                http_port = await _start_http(nursery, bookie, collector, router, access)
                endpoint = await nursery.start(bookie.run)
                if collector is not None:
                    collector.name = endpoint.bookie_id
                    await nursery.start(collector.run)
                # AutoRecovery (BEGIN): the daemon inside the bookie, and its REST routes on the bookie's port
                autorecovery = await nursery.start(_run_autorecovery, metadata, settings, endpoint.bookie_id)
                add_autorecovery_http(
                    router,
                    autorecovery,
                    bookie.metrics.registry,
                    operator_guard(access),
                    metrics_scope=EMBEDDED_SCOPE,
                )
                # AutoRecovery (END)
                announce(
                    {
                        "event": "bookie-ready",
                        "bookieId": endpoint.bookie_id,
                        "host": endpoint.host,
                        "port": endpoint.port,
                        "httpPort": http_port,
                    },
                    bookie.settings.port_file,
                )
                nursery.start_soon(_stop_on_signal, signals, bookie)
                await bookie.stopped.wait()
                nursery.cancel_scope.cancel()
        if settings.port_file is not None:
            settings.port_file.unlink(missing_ok=True)
    log.info("bookie %s exited cleanly", endpoint.bookie_id)
    return 0


async def _run_autorecovery(
    metadata: MetadataStore,
    settings: BookieProcessSettings,
    bookie_id: str,
    *,
    task_status: trio.TaskStatus[AutoRecoveryService] = trio.TASK_STATUS_IGNORED,
) -> None:
    """AutoRecovery while the bookie runs: the daemon if ``autorecovery.enabled``; the REST API always."""
    async with open_autorecovery(metadata, settings.autorecovery, daemon_id=bookie_id) as service:
        task_status.started(service)
        await trio.sleep_forever()


@asynccontextmanager
async def open_store(settings: BookieSettings) -> AsyncIterator[LedgerStore]:
    """The ledger storage engine named by ``settings.storage``, running until the block exits."""
    if settings.storage == "disk":
        engine = settings.storage_settings()
        log.info("ledger storage: disk (data %s, journal %s)", engine.data_dir, engine.journal_dir)
        async with open_ledger_store(engine) as disk:
            yield disk
        log.info("ledger storage closed (final checkpoint taken)")
        return
    memory = MemoryLedgerStore(capacity_bytes=settings.memory_store_bytes_max)
    log.info("ledger storage: memory (%d bytes, lost on exit)", settings.memory_store_bytes_max)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(memory.run)
        try:
            yield memory
        finally:
            memory.close()
            nursery.cancel_scope.cancel()


async def _stop_on_signal(signals: AsyncIterator[int], bookie: Bookie) -> None:
    await first_signal(signals, log)
    bookie.request_stop()


async def _start_http(
    nursery: trio.Nursery,
    bookie: Bookie,
    collector: BookieGarbageCollector | None,
    router: Router,
    access: BookieHttpAccess,
) -> int | None:
    """Serve the bookie's HTTP endpoints if ``http_port`` is set; the bound port goes in its registration.
    Routes added to ``router`` later (AutoRecovery's, once the bookie is registered) are served too."""
    settings = bookie.settings
    if settings.http_port is None:
        return None
    http = HttpSettings(http_bind_address=settings.bind_address, http_port=settings.http_port)
    if collector is not None:
        add_gc_routes(router, all_of(lambda: [collector]), access)
    serve = functools.partial(serve_http, router, http, service=HTTP_SERVICE, port_setting="http_port")
    ports: list[int] = await nursery.start(serve)
    bookie.settings = settings.model_copy(update={"http_port": ports[0]})
    log.info("bookie HTTP endpoints on port %d", ports[0])
    return ports[0]
