"""AutoRecovery and cluster endpoints of the bookie HTTP API, at BookKeeper's paths and with its answers.

=================================================== ======= ==============================================
path                                                method  answer
=================================================== ======= ==============================================
``/api/v1/autorecovery/list_under_replicated_ledger`` GET   JSON list of ledger ids (``?printmissingreplica``:
                                                            ``{id: [bookies]}``; ``?missingreplica=B``,
                                                            ``?excludingmissingreplica=B`` filter); 404 "No
                                                            under replicated ledgers found"
``/api/v1/autorecovery/who_is_auditor``             GET     ``Auditor: <id>``; 404 "No auditor elected"
``/api/v1/autorecovery/trigger_audit``              PUT     audit now, every missing bookie counted lost
``/api/v1/autorecovery/lost_bookie_recovery_delay`` GET/PUT ``{"delay_seconds": N}`` sets it (live)
``/api/v1/autorecovery/status``                     GET/PUT ``{"enabled": bool}``; PUT ``?enabled=true|false``
                                                            switches replication cluster-wide
``/api/v1/autorecovery/decommission``               PUT     ``{"bookie_src": "host:port"}`` starts it;
                                                    GET     ``?bookie_src=`` its progress (Magnetar's)
``/api/v1/autorecovery/bookie``                     PUT     recover: ``{"bookie_src": ["host:port"]}``;
                                                    GET     ``?bookie_src=`` its progress (Magnetar's)
``/api/v1/bookie/cluster_info``                     GET     BookKeeper's ``ClusterInfo``
``/api/v1/bookie/list_bookies``                     GET     ``{"host:port": hostname|null}``; ``?type=ro``
                                                            read-only ones; ``?print_hostnames=true``
``/api/v1/ledger/list``                             GET     ``{"id": null}``; ``?print_metadata=true``:
                                                            ``{"id": metadata}``
``/api/v1/ledger/metadata``                         GET     ``?ledger_id=N``: ``{"N": metadata}``
=================================================== ======= ==============================================

Ledger metadata is printed as BookKeeper's JSON of ``LedgerMetadata``: ``ensembleSize``,
``writeQuorumSize``, ``ackQuorumSize``, ``lastEntryId``, ``length``, ``digestType``, ``state``, ``closed``,
``ctime``, ``cToken``, ``customMetadata`` (base64 values) and ``allEnsembles`` - the ensembles keyed by
their first entry id. Unlike BookKeeper the ledger's password is never printed.

Where BookKeeper answers 404 to every bad request, a malformed one (missing field, bad bookie id, bad JSON)
is answered 400 with ``{"reason": ...}`` naming the field; the "nothing found" answers keep BookKeeper's 404.

Every route declares whether it changes anything (:attr:`BookieRoute.mutating`); :func:`add_bookie_routes`
registers routes through one optional *guard* (run before the handler, it raises ``HttpError`` 401/403), so
the rule "mutating endpoints need a superuser when authentication is on" applies to all of them in one place.
"""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from magnetar.bookkeeper.autorecovery.bookie_recovery import RecoveryKind
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService
from magnetar.bookkeeper.client import LedgerMetadata, NoSuchLedgerError
from magnetar.bookkeeper.metadata import list_bookies
from magnetar.bookkeeper.runtime.http import (
    HeadCheck,
    HttpError,
    HttpHandler,
    HttpRequest,
    HttpResponse,
    RequestHead,
    Router,
    json_response,
    text_response,
)

AUTORECOVERY = "/api/v1/autorecovery"
_BOOKIE_ID = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
LEDGERS_LISTED_MAX = 100_000
"""Most ledgers ``/api/v1/ledger/list`` returns in one answer (with metadata: ``page`` walks them)."""
LEDGER_PAGE_SIZE = 100
"""Ledgers per ``page`` of ``/api/v1/ledger/list?print_metadata=true&page=N`` (BookKeeper's batch)."""


@dataclass(frozen=True, slots=True)
class BookieRoute:
    method: str
    path: str
    handler: HttpHandler
    mutating: bool


RouteGuard = Callable[[HttpRequest, BookieRoute], Awaitable[None]]


def add_bookie_routes(router: Router, routes: Sequence[BookieRoute], guard: RouteGuard | None = None) -> None:
    """Register ``routes``; with ``guard``, every request passes it first (it raises to refuse). The guard is
    the route's head check: it decides on the request head, so a refused caller's body is never read."""
    for route in routes:
        check = None if guard is None else _head_check(route, guard)
        router.route(route.method, route.path, route.handler, check=check)


def _head_check(route: BookieRoute, guard: RouteGuard) -> HeadCheck:
    async def check(head: RequestHead) -> None:
        await guard(HttpRequest(head), route)

    return check


def bookie_id_param(value: Any, name: str = "bookie_src") -> str:
    if not isinstance(value, str) or not _BOOKIE_ID.match(value):
        raise HttpError(400, f"{name} must be a bookie id host:port, got {value!r}")
    return value


def metadata_json(ledger_id: int, metadata: LedgerMetadata) -> dict[str, Any]:
    return {
        "ledgerId": ledger_id,
        "metadataFormatVersion": 3,
        "ensembleSize": metadata.ensemble_size,
        "writeQuorumSize": metadata.write_quorum,
        "ackQuorumSize": metadata.ack_quorum,
        "lastEntryId": metadata.last_entry_id,
        "length": metadata.length,
        "digestType": None if metadata.digest_type is None else metadata.digest_type.name,
        "state": metadata.state.name,
        "closed": metadata.is_closed,
        "ctime": metadata.ctime_ms,
        "cToken": metadata.creator_token,
        "customMetadata": {
            k: base64.b64encode(v).decode() for k, v in sorted(metadata.custom_metadata.items())
        },
        "allEnsembles": {str(first): list(members) for first, members in metadata.ensembles},
    }


def autorecovery_routes(service: AutoRecoveryService) -> list[BookieRoute]:
    """Every route of this module: AutoRecovery's and the cluster/ledger listings."""
    return _recovery_routes(service) + _cluster_routes(service)


def _recovery_routes(service: AutoRecoveryService) -> list[BookieRoute]:
    manager = service.manager

    async def list_under_replicated(request: HttpRequest) -> HttpResponse:
        including = request.query.get("missingreplica") or None
        excluding = request.query.get("excludingmissingreplica") or None
        marks = [
            m
            for m in await service.marks()
            if (including is None or including in m.missing)
            and (excluding is None or excluding not in m.missing)
        ]
        if not marks:
            return text_response("No under replicated ledgers found", 404)
        if "printmissingreplica" in request.query:
            return json_response({str(m.ledger_id): sorted(m.missing) for m in marks})
        return json_response([m.ledger_id for m in marks])

    async def who_is_auditor(request: HttpRequest) -> HttpResponse:
        auditor = await manager.current_auditor()
        if auditor is None:
            return text_response("No auditor elected", 404)
        return text_response(f"Auditor: {auditor}")

    async def trigger_audit(request: HttpRequest) -> HttpResponse:
        if not await manager.is_enabled():
            raise HttpError(409, "ledger replication is disabled: enable it before triggering an audit")
        await manager.set_delay_s(await manager.get_delay_s())
        return text_response("Success trigger audit.")

    async def get_delay(request: HttpRequest) -> HttpResponse:
        return text_response(f"lostBookieRecoveryDelay value: {await manager.get_delay_s()}")

    async def set_delay(request: HttpRequest) -> HttpResponse:
        body = request.json()
        delay = body.get("delay_seconds") if isinstance(body, dict) else None
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= 86_400:
            raise HttpError(400, 'body must be {"delay_seconds": <0..86400>}')
        await manager.set_delay_s(delay)
        return text_response(f"Success set lostBookieRecoveryDelay to {delay}")

    async def get_status(request: HttpRequest) -> HttpResponse:
        return json_response({"enabled": await manager.is_enabled()})

    async def set_status(request: HttpRequest) -> HttpResponse:
        enabled = request.query.get("enabled")
        if enabled is None:
            raise HttpError(400, "parameter 'enabled' (true|false) is missing")
        await manager.set_enabled(enabled.lower() == "true")
        return json_response({"enabled": await manager.is_enabled()})

    async def decommission(request: HttpRequest) -> HttpResponse:
        body = request.json()
        bookie = bookie_id_param(body.get("bookie_src") if isinstance(body, dict) else None)
        service.start_job(RecoveryKind.DECOMMISSION, bookie)
        return text_response(f"Success send decommission Bookie command {bookie}")

    async def recover(request: HttpRequest) -> HttpResponse:
        body = request.json()
        sources = body.get("bookie_src") if isinstance(body, dict) else None
        if not isinstance(sources, list) or not sources:
            raise HttpError(400, 'body must be {"bookie_src": ["host:port", ...]}')
        for source in sources:
            service.start_job(RecoveryKind.RECOVER, bookie_id_param(source))
        return text_response("Success send recovery request command.")

    def progress_of(kind: RecoveryKind) -> HttpHandler:
        async def progress(request: HttpRequest) -> HttpResponse:
            bookie = bookie_id_param(request.query.get("bookie_src"))
            job = service.job(kind, bookie)
            if job is None:
                raise HttpError(404, f"no {kind.value} of {bookie} was started through this bookie")
            return json_response(job.to_json(service.clock.monotonic()))

        return progress

    return [
        BookieRoute("GET", f"{AUTORECOVERY}/list_under_replicated_ledger", list_under_replicated, False),
        BookieRoute("GET", f"{AUTORECOVERY}/who_is_auditor", who_is_auditor, False),
        BookieRoute("PUT", f"{AUTORECOVERY}/trigger_audit", trigger_audit, True),
        BookieRoute("GET", f"{AUTORECOVERY}/lost_bookie_recovery_delay", get_delay, False),
        BookieRoute("PUT", f"{AUTORECOVERY}/lost_bookie_recovery_delay", set_delay, True),
        BookieRoute("GET", f"{AUTORECOVERY}/status", get_status, False),
        BookieRoute("PUT", f"{AUTORECOVERY}/status", set_status, True),
        BookieRoute("PUT", f"{AUTORECOVERY}/decommission", decommission, True),
        BookieRoute("GET", f"{AUTORECOVERY}/decommission", progress_of(RecoveryKind.DECOMMISSION), False),
        BookieRoute("PUT", f"{AUTORECOVERY}/bookie", recover, True),
        BookieRoute("GET", f"{AUTORECOVERY}/bookie", progress_of(RecoveryKind.RECOVER), False),
    ]


def _cluster_routes(service: AutoRecoveryService) -> list[BookieRoute]:
    manager = service.manager
    bk = service.bk

    async def cluster_info(request: HttpRequest) -> HttpResponse:
        return json_response((await service.cluster_info()).to_json())

    async def list_bookies_route(request: HttpRequest) -> HttpResponse:
        lists = await list_bookies(manager.store)
        bookies = lists.readonly if request.query.get("type") == "ro" else lists.writable
        names: dict[str, str | None] = dict.fromkeys(sorted(bookies))
        if request.query.get("print_hostnames") == "true":
            for bookie in names:
                names[bookie] = await _hostname(bookie)
        return json_response(names)

    async def list_ledgers(request: HttpRequest) -> HttpResponse:
        with_metadata = request.query.get("print_metadata") == "true"
        page = _int_param(request, "page", 0)
        ids: list[int] = []
        async for ledger_id in bk.list_ledgers():
            ids.append(ledger_id)
            if len(ids) >= LEDGERS_LISTED_MAX:
                break
        if not with_metadata:
            return json_response(dict.fromkeys((str(i) for i in ids), None))
        if page > 0:
            ids = ids[(page - 1) * LEDGER_PAGE_SIZE : page * LEDGER_PAGE_SIZE]
        out: dict[str, Any] = {}
        for ledger_id in ids:
            try:
                out[str(ledger_id)] = metadata_json(ledger_id, await bk.get_ledger_metadata(ledger_id))
            except NoSuchLedgerError:
                continue
        return json_response(out)

    async def ledger_metadata(request: HttpRequest) -> HttpResponse:
        ledger_id = _int_param(request, "ledger_id", None)
        try:
            metadata = await bk.get_ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            raise HttpError(404, f"ledger {ledger_id} does not exist") from None
        return json_response({str(ledger_id): metadata_json(ledger_id, metadata)})

    return [
        BookieRoute("GET", "/api/v1/bookie/cluster_info", cluster_info, False),
        BookieRoute("GET", "/api/v1/bookie/list_bookies", list_bookies_route, False),
        BookieRoute("GET", "/api/v1/ledger/list", list_ledgers, False),
        BookieRoute("GET", "/api/v1/ledger/metadata", ledger_metadata, False),
    ]


def _int_param(request: HttpRequest, name: str, default: int | None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise HttpError(400, f"parameter {name!r} is missing")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"parameter {name!r} must be an integer, got {raw!r}") from None
    if value < 0:
        raise HttpError(400, f"parameter {name!r} must be >= 0, got {value}")
    return value


async def _hostname(bookie: str) -> str | None:
    host = bookie.rsplit(":", 1)[0].strip("[]")
    try:
        name, _, _ = await trio.to_thread.run_sync(socket.gethostbyaddr, host)
    except OSError:
        return host
    return name
