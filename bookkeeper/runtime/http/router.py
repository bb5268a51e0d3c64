"""Routing: ``(method, pattern, handler)`` for HTTP and ``(pattern, handler)`` for WebSocket upgrades.

Patterns are paths with ``{name}`` placeholders matching one segment, or ``{name:path}`` matching one or more
segments (slashes included), e.g. Pulsar's consumer path
``/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic:path}/{subscription}``. Matching runs on the
percent-encoded path, so ``%2F`` inside a segment stays inside it; captured values are then percent-decoded
(UTF-8). A path that matches no pattern is 404; one that matches with another method is 405 with ``Allow``;
both reasons quote the path (:func:`shown_path`) and the 405's names the methods it takes.
``HEAD`` falls back to the ``GET`` handler (the body is not sent). All lookups are pure: the router does no
I/O, so it is unit-testable without sockets.

A route may carry a *head check* besides its handler: ``async def check(head: RequestHead) -> None`` that
raises :class:`HttpError` to refuse the request (authentication, authorization). The server runs it on the
request head, before it reads the body, so a refused request costs no more than its head.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from magnetar.bookkeeper.runtime.http.types import HttpError, HttpHandler, RequestHead

if TYPE_CHECKING:
    from magnetar.bookkeeper.runtime.http.websocket import WebSocketRequest

SHOWN_PATH_CHARS_MAX = 200


def shown_path(path: str) -> str:
    """A request path as a refusal quotes it: at most :data:`SHOWN_PATH_CHARS_MAX` characters, anything but
    printable ASCII escaped, so a reason never carries control or bidirectional characters."""
    clipped = path[:SHOWN_PATH_CHARS_MAX]
    text = "".join(ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode("ascii") for ch in clipped)
    return text + ("..." if len(path) > SHOWN_PATH_CHARS_MAX else "")


WebSocketHandler = Callable[["WebSocketRequest"], Awaitable[None]]
HeadCheck = Callable[[RequestHead], Awaitable[str | None]]
"""Decides on a request from its head (path parameters filled in); raises :class:`HttpError` to refuse.
May return the caller's role: its body then counts against that role's share of the body budget."""

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(path))?\}")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Turn ``/a/{x}/{rest:path}`` into an anchored regular expression with named groups."""
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    parts: list[str] = []
    pos = 0
    seen: set[str] = set()
    for match in _PLACEHOLDER.finditer(pattern):
        parts.append(re.escape(pattern[pos : match.start()]))
        name, kind = match.group(1), match.group(2)
        if name in seen:
            raise ValueError(f"duplicate placeholder {name!r} in {pattern!r}")
        seen.add(name)
        parts.append(f"(?P<{name}>.+)" if kind == "path" else f"(?P<{name}>[^/]+)")
        pos = match.end()
    tail = pattern[pos:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"malformed placeholder in {pattern!r}")
    parts.append(re.escape(tail))
    return re.compile("".join(parts))


def _decode_params(match: re.Match[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, raw in match.groupdict().items():
        try:
            params[name] = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise HttpError(400, f"path parameter {name!r} is not valid UTF-8") from None
    return params


@dataclass(frozen=True, slots=True)
class _Route:
    pattern: str
    regex: re.Pattern[str]
    handlers: dict[str, HttpHandler]
    checks: dict[str, HeadCheck]


@dataclass(frozen=True, slots=True)
class HttpMatch:
    """The route a request matched: its handler, head check (or None) and decoded path parameters."""

    handler: HttpHandler
    check: HeadCheck | None
    params: dict[str, str]


@dataclass(frozen=True, slots=True)
class _WsRoute:
    pattern: str
    regex: re.Pattern[str]
    handler: WebSocketHandler


class Router:
    """The application the server serves: a table of HTTP and WebSocket routes, first match wins."""

    def __init__(self) -> None:
        self._routes: list[_Route] = []
        self._by_pattern: dict[str, _Route] = {}
        self._ws_routes: list[_WsRoute] = []

    def route(
        self, method: str, pattern: str, handler: HttpHandler, *, check: HeadCheck | None = None
    ) -> None:
        """Route ``method pattern`` to ``handler``; ``check`` decides on the head before the body is read."""
        method = method.upper()
        if method not in METHODS:
            raise ValueError(f"unsupported method {method!r}")
        existing = self._by_pattern.get(pattern)
        if existing is None:
            existing = _Route(pattern, compile_pattern(pattern), {}, {})
            self._routes.append(existing)
            self._by_pattern[pattern] = existing
        if method in existing.handlers:
            raise ValueError(f"{method} {pattern} is already routed")
        existing.handlers[method] = handler
        if check is not None:
            existing.checks[method] = check

    def get(self, pattern: str, handler: HttpHandler, *, check: HeadCheck | None = None) -> None:
        self.route("GET", pattern, handler, check=check)

    def post(self, pattern: str, handler: HttpHandler, *, check: HeadCheck | None = None) -> None:
        self.route("POST", pattern, handler, check=check)

    def put(self, pattern: str, handler: HttpHandler, *, check: HeadCheck | None = None) -> None:
        self.route("PUT", pattern, handler, check=check)

    def delete(self, pattern: str, handler: HttpHandler, *, check: HeadCheck | None = None) -> None:
        self.route("DELETE", pattern, handler, check=check)

    def websocket(self, pattern: str, handler: WebSocketHandler) -> None:
        if any(r.pattern == pattern for r in self._ws_routes):
            raise ValueError(f"websocket {pattern} is already routed")
        self._ws_routes.append(_WsRoute(pattern, compile_pattern(pattern), handler))

    def match_http(self, method: str, path: str) -> tuple[HttpHandler, dict[str, str]]:
        """The handler and decoded path parameters; :class:`HttpError` 404/405 when there is none."""
        found = self.match(method, path)
        return found.handler, found.params

    def match(self, method: str, path: str) -> HttpMatch:
        """The route of ``method path``; :class:`HttpError` 404/405 when there is none."""
        allowed: set[str] = set()
        for route in self._routes:
            match = route.regex.fullmatch(path)
            if match is None:
                continue
            routed = method
            if routed not in route.handlers and method == "HEAD":
                routed = "GET"
            handler = route.handlers.get(routed)
            if handler is not None:
                return HttpMatch(handler, route.checks.get(routed), _decode_params(match))
            allowed.update(route.handlers)
        if allowed:
            if "GET" in allowed:
                allowed.add("HEAD")
            methods = ", ".join(sorted(allowed))
            raise HttpError(
                405,
                f"Method Not Allowed: {method} {shown_path(path)} - it takes {methods}",
                (("allow", methods),),
            )
        raise HttpError(404, f"Not Found: nothing is served at {shown_path(path)}")

    def match_websocket(self, path: str) -> tuple[WebSocketHandler, dict[str, str]] | None:
        """The WebSocket handler for ``path``, or None when no WebSocket route matches."""
        for route in self._ws_routes:
            match = route.regex.fullmatch(path)
            if match is not None:
                return route.handler, _decode_params(match)
        return None
