"""The HTTP/1.1 + WebSocket server shared by brokers (WebSocket API, admin REST, /metrics) and bookies.

h11 (and wsproto for the opening handshake) drive the protocols, :mod:`.ws_frames` the WebSocket frames;
trio sockets carry them. Build a :class:`Router`, then start the server with
``ports = await nursery.start(serve_http, router, settings)`` (or :class:`HttpServer` for a handle with
``shutdown()``). See :mod:`.connection` and :mod:`.websocket` for how requests and sessions are served.
"""

from magnetar.bookkeeper.runtime.http.router import HeadCheck, Router, WebSocketHandler
from magnetar.bookkeeper.runtime.http.server import HttpServer, serve_http
from magnetar.bookkeeper.runtime.http.settings import HttpLimits, HttpListenSettings, HttpSettings
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
from magnetar.bookkeeper.runtime.http.ws_client import (
    WsClient,
    WsClosed,
    WsRejected,
    connection_loss,
    open_ws_client,
)
from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
)

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_POLICY_VIOLATION",
    "HeadCheck",
    "HttpError",
    "HttpHandler",
    "HttpLimits",
    "HttpListenSettings",
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
    "WsClient",
    "WsClosed",
    "WsRejected",
    "connection_loss",
    "error_response",
    "json_bytes",
    "json_response",
    "open_ws_client",
    "serve_http",
    "text_response",
]
