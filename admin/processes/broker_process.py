"""The broker process (``magnetar broker``): the composition root that wires one broker together.

It opens the metadata store named by ``--metadata-url``, a TCP transport to the bookies it finds there, the
replication client and :func:`~magnetar.broker.run.run_broker` (managed-ledger factory, broker service, HTTP
server) with the admin REST API, the retention service and the storage metrics of
:class:`~magnetar.admin.processes.broker_admin.BrokerAdmin`. Once serving it prints one JSON line on stdout,
``{"event": "broker-ready", "brokerId": ..., "httpUrl": ..., "port": ...}`` (and writes it to
``--port-file``), so tests and scripts find a ``--http-port 0`` broker. Logs go to stderr. SIGTERM or SIGINT
stops it gracefully: topics unloaded (cursors persisted), bundles released, connections drained; exit 0.

Security (off by default): the broker presents ``bookkeeper_auth_token`` to bookies that require a token and
connects to them over TLS with ``bookkeeper_tls_enabled``; key files and certificates are read at start-up,
so a missing file stops the process with a message naming it.

:func:`tune_gc` is applied at start-up: CPython's generational collector otherwise spends a large share of
a busy broker's time in full (gen-2) passes over long-lived objects (see tests/bench/RESULTS.md).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import trio

from magnetar.admin.processes.broker_admin import BrokerAdmin
from magnetar.admin.processes.config import (
    ConfigError,
    config_file_from,
    load_settings,
    warn_unknown_environment,
)
from magnetar.admin.processes.process_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    METADATA_HINTS,
    STOP_SIGNALS,
    announce,
    explain,
    first_signal,
    tune_gc,
)
from magnetar.bookkeeper.client import TcpTransportSettings, open_bookkeeper, open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.bookkeeper.runtime import check_connection_limits, install_from_environment, raise_nofile_limit
from magnetar.broker.run import BrokerHandle, run_broker
from magnetar.broker.settings import BrokerSettings

log = logging.getLogger("magnetar.broker")


def main(overrides: dict[str, Any], *, port_file: str | None = None, config_file: str | None = None) -> int:
    try:
        settings = load_settings(BrokerSettings, overrides, config_file_from(config_file)).settings
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    warn_unknown_environment(BrokerSettings)
    try:
        return trio.run(serve, settings, Path(port_file) if port_file else None)
    except Exception as exc:  # ExceptionGroup included
        log.error("broker failed: %s", explain(exc, METADATA_HINTS), exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


async def serve(settings: BrokerSettings, port_file: Path | None = None) -> int:
    raise_nofile_limit()
    ports = 2 if settings.http_port_tls is not None else 1
    check_connection_limits(settings.http.http_connections_max, ports)
    # The client hands the transport its add_timeout_ms / read_timeout_ms: one timeout tracker per request.
    transport_settings = TcpTransportSettings()
    bookie_tls = settings.bookkeeper_ssl_context()
    bookie_token = settings.bookkeeper_token()
    async with (
        open_metadata_store(settings.metadata_url, settings.metadata_settings()) as metadata,
        open_tcp_transport(transport_settings, ssl_context=bookie_tls, auth_token=bookie_token) as transport,
        open_bookkeeper(metadata, transport, settings.client_settings()) as bk,
    ):
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                admin = BrokerAdmin(settings)  # admin REST routes, retention service, storage metrics
                start = functools.partial(run_broker, settings, metadata, bk, **admin.run_kwargs())
                handle: BrokerHandle = await nursery.start(start)
                if settings.gc_tuning:
                    tune_gc()
                monitor = install_from_environment()
                ready: dict[str, Any] = {
                    "event": "broker-ready",
                    "brokerId": handle.service.broker_id,
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
                announce(ready, port_file)
                await first_signal(signals, log)
                handle.stop()
                await handle.stopped.wait()
                if monitor is not None:
                    log.warning("%s", monitor.report())
    if port_file is not None:
        await trio.Path(port_file).unlink(missing_ok=True)
    log.info("broker %s exited cleanly", handle.http_url)
    return 0
