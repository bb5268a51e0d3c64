"""The admin REST framework: declared endpoints, validated inputs, Pulsar's error bodies, one route table.

Theory of operation. Every admin route is an :class:`Endpoint` - method, path pattern, handler and the
*types* of its inputs and outputs: a pydantic query model, a body type and a response type. :func:`register`
turns each endpoint into a plain :class:`~magnetar.bookkeeper.runtime.http.Router` handler that validates
before the handler runs, and :mod:`.openapi` renders the same declarations as the OpenAPI document, so the
document cannot drift from what is served.

Validation order, and the status each failure gets (Pulsar's JAX-RS conventions, docs/upstream.md,
Pulsar §2.1):

1. query parameters, read as JAX-RS reads them: a parameter the endpoint does not declare is ignored (Pulsar's
   clients send some that only newer brokers know); a boolean is true when its value is ``true`` in any case
   and false for anything else (Java's ``Boolean.valueOf``, so ``includeSystemTopic=<uuid>`` is false, not an
   error); a number is read as Java's ``Long.parseLong`` reads it (ASCII sign and digits, within 64 bits:
   :mod:`magnetar.broker.wire.strict_input`), then checked against the parameter's range; any other declared
   parameter that does not parse is 400 ``Invalid query parameter 'x': ...`` naming the value (Pulsar
   answers 404 there; Magnetar names the parameter);
2. body: not JSON -> 400; wrong shape or type -> 400 (Jackson's mapping errors are 400s in Pulsar), a
   number in a string read as in 1. (:data:`~.models.Int32`); a missing required body -> 400; the size
   bound is the HTTP server's ``http_body_bytes_max`` (413);
3. names in the path (tenant, namespace, topic) -> 412 "... name is not valid", checked by the handler;
   numbers in the path (``skip/{count}``, ``resetcursor/{timestamp}`` ...) are read by
   :func:`number_param` as in 1. -> 400 naming the parameter and the value;
0. before all of these, :func:`~.access.check_access`: 401 without a valid token, 429 beyond the admin
   rate limits, 403 when the role may not call the route (:mod:`.access` has the table). It runs as the
   route's head check, on the request head before the body is read: a refused request costs no more than
   its head;
4. the operation itself: typed errors carrying their status (``PolicyError.status``: 404/409/412,
   :class:`AdminError` for the rest) become ``{"reason": ...}``; a metadata store that cannot be reached is
   503. Anything else is a bug: the HTTP server answers a generic 500 and logs the trace, never sending it.

Handlers validate everything before they write, so a refused request changes nothing ("never a change
half-applied"); writes are single compare-and-set operations on the metadata store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from magnetar.admin.rest.access import check_access, principal_of, rule_for
from magnetar.bookkeeper.metadata import InvalidPathError, MetadataStoreError, StoreUnavailableError
from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.bookkeeper.runtime.http import (
    HttpError,
    HttpRequest,
    HttpResponse,
    RequestHead,
    Router,
    json_response,
    text_response,
)
from magnetar.broker.core import NotOwnerError, ServiceError
from magnetar.broker.policies import PolicyError
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.wire import (
    INT64_MAX,
    INT64_MIN,
    InvalidTopicNameError,
    NumberFormatError,
    parse_long,
    shown,
)

if TYPE_CHECKING:
    from magnetar.admin.rest.context import AdminContext

log = logging.getLogger(__name__)

REASON_CHARS_MAX = 300
"""Longest part of a request (a name, a path) echoed in an error's reason."""
JSON_BODY_DEPTH_MAX = 64
"""Deepest nesting accepted in a JSON body (a bound on validation work; no admin body nests beyond 4)."""


class AdminError(Exception):
    """An admin operation refused with a Pulsar status and reason (``RestException``)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class QueryModel(BaseModel):
    """Base of every endpoint's query parameters (see :func:`parse_query` for how they are read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoQuery(QueryModel):
    pass


class AuthoritativeQuery(QueryModel):
    """Topic and namespace operations accept Pulsar's ``authoritative`` flag (set on a redirect's 2nd hop)."""

    authoritative: bool = False


Q = TypeVar("Q", bound=QueryModel)
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Call:
    """One validated admin request as a handler sees it."""

    request: HttpRequest
    context: AdminContext
    query: QueryModel
    body: Any
    principal: Principal | None = None
    """Who called (None when security is off or the route is open): for checks a route makes itself."""

    def param(self, name: str) -> str:
        return self.request.path_params[name]

    def query_as(self, model: type[Q]) -> Q:
        assert isinstance(self.query, model), f"{type(self.query).__name__} is not {model.__name__}"
        return self.query


Handler = Callable[[Call], Awaitable[HttpResponse]]


NUMBER_PATH_PARAMETERS: Mapping[str, tuple[int, int]] = {
    "count": (INT64_MIN, INT64_MAX),
    "seconds": (INT64_MIN, INT64_MAX),
    "timestamp": (INT64_MIN, INT64_MAX),
    "n": (INT64_MIN, INT64_MAX),
    "ledger": (-1, INT64_MAX),
    "entry": (-1, INT64_MAX),
}
"""The path parameters that are numbers (Java ``long``s) and their ranges: read by :func:`number_param`,
declared as integers in the OpenAPI document. (A negative ``count``, ``seconds`` or ``n`` is a ``long``, which
the handler refuses with Pulsar's 412.)"""


def number_param(call: Call, name: str) -> int:
    """The number in path parameter ``name``, read as Java's ``Long.parseLong`` (see the module docstring)
    within its range (:data:`NUMBER_PATH_PARAMETERS`); 400 naming the parameter and the value otherwise."""
    low, high = NUMBER_PATH_PARAMETERS[name]
    try:
        return parse_long(name, call.param(name), low=low, high=high)
    except NumberFormatError as exc:
        raise AdminError(400, str(exc)) from None


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    query: type[QueryModel] = NoQuery
    body: Any = None
    """A type for :class:`pydantic.TypeAdapter` (a model, ``int``, ``str``, a union ...), or None."""
    body_required: bool = False
    response: Any = None
    """The JSON type of a 200 answer, or None when the endpoint answers 204 (or plain text)."""
    status: int = 204
    errors: Mapping[int, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def body_adapter(self) -> TypeAdapter[Any] | None:
        return None if self.body is None else _adapter(self.body)


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(tp: Any) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(tp)
    if adapter is None:
        adapter = _ADAPTERS[tp] = TypeAdapter(tp)
    return adapter


# -- responses -----------------------------------------------------------------------------------------


def no_content() -> HttpResponse:
    """JAX-RS ``void`` methods answer 204 (docs/upstream.md, Pulsar §2.1)."""
    return HttpResponse(204)


def ok(data: Any) -> HttpResponse:
    """200 with ``data`` as JSON; pydantic models are dumped by their (Pulsar) field names."""
    if isinstance(data, BaseModel):
        return HttpResponse(200, (("content-type", "application/json"),), data.model_dump_json().encode())
    if isinstance(data, list) and data and isinstance(data[0], BaseModel):
        items = [item.model_dump(mode="json") for item in data]
        return json_response(items)
    return json_response(data)


def ok_or_empty(data: Any) -> HttpResponse:
    """A JAX-RS method returning ``null`` answers 204: how Pulsar reports an unset policy."""
    return no_content() if data is None else ok(data)


def plain(text: str) -> HttpResponse:
    return text_response(text)


# -- validation ----------------------------------------------------------------------------------------


def integer_query_names(model: type[QueryModel]) -> frozenset[str]:
    """The query parameters of ``model`` read as Java ``long`` numbers (by their names on the wire)."""
    names = _INTEGER_NAMES.get(model)
    if names is None:
        names = _INTEGER_NAMES[model] = frozenset(
            info.alias or name for name, info in model.model_fields.items() if _is_integer(info.annotation)
        )
    return names


def _is_integer(annotation: Any) -> bool:
    """``int``, ``Int32`` (``Annotated[int, ...]``), or either ``| None``."""
    if annotation is int:
        return True
    if get_origin(annotation) is Annotated:
        return _is_integer(get_args(annotation)[0])
    args = get_args(annotation)
    return bool(args) and type(None) in args and all(a is type(None) or _is_integer(a) for a in args)


_INTEGER_NAMES: dict[type[QueryModel], frozenset[str]] = {}


def boolean_query_names(model: type[QueryModel]) -> frozenset[str]:
    """The query parameters of ``model`` read as Java booleans (by their names on the wire)."""
    names = _BOOLEAN_NAMES.get(model)
    if names is None:
        names = _BOOLEAN_NAMES[model] = frozenset(
            info.alias or name
            for name, info in model.model_fields.items()
            if info.annotation is bool or info.annotation == bool | None
        )
    return names


_BOOLEAN_NAMES: dict[type[QueryModel], frozenset[str]] = {}


def parse_query(endpoint: Endpoint, request: HttpRequest) -> QueryModel:
    """The declared parameters (first value of each name, as Pulsar's handlers read them); unknown names
    are ignored and booleans read as Java's ``Boolean.valueOf`` (the module docstring has why)."""
    model = endpoint.query
    known = {info.alias or name for name, info in model.model_fields.items()}
    booleans = boolean_query_names(model)
    integers = integer_query_names(model)
    raw: dict[str, object] = {}
    for name, value in request.query.items():
        if name in booleans:
            raw[name] = value.lower() == "true"
        elif name in integers:
            try:
                raw[name] = parse_long(name, value)
            except NumberFormatError as exc:
                raise AdminError(400, f"Invalid query parameter '{name}': {exc}") from None
        elif name in known:
            raw[name] = value
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "query"
        raise AdminError(400, f"Invalid query parameter '{where}': {_what(first)}") from None


def _depth(value: Any, limit: int) -> int:
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def parse_body(endpoint: Endpoint, request: HttpRequest) -> Any:
    adapter = endpoint.body_adapter()
    if adapter is None:
        return None
    if not request.body.strip():
        if endpoint.body_required:
            raise AdminError(400, "Request body is required")
        return None
    try:
        data = json.loads(request.body)
    except RecursionError:
        raise AdminError(400, "Invalid JSON body: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdminError(400, f"Invalid JSON body: {exc}") from None
    if _depth(data, JSON_BODY_DEPTH_MAX) > JSON_BODY_DEPTH_MAX:
        raise AdminError(400, "Invalid JSON body: nested too deeply")
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise AdminError(400, f"Invalid request body: {describe(exc)}") from None


def describe(exc: ValidationError) -> str:
    """The first error: where, what, and the value refused (:func:`_what`)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {_what(first)}" if where else _what(first)


def _what(error: Mapping[str, Any]) -> str:
    """An error's message with the value refused, unless the message shows it already."""
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if error["type"] != "value_error" and isinstance(value, int | float | str):
        got = f'"{shown(value)}"' if isinstance(value, str) else shown(json.dumps(value))
        message = f"{message} (got {got})"
    return message


# -- error mapping -------------------------------------------------------------------------------------


def error_for(exc: Exception) -> HttpError | None:
    """The ``{"reason"}`` answer for a typed failure, or None for a bug (the server answers 500)."""
    if isinstance(exc, AdminError):
        return HttpError(exc.status, exc.reason)
    if isinstance(exc, PolicyError):
        return HttpError(exc.status, str(exc))
    if isinstance(exc, InvalidTopicNameError):
        return HttpError(412, str(exc))
    if isinstance(exc, ServiceError) and not isinstance(exc, NotOwnerError):
        return HttpError(http_status(exc), str(exc))
    if isinstance(exc, StoreUnavailableError):
        return HttpError(503, "Metadata store unavailable")
    if isinstance(exc, InvalidPathError):  # a name the checks let through makes a path the store refuses
        return HttpError(412, f"Name is not valid: {str(exc)[:REASON_CHARS_MAX]}")
    if isinstance(exc, MetadataStoreError):
        return HttpError(500, f"Metadata store error: {type(exc).__name__}")
    return None


def make_check(endpoint: Endpoint, context: AdminContext) -> Callable[[RequestHead], Awaitable[str | None]]:
    """The route's head check: authentication, rate limits and the route's rule, decided from the head. It
    names the caller's role, whose share of the body budget the request's body then counts against."""
    access = rule_for(endpoint.method, endpoint.path)

    async def check(head: RequestHead) -> str | None:
        request = HttpRequest(head)
        try:
            principal = await check_access(access, request, context.security)
            return None if principal is None else principal.role
        except HttpError:
            raise
        except Exception as exc:
            mapped = error_for(exc)
            if mapped is None:
                raise
            raise mapped from None

    return check


def make_handler(
    endpoint: Endpoint, context: AdminContext
) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    """The route's handler (its head check, :func:`make_check`, has passed when it runs)."""
    access = rule_for(endpoint.method, endpoint.path)

    async def handle(request: HttpRequest) -> HttpResponse:
        try:
            principal = principal_of(access, request, context.security)
            query = parse_query(endpoint, request)
            body = parse_body(endpoint, request)
            return await endpoint.handler(Call(request, context, query, body, principal))
        except HttpError:
            raise
        except Exception as exc:
            mapped = error_for(exc)
            if mapped is None:
                raise
            if mapped.status >= 500:
                log.warning("admin %s %s failed: %r", request.method, request.path, exc)
            raise mapped from None

    return handle


def register(router: Router, endpoints: list[Endpoint], context: AdminContext) -> list[Endpoint]:
    """Route every endpoint; one the router already serves (the broker's own ``/admin/v2/brokers/health``)
    is left to it. Returns the endpoints routed here."""
    routed = []
    for endpoint in endpoints:
        try:
            router.route(
                endpoint.method,
                endpoint.path,
                make_handler(endpoint, context),
                check=make_check(endpoint, context),
            )
        except ValueError as exc:
            if "already routed" not in str(exc):
                raise
            log.info("admin: %s %s is served by the broker itself", endpoint.method, endpoint.path)
            continue
        routed.append(endpoint)
    return routed
