"""The ``magnetar autorecovery`` process: one AutoRecovery daemon (auditor election + replication worker)
and, with ``--http-port``, ``/metrics`` and the AutoRecovery REST API (the same routes a bookie serves,
guarded as a bookie guards them: a token of ``super_user_roles`` once ``authentication_enabled``), and
``GET /heartbeat`` - 200 ``"OK"`` whenever the HTTP server answers, open whatever the authentication, as a
bookie's: the liveness probe, which must keep working when ``/metrics`` needs a token.

Once running it prints ``{"event": "autorecovery-ready", "daemonId": ..., "httpPort": ...}`` on stdout (and
to ``--port-file``). SIGTERM / SIGINT / SIGHUP stop it: its vote and locks are withdrawn, a copy in progress
is abandoned (the ledger's mark stays, another daemon takes it). Exit code 0; a startup failure is non-zero
with a log line saying why.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from prometheus_client import CollectorRegistry, generate_latest

from magnetar.admin.processes.autorecovery_wiring import (
    AutoRecoveryProcessSettings,
    add_autorecovery_http,
    open_autorecovery,
    operator_guard,
)
from magnetar.admin.processes.config import (
    ConfigError,
    config_file_from,
    load_settings,
    warn_unknown_environment,
)
from magnetar.admin.processes.process_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    STOP_SIGNALS,
    announce,
    describe,
    first_signal,
)
from magnetar.bookkeeper.bookie import BookieHttpAccess, head_check
from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    HttpSettings,
    Router,
    json_response,
    serve_http,
)

log = logging.getLogger("magnetar.autorecovery")

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def main(overrides: dict[str, Any], config_file: str | None = None) -> int:
    try:
        settings = load_settings(
            AutoRecoveryProcessSettings, overrides, config_file_from(config_file)
        ).settings
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    warn_unknown_environment(AutoRecoveryProcessSettings)
    try:
        return trio.run(serve, settings)
    except Exception as exc:  # ExceptionGroup included
        log.error("autorecovery failed: %s", describe(exc), exc_info=log.isEnabledFor(logging.DEBUG))
        return EXIT_FAILED


async def serve(settings: AutoRecoveryProcessSettings) -> int:
    daemon_id = settings.resolved_daemon_id()
    recovery = settings.autorecovery.model_copy(update={"enabled": True})
    async with (
        open_metadata_store(settings.metadata_url, settings.metadata_settings()) as metadata,
        open_autorecovery(metadata, recovery, daemon_id=daemon_id) as service,
    ):
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                http_port = None
                if settings.http_port is not None:
                    registry = CollectorRegistry(auto_describe=False)
                    router = Router()

                    async def metrics(request: HttpRequest) -> HttpResponse:
                        headers = (("content-type", PROMETHEUS_CONTENT_TYPE),)
                        return HttpResponse(200, headers, generate_latest(registry))

                    async def heartbeat(request: HttpRequest) -> HttpResponse:
                        return json_response("OK")

                    access = BookieHttpAccess(settings)
                    router.get("/metrics", metrics, check=head_check(access.check_metrics))
                    router.get("/heartbeat", heartbeat)
                    add_autorecovery_http(router, service, registry, operator_guard(access))
                    http = HttpSettings(http_bind_address=settings.bind_address, http_port=settings.http_port)
                    ports: list[int] = await nursery.start(serve_http, router, http)
                    http_port = ports[0]
                announce(
                    {"event": "autorecovery-ready", "daemonId": daemon_id, "httpPort": http_port},
                    settings.port_file,
                )
                await first_signal(signals, log)
                nursery.cancel_scope.cancel()
    if settings.port_file is not None:
        settings.port_file.unlink(missing_ok=True)
    log.info("autorecovery %s exited cleanly", daemon_id)
    return 0
