"""The bookie's HTTP endpoints (BookKeeper's bookie HTTP service, the parts operators and probes use).

* ``GET /metrics`` - Prometheus text format, this bookie's own registry.
* ``GET /heartbeat`` - 200 ``OK`` whenever the HTTP server answers (BookKeeper's heartbeat service): the
  liveness and startup probe. It says nothing about the bookie's state, so a read-only bookie, or one whose
  journal volume is full, is not restarted for it, and it stays open under authentication.
* ``GET /api/v1/bookie/is_ready`` - 200 once the bookie serves and is registered (writable or read-only),
  503 before that, while shutting down and while its journal volume is full: the Kubernetes readiness probe.
* ``GET /api/v1/bookie/state`` - ``{"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}``
  as BookKeeper's ``/api/v1/bookie/state``.
* ``GET /api/v1/bookie/info`` - bookie id and disk figures (BookKeeper's ``freeSpace`` / ``totalSpace``, the
  used fraction and the read-only state; ``journalFreeSpace`` / ``journalTotalSpace`` for the journal's).

Garbage-collection endpoints (``magnetar.admin.processes.gc_http_api``) are added by the composition root
when a garbage collector runs inside the bookie.

Which bookies a route acts on is a :data:`Select` of the request: ``magnetar bookie`` serves its one bookie;
``magnetar standalone`` serves all of its bookies on its own port at the same paths (one bookie answers as
it would on its own port, several answer a list with a ``bookieId`` each, ``is_ready`` is 200 once all
are) and each of them under ``/bookies/{bookieId}`` (:func:`by_bookie_id`), exactly as on its own port.

Access (BookKeeper's HTTP server checks nothing; Magnetar does when authentication is on). Every route is
either an operator's or a probe's, and asks the :class:`HttpAccess` it was given:

* ``is_ready`` and ``heartbeat`` stay open: they are the probes and tell nothing but "ready" and "alive";
* ``/metrics`` needs a superuser only with ``authenticate_metrics_endpoint`` (as the broker's ``/metrics``),
  so probes and scrapers keep working by default;
* everything else - ``info``, ``state``, and every GC endpoint, reading or not - needs a superuser
  (``super_user_roles``): they tell file names, ledger ids and disk figures, or trigger, suspend and force
  compaction. Without a token the answer is 401 ``{"reason": "Authentication required: ..."}``, with a
  token of another role 403.

:class:`BookieHttpAccess` applies these rules with a bookie's own settings (its cluster key and
``super_user_roles``); the standalone applies them with its broker's security.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from magnetar.bookkeeper.bookie.server import Bookie
from magnetar.bookkeeper.runtime import Clock
from magnetar.bookkeeper.runtime.auth.authentication import (
    AuthenticationService,
    AuthenticationSettings,
    http_reason,
)
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError
from magnetar.bookkeeper.runtime.http import (
    HeadCheck,
    HttpError,
    HttpRequest,
    HttpResponse,
    RequestHead,
    Router,
    error_response,
    json_response,
)

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SUPERUSER_REQUIRED = "This operation requires super-user access"
WWW_AUTHENTICATE = ("www-authenticate", 'Bearer realm="magnetar"')
BOOKIE_PREFIX = "/bookies/{bookie_id}"
"""Where a process serving several bookies serves each one's endpoints (``/bookies/127.0.0.1:3181/...``)."""

T = TypeVar("T")
Select = Callable[[HttpRequest], Sequence[T]]
"""The targets (bookies, garbage collectors) a request addresses; raises :class:`HttpError` 404 for none."""


class HttpAccess(Protocol):
    """Who may call an endpoint: each check returns or raises :class:`HttpError` 401 / 403."""

    def check_operator(self, request: HttpRequest) -> None:
        """An operator's endpoint: a superuser when authentication is on."""

    def check_metrics(self, request: HttpRequest) -> None:
        """``/metrics``: a superuser when ``authenticate_metrics_endpoint`` is on."""


class OpenAccess:
    """Everyone may do everything (authentication off)."""

    def check_operator(self, request: HttpRequest) -> None:
        return None

    def check_metrics(self, request: HttpRequest) -> None:
        return None


class OperatorAccessSettings(Protocol):
    """What :class:`BookieHttpAccess` reads from a process's settings (a bookie's, or those of
    ``magnetar autorecovery``)."""

    @property
    def super_user_roles(self) -> Sequence[str]: ...

    @property
    def authenticate_metrics_endpoint(self) -> bool: ...

    def authentication_settings(self) -> AuthenticationSettings: ...


class BookieHttpAccess:
    """The rules of the module docstring with a process's settings: tokens of the cluster key, superusers
    ``super_user_roles`` (a bookie, or ``magnetar autorecovery`` serving the same operator routes)."""

    def __init__(self, settings: OperatorAccessSettings, clock: Clock | None = None) -> None:
        self._authentication = AuthenticationService(settings.authentication_settings(), clock)
        self._superusers = frozenset(settings.super_user_roles)
        self._metrics_need_superuser = settings.authenticate_metrics_endpoint

    def check_operator(self, request: HttpRequest) -> None:
        if not self._authentication.enabled:
            return
        try:
            role = self._authentication.authenticate(request.head).role
        except AuthenticationError as exc:
            raise HttpError(401, http_reason(exc), (WWW_AUTHENTICATE,)) from None
        if role not in self._superusers:
            raise HttpError(403, f"{SUPERUSER_REQUIRED} (role {role!r} is not in super_user_roles)")

    def check_metrics(self, request: HttpRequest) -> None:
        if self._metrics_need_superuser:
            self.check_operator(request)


def by_bookie_id(targets: Callable[[], Mapping[str, T]]) -> Select[T]:
    """Select the target whose bookie id is the route's ``{bookie_id}`` (404 naming the known ids)."""

    def select(request: HttpRequest) -> Sequence[T]:
        wanted = request.path_params["bookie_id"]
        known = targets()
        if wanted not in known:
            raise HttpError(404, f"no bookie {wanted!r} here (bookies: {', '.join(sorted(known))})")
        return [known[wanted]]

    return select


def all_of(targets: Callable[[], Sequence[T]]) -> Select[T]:
    """Select every target, whatever the request."""
    return lambda request: targets()


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def head_check(check: Callable[[HttpRequest], None]) -> HeadCheck:
    """``check`` (which raises to refuse) as the route's head check: it decides on the request head, before
    the body is read, so a refused caller costs no more than its head."""

    async def checked(head: RequestHead) -> None:
        check(HttpRequest(head))

    return checked


def bookie_router(bookie: Bookie, access: HttpAccess | None = None) -> Router:
    """The HTTP application of one bookie process (``magnetar bookie --http-port``)."""
    router = Router()
    add_bookie_routes(router, all_of(lambda: [bookie]), access or BookieHttpAccess(bookie.settings))
    return router


def add_bookie_routes(
    router: Router,
    select: Select[Bookie],
    access: HttpAccess,
    prefix: str = "",
    *,
    metrics_route: bool = True,
) -> None:
    """The bookie endpoints under ``prefix`` (``""`` or :data:`BOOKIE_PREFIX`) for the bookies ``select``
    picks; one bookie answers as itself, several as a list. ``metrics_route`` False leaves ``/metrics`` to
    the process (the standalone's is its broker's)."""

    async def metrics(request: HttpRequest) -> HttpResponse:
        bookies = select(request)
        if len(bookies) != 1:  # one registry per page: several bookies' would repeat the metric names
            raise HttpError(404, f"metrics are per bookie: {BOOKIE_PREFIX}/metrics")
        bookie = bookies[0]
        return HttpResponse(200, (("content-type", PROMETHEUS_CONTENT_TYPE),), bookie.render_metrics())

    async def is_ready(request: HttpRequest) -> HttpResponse:
        waiting = [_bookie_id(bookie) for bookie in select(request) if not bookie.is_ready]
        if not waiting:
            return json_response("OK")
        full = [_bookie_id(bookie) for bookie in select(request) if bookie.monitor.journal_full]
        if full:
            return error_response(
                503, f"bookie {', '.join(full)}: the journal volume is full (disk_usage_threshold): read-only"
            )
        return error_response(503, f"bookie {', '.join(waiting)} is not serving or not registered")

    async def state(request: HttpRequest) -> HttpResponse:
        bookies = select(request)
        if len(bookies) == 1:  # BookKeeper's document, exactly
            return json_response(_state(bookies[0]))
        return json_response([{"bookieId": _bookie_id(bookie), **_state(bookie)} for bookie in bookies])

    async def info(request: HttpRequest) -> HttpResponse:
        return _one_or_list([_info(bookie) for bookie in select(request)])

    async def heartbeat(request: HttpRequest) -> HttpResponse:
        select(request)  # 404 for a bookie this process does not serve
        return json_response("OK")

    if metrics_route:
        router.get(f"{prefix}/metrics", metrics, check=head_check(access.check_metrics))
    router.get(f"{prefix}/heartbeat", heartbeat)
    router.get(f"{prefix}/api/v1/bookie/is_ready", is_ready)
    router.get(f"{prefix}/api/v1/bookie/state", state, check=head_check(access.check_operator))
    router.get(f"{prefix}/api/v1/bookie/info", info, check=head_check(access.check_operator))


def _bookie_id(bookie: Bookie) -> str:
    return bookie.endpoint.bookie_id if bookie.endpoint is not None else str(bookie.settings.data_dir)


def _one_or_list(documents: list[dict[str, object]]) -> HttpResponse:
    return json_response(documents[0] if len(documents) == 1 else documents)


def _state(bookie: Bookie) -> dict[str, object]:
    return {
        "running": bookie.endpoint is not None and not bookie.stopped.is_set(),
        "readOnly": bookie.state.readonly,
        "shuttingDown": bookie.stopping,
        "availableForHighPriorityWrites": True,
    }


def _info(bookie: Bookie) -> dict[str, object]:
    usage = bookie.store.disk_usage()
    journal = bookie.store.journal_disk_usage()
    return {
        "journalTotalSpace": journal.total_bytes,
        "journalFreeSpace": journal.free_bytes,
        "bookieId": _bookie_id(bookie),
        "totalDiskSpace": usage.total_bytes,
        "totalSpace": usage.total_bytes,
        "freeSpace": usage.free_bytes,
        "diskUsage": round(usage.used_fraction, 6),
        "readOnly": bookie.state.readonly,
    }
