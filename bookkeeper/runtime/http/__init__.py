"""The HTTP/1.1 + WebSocket server shared by brokers (WebSocket API, admin REST, /metrics) and bookies.

h11 (and wsproto for the opening handshake) drive the protocols, :mod:`.ws_frames` the WebSocket frames;
trio sockets carry them. Build a :class:`Router`, then start the server with
``ports = await nursery.start(serve_http, router, settings)`` (or :class:`HttpServer` for a handle with
``shutdown()``). See :mod:`.connection` and :mod:`.websocket` for how requests and sessions are served.
"""

from magnetar.bookkeeper.runtime.http.router import Router, WebSocketHandler
from magnetar.bookkeeper.runtime.http.server import HttpServer, serve_http
from magnetar.bookkeeper.runtime.http.settings import HttpLimits, HttpSettings
from magnetar.bookkeeper.runtime.http.types import (
    HttpError,
    HttpHandler,
    HttpRequest,
    HttpResponse,
    QueryParams,
    RequestHead,
    error_response,
    json_bytes,
    json_response,
    text_response,
)
from magnetar.bookkeeper.runtime.http.websocket import (
    WebSocket,
    WebSocketClosed,
    WebSocketRequest,
)
from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NORMAL,
)

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "HttpError",
    "HttpHandler",
    "HttpLimits",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "HttpSettings",
    "QueryParams",
    "RequestHead",
    "Router",
    "WebSocket",
    "WebSocketClosed",
    "WebSocketHandler",
    "WebSocketRequest",
    "error_response",
    "json_bytes",
    "json_response",
    "serve_http",
    "text_response",
]
