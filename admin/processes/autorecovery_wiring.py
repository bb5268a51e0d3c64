"""Wiring AutoRecovery into a process (composition root): inside a bookie, or ``magnetar autorecovery``.

:class:`BookieProcessSettings` is the bookie process's settings model: :class:`BookieSettings` plus the
``autorecovery`` table (``MAGNETAR_AUTORECOVERY__<NAME>``). The two cannot live together lower down - the
bookie package does not know AutoRecovery, which is a client of bookies.

:func:`open_autorecovery` opens what AutoRecovery needs on a metadata store - a TCP transport to the bookies
(with ``bookkeeper_auth_token`` / ``bookkeeper_tls_*`` when the bookies require them), a replication client
- and runs an :class:`~magnetar.bookkeeper.autorecovery.service.AutoRecoveryService` (its daemon only when
``autorecovery.enabled``) for the block. :func:`add_autorecovery_http` adds its routes and metrics to an HTTP
router and a Prometheus registry: the one place a route guard (authentication) plugs in.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar.admin.processes.bookie_settings import BookieSettings
from magnetar.bookkeeper.autorecovery import (
    AutoRecoveryCollector,
    AutoRecoveryService,
    AutoRecoverySettings,
    BookieRoute,
    RouteGuard,
    add_bookie_routes,
    autorecovery_routes,
)
from magnetar.bookkeeper.bookie import BookKeeperServiceSettings, HttpAccess
from magnetar.bookkeeper.client import TcpTransportSettings, open_bookkeeper, open_tcp_transport
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.bookkeeper.runtime.http import HttpRequest, Router

log = logging.getLogger("magnetar.autorecovery")


class AutoRecoveryTable(BaseModel):
    """The ``autorecovery`` table (``MAGNETAR_AUTORECOVERY__<NAME>``), declared once: a bookie's settings and
    ``magnetar autorecovery``'s hold it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    autorecovery: AutoRecoverySettings = AutoRecoverySettings()
    """The AutoRecovery daemon (inside a bookie or on its own), e.g. ``MAGNETAR_AUTORECOVERY__ENABLED=false``;
    its token and TLS towards the bookies are ``autorecovery.bookkeeper_*``."""


class BookieProcessSettings(BookieSettings, AutoRecoveryTable):
    """``magnetar bookie``'s settings: the bookie's own, plus the AutoRecovery daemon it runs."""

    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )


class AutoRecoveryProcessSettings(BaseSettings, BookKeeperServiceSettings, AutoRecoveryTable):
    """``magnetar autorecovery``'s settings (every field also ``MAGNETAR_<NAME>``): the metadata store as
    every process reaches it (``zk_tls_*`` included), the cluster's token key and the superusers that guard
    its HTTP routes as a bookie's guard them (``authentication_enabled``, ``token_*``, ``super_user_roles``,
    ``authenticate_metrics_endpoint``), and the daemon's own table (its token and TLS towards the bookies
    are ``autorecovery.bookkeeper_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    # metadata_url, super_user_roles (allowed the AutoRecovery REST API when authentication is on),
    # bind_address, http_port (of /metrics and the REST API), port_file: BookKeeperServiceSettings', as a
    # bookie's
    daemon_id: str | None = None
    """Name in the auditor election and on locks; default ``<hostname>:<pid>``."""

    def resolved_daemon_id(self) -> str:
        return self.daemon_id or f"{socket.gethostname()}:{os.getpid()}"


@asynccontextmanager
async def open_autorecovery(
    metadata: MetadataStore, settings: AutoRecoverySettings, *, daemon_id: str
) -> AsyncIterator[AutoRecoveryService]:
    """A running :class:`AutoRecoveryService` (and its client and transport) for the block."""
    # The client hands the transport its add_timeout_ms / read_timeout_ms: one timeout tracker per request.
    transport_settings = TcpTransportSettings()
    token = None
    if settings.bookkeeper_auth_token:
        token = read_token_setting(settings.bookkeeper_auth_token, "autorecovery.bookkeeper_auth_token")
    tls = None
    if settings.bookkeeper_tls_enabled:
        tls = client_ssl_context(
            trust_certs_file=settings.bookkeeper_tls_trust_certs_file,
            certificate_file=settings.bookkeeper_tls_certificate_file,
            key_file=settings.bookkeeper_tls_key_file,
        )
    async with (
        open_tcp_transport(transport_settings, ssl_context=tls, auth_token=token) as transport,
        open_bookkeeper(metadata, transport, settings.client_settings()) as bk,
        trio.open_nursery() as nursery,
    ):
        service = AutoRecoveryService(bk, settings, daemon_id=daemon_id)
        await nursery.start(service.run)
        log.info("AutoRecovery %s (%s)", daemon_id, "daemon running" if settings.enabled else "REST API only")
        try:
            yield service
        finally:
            nursery.cancel_scope.cancel()


def add_autorecovery_http(
    router: Router,
    service: AutoRecoveryService,
    registry: CollectorRegistry | None = None,
    guard: RouteGuard | None = None,
    *,
    metrics_scope: str = "",
) -> None:
    """The AutoRecovery REST routes (through ``guard``, when authentication asks for one) and metrics
    (BookKeeper's names under ``metrics_scope``: ``replication_`` inside a bookie)."""
    add_bookie_routes(router, autorecovery_routes(service), guard)
    if registry is not None:
        collector = AutoRecoveryCollector(service.daemon.stats, service.clock.monotonic, metrics_scope)
        registry.register(collector)


def operator_guard(access: HttpAccess) -> RouteGuard:
    """The AutoRecovery routes are operators' endpoints, reading or not (they list ledgers and bookies)."""

    async def guard(request: HttpRequest, route: BookieRoute) -> None:
        access.check_operator(request)

    return guard
