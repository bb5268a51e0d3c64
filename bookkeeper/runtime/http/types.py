"""Requests, responses and errors of the HTTP server, as handlers see them.

A handler is ``async def handler(request: HttpRequest) -> HttpResponse``. The server reads the whole request
body (bounded by ``http_body_bytes_max``) before calling it. A response body is either bytes (sent with a
Content-Length) or an async iterable of byte chunks (sent with chunked transfer encoding). Errors follow
Pulsar's REST convention (``RestException`` -> ``ErrorData``): a JSON body ``{"reason": "..."}``; a handler
raises :class:`HttpError` to produce one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

QUERY_FIELDS_MAX = 1000
"""Most ``name=value`` pairs accepted in one query string (a bound on parsing work)."""

JSON_CONTENT_TYPE = "application/json"


class HttpError(Exception):
    """Raised by a handler (or the server) to answer ``status`` with ``{"reason": reason}``."""

    def __init__(self, status: int, reason: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.headers = tuple(headers)


class QueryParams(Mapping[str, str]):
    """Query parameters in arrival order. As a mapping it yields the *first* value of each name (what Pulsar's
    handlers read: ``request.getParameterMap()`` -> ``values[0]``); :meth:`get_all` gives every value."""

    __slots__ = ("_first", "_pairs")

    def __init__(self, pairs: Sequence[tuple[str, str]] = ()) -> None:
        self._pairs = tuple(pairs)
        first: dict[str, str] = {}
        for name, value in self._pairs:
            first.setdefault(name, value)
        self._first = first

    @classmethod
    def parse(cls, query: str) -> QueryParams:
        """Parse ``a=1&b=%20x``; raises :class:`HttpError` 400 on undecodable or too many fields."""
        if not query:
            return cls()
        try:
            pairs = parse_qsl(query, keep_blank_values=True, errors="strict", max_num_fields=QUERY_FIELDS_MAX)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HttpError(400, f"invalid query string: {exc}") from None
        return cls(pairs)

    def __getitem__(self, name: str) -> str:
        return self._first[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def get_all(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return self._pairs

    def __repr__(self) -> str:
        return f"QueryParams({list(self._pairs)!r})"


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What is known of a request before its body: shared by HTTP and WebSocket requests."""

    method: str
    target: str
    """The request target exactly as received (percent-encoded path plus ``?query``)."""
    path: str
    """The percent-encoded path, without the query. Routing matches on it, so an encoded ``%2F`` inside a
    segment never splits the segment."""
    query: QueryParams
    headers: tuple[tuple[str, str], ...]
    """Header names lower-cased; values decoded as latin-1 (HTTP's historic charset)."""
    path_params: Mapping[str, str]
    """Values captured by the route pattern, percent-decoded (UTF-8)."""
    client: tuple[str, int] | None
    http_version: str = "1.1"
    tls: bool = False
    """The request arrived over TLS (``https`` / ``wss``)."""

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (case-insensitive)."""
        wanted = name.lower()
        for key, value in self.headers:
            if key == wanted:
                return value
        return default

    def header_all(self, name: str) -> list[str]:
        wanted = name.lower()
        return [value for key, value in self.headers if key == wanted]


@dataclass(frozen=True, slots=True)
class HttpRequest:
    head: RequestHead
    body: bytes = b""

    @property
    def method(self) -> str:
        return self.head.method

    @property
    def path(self) -> str:
        return self.head.path

    @property
    def query(self) -> QueryParams:
        return self.head.query

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return self.head.headers

    @property
    def path_params(self) -> Mapping[str, str]:
        return self.head.path_params

    @property
    def client(self) -> tuple[str, int] | None:
        return self.head.client

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.head.header(name, default)

    def json(self) -> Any:
        """The body parsed as JSON; :class:`HttpError` 400 if it is not JSON."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"invalid JSON body: {exc}") from None


Body = bytes | AsyncIterable[bytes]


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int = 200
    headers: Sequence[tuple[str, str]] = field(default=())
    body: Body = b""
    """Bytes (sent with Content-Length) or an async iterable of chunks (sent chunked)."""

    def __post_init__(self) -> None:
        if not (200 <= self.status <= 599) or self.status == 101:
            raise ValueError(f"a final response status is 200..599, got {self.status}")


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def json_bytes(data: Any) -> bytes:
    """Compact JSON (no spaces), UTF-8, as Jackson writes it."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(data: Any, status: int = 200, headers: Sequence[tuple[str, str]] = ()) -> HttpResponse:
    return HttpResponse(status, (("content-type", JSON_CONTENT_TYPE), *headers), json_bytes(data))


def error_response(status: int, reason: str, headers: Sequence[tuple[str, str]] = ()) -> HttpResponse:
    """Pulsar's error body: ``{"reason": "..."}`` (``ErrorData``)."""
    return json_response({"reason": reason}, status, headers)


def text_response(
    text: str, status: int = 200, content_type: str = "text/plain; charset=utf-8"
) -> HttpResponse:
    return HttpResponse(status, (("content-type", content_type),), text.encode())


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
