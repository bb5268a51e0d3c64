"""One HTTP/1.1 connection: h11 drives the protocol, this module drives the socket.

Theory of operation. Requests on a connection are served strictly one after another, so pipelined requests
are answered in order (h11 keeps the bytes of the next request buffered until ``start_next_cycle``). For each
request:

1. wait for its first bytes at most ``http_idle_timeout_ms`` (a keep-alive connection with nothing to do is
   closed); from then on the whole request must arrive within ``http_request_timeout_ms`` (else 408);
2. route it. A WebSocket upgrade to a WebSocket route is handed to :mod:`.websocket` (an upgrade request
   announcing a body is refused unread); everything else is an HTTP request;
3. decide on the head: an unknown route (404/405), a body over ``http_body_bytes_max`` (413, from
   Content-Length) and the route's head check (authentication and authorization, see :mod:`.router`) are
   answered before a byte of the body is read. The connection is then closed after the answer, since the
   unread body is still on its way (it is read and dropped for at most ``LINGER_S`` first, so the client
   sees the answer rather than a reset);
4. take the body's bytes from the server's :class:`~.body_budget.BodyBudget`
   (``http_bodies_in_flight_bytes_max`` across connections; waiting for it until the request's deadline,
   then 503), read the body completely (``Expect: 100-continue`` is answered only now) and give the bytes
   back once the handler answered;
5. call the handler. :class:`HttpError` becomes ``{"reason": ...}`` with its status; any other exception
   becomes a 500 with a generic body while the traceback goes to the log — never to the client;
6. write the response in one ``send_all`` when its body is bytes, or chunk by chunk when it streams
   (:mod:`.response_writer`).

Malformed input (h11 ``RemoteProtocolError``) is answered with h11's status hint (400, 431 for an oversized
head) and the connection is closed; nothing a peer sends can affect another connection. A request target
holding a byte RFC 3986 does not allow there (a space, ``#``, a control byte, non-ASCII...) is answered 400
before routing, with a reason naming the character and its offset (:mod:`.request_target`), never h11's
quote of the raw line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NoReturn

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection
from wsproto.events import Request as WsRequest
from wsproto.utilities import RemoteProtocolError as WsRemoteProtocolError

from magnetar.bookkeeper.runtime.auth.tls import TlsHandshakeError, handshake
from magnetar.bookkeeper.runtime.http.body_budget import BodyBudget
from magnetar.bookkeeper.runtime.http.request_target import RequestLine, h11_reason, target_error
from magnetar.bookkeeper.runtime.http.response_writer import SERVER_HEADER, ResponseWriter
from magnetar.bookkeeper.runtime.http.response_writer import CloseConnection as _CloseConnection
from magnetar.bookkeeper.runtime.http.router import HttpMatch, Router, WebSocketHandler, shown_path
from magnetar.bookkeeper.runtime.http.settings import HttpSettings
from magnetar.bookkeeper.runtime.http.types import (
    HttpError,
    HttpHandler,
    HttpRequest,
    HttpResponse,
    QueryParams,
    RequestHead,
    error_response,
)
from magnetar.bookkeeper.runtime.http.websocket import RECEIVE_CHUNK_BYTES, WebSocket, WebSocketRequest
from magnetar.bookkeeper.runtime.http.ws_budget import ReceiveBudget
from magnetar.bookkeeper.runtime.http.ws_frames import CLOSE_INTERNAL_ERROR, CLOSE_NORMAL

log = logging.getLogger(__name__)

INTERNAL_ERROR_REASON = "internal error"
LINGER_S = 1.0
"""After answering a request whose body stays unread, how long the rest of it is read and dropped before the
connection is closed (closing with unread bytes would reset it, and the client might miss the answer)."""


class _BudgetShort(Exception):
    """Internal: a chunk of ``size`` bytes of a chunked body did not fit the server's body budget."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class HttpConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        router: Router,
        settings: HttpSettings,
        *,
        client: tuple[str, int] | None = None,
        body_budget: BodyBudget | None = None,
        ws_budget: ReceiveBudget | None = None,
    ) -> None:
        self._stream = stream
        self._router = router
        self._settings = settings
        self._budget = body_budget or BodyBudget(
            settings.http_bodies_in_flight_bytes_max, settings.body_share_bytes()
        )
        """Shared by the server's connections (a connection made alone gets its own)."""
        self._ws_budget = ws_budget
        """Received WebSocket bytes, shared by the server's sessions (None: the session gets its own)."""
        self._body_taken = 0
        """Bytes of the current request's body taken from the budget."""
        self._body_caller = ""
        """Whose share of the budget the current body counts against (``role:`` or ``address:``)."""
        self._body_unread = False
        """A body was left unread: drop the rest of it before closing (see :data:`LINGER_S`)."""
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.http_header_bytes_max)
        self._writer = ResponseWriter(stream, self._h11, settings.http_send_timeout_ms / 1000)
        self._line = RequestLine(settings.http_header_bytes_max)
        """The current request's line as received, for the reason of a refusal (:mod:`.request_target`)."""
        self._client = client
        """The peer's address (read from the TCP socket before any TLS wrapping)."""
        self._idle_scope: trio.CancelScope | None = None
        self._shutting_down = False
        self.websocket: WebSocket | None = None
        self._ws_nursery: trio.Nursery | None = None
        self._ws_conn: WSConnection | None = None
        self._ws_head: RequestHead | None = None

    # --- lifecycle --------------------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Graceful shutdown: an idle keep-alive connection closes now, an in-flight request finishes and gets
        ``Connection: close``, a WebSocket is closed with 1001."""
        self._shutting_down = True
        if self._idle_scope is not None:
            self._idle_scope.cancel()
        if self.websocket is not None:
            self.websocket.server_shutdown()

    async def run(self) -> None:
        try:
            if isinstance(self._stream, trio.SSLStream):
                await handshake(self._stream, self._settings.http_tls_handshake_timeout_ms / 1000)
            while await self._serve_one():
                pass
        except _CloseConnection:
            pass
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.TooSlowError,
            TlsHandshakeError,
        ) as exc:
            log.debug("connection %s dropped: %r", self._client, exc)
        except Exception:
            # A bug, or a handler breaking the contract: this connection ends, the server keeps serving.
            log.exception("connection %s failed", self._client)
        finally:
            self._give_back_body()
            if self._body_unread:
                await self._linger()
            await trio.aclose_forcefully(self._stream)

    async def _linger(self) -> None:
        """Signal the end of our answer and read (dropping it) what the client still sends, briefly."""
        # Shielded from the connection's cancellation (the answer deserves its chance), bounded by its own
        # deadline - a shield inside a move_on_after would block that deadline too.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + LINGER_S):
            try:
                if isinstance(self._stream, trio.SocketStream):
                    await self._stream.send_eof()
                while await self._stream.receive_some(RECEIVE_CHUNK_BYTES):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    # --- reading ----------------------------------------------------------------------------------------

    async def _receive_into_h11(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            data = bytes(await self._stream.receive_some(RECEIVE_CHUNK_BYTES))
            self._line.feed(data)
            self._h11.receive_data(data)
            return
        await self._send_error_and_close(408, "Request Timeout")

    async def _next_event(self, deadline: float) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                reason = self._line.reason(str(exc)) if status == 400 else h11_reason(str(exc))
                await self._send_error_and_close(status, reason)
            if event is h11.NEED_DATA:
                await self._receive_into_h11(deadline)
                continue
            return event

    async def _wait_for_request(self) -> bool:
        """Wait (idle timeout, cancellable by shutdown) until the next request has bytes buffered."""
        pending = self._h11.trailing_data[0]
        self._line.restart(pending)
        if pending or self._h11.their_state is not h11.IDLE:
            return True
        self._idle_scope = trio.CancelScope(
            deadline=trio.current_time() + self._settings.http_idle_timeout_ms / 1000
        )
        try:
            with self._idle_scope:
                if self._shutting_down:
                    return False
                data = bytes(await self._stream.receive_some(RECEIVE_CHUNK_BYTES))
                self._line.feed(data)
                self._h11.receive_data(data)
                return True
            return False
        finally:
            self._idle_scope = None

    # --- one request ------------------------------------------------------------------------------------

    async def _serve_one(self) -> bool:
        """Serve one request; False when the connection should close."""
        if not await self._wait_for_request():
            return False
        deadline = trio.current_time() + self._settings.http_request_timeout_ms / 1000
        event = await self._next_event(deadline)
        if isinstance(event, h11.ConnectionClosed):
            return False
        if not isinstance(event, h11.Request):
            raise _CloseConnection
        if event.http_version not in (b"1.0", b"1.1"):
            await self._send_error_and_close(505, "HTTP Version Not Supported")
        if _head_bytes(event) > self._settings.http_header_bytes_max:
            # h11 bounds only an *incomplete* head; one that arrived whole in a single read is measured here.
            await self._send_error_and_close(431, "Request Header Fields Too Large")
        refused = target_error(event.target)
        if refused is not None:  # before routing: plain requests and WebSocket upgrades alike
            self._body_unread = any(
                name in (b"content-length", b"transfer-encoding") for name, _ in event.headers
            )
            await self._send_error_and_close(400, refused)
        head, query_error = self._make_head(event)
        if query_error is None and self._is_websocket_upgrade(head):
            try:
                ws_route = self._router.match_websocket(head.path)
            except HttpError as exc:  # a path parameter that is not UTF-8: answered below, like any request
                ws_route, query_error = None, exc
            if ws_route is not None:
                return await self._serve_websocket(event, head, ws_route, deadline)
        response = await self._serve_http(head, query_error, deadline)
        await self._send_response(head.method, response)
        return self._finish_cycle()

    def _make_head(self, event: h11.Request) -> tuple[RequestHead, HttpError | None]:
        target = event.target.decode("ascii", errors="replace")
        path, _, query = target.partition("?")
        headers = tuple((name.decode("ascii"), value.decode("latin-1")) for name, value in event.headers)
        query_error: HttpError | None = None
        try:
            params = QueryParams.parse(query)
        except HttpError as exc:
            params, query_error = QueryParams(), exc
        head = RequestHead(
            method=event.method.decode("ascii"),
            target=target,
            path=path,
            query=params,
            headers=headers,
            path_params={},
            client=self._client,
            http_version=event.http_version.decode("ascii"),
            tls=isinstance(self._stream, trio.SSLStream),
        )
        return head, query_error

    @staticmethod
    def _is_websocket_upgrade(head: RequestHead) -> bool:
        upgrade = head.header("upgrade")
        return head.method == "GET" and upgrade is not None and upgrade.strip().lower() == "websocket"

    async def _serve_http(
        self, head: RequestHead, query_error: HttpError | None, deadline: float
    ) -> HttpResponse:
        found, error = self._route(head, query_error)
        limit = self._settings.http_body_bytes_max
        length = _content_length(head)
        if length is not None and length > limit:
            return self._refuse_unread(HttpError(413, f"request body exceeds {limit} bytes"))
        self._body_caller = f"address:{self._client[0] if self._client else '?'}"
        if found is not None and found.check is not None:
            error, role = await self._check_head(found, head)
            if role is not None:
                self._body_caller = f"role:{role}"
        if error is not None or found is None:
            error = error or HttpError(500, INTERNAL_ERROR_REASON)
            if length == 0 or (length is None and head.header("transfer-encoding") is None):
                if await self._read_body(deadline) is None:  # no body: read the request's end, keep alive
                    raise _CloseConnection
                return error_response(error.status, error.reason, error.headers)
            return self._refuse_unread(error)
        try:
            if length and not await self._budget.take(length, deadline, self._body_caller):
                return self._refuse_unread(self._budget_short(length))
            self._body_taken = length or 0
            body = await self._read_body(deadline, metered=length is None)
            if body is None:
                self._shutting_down = True
                return error_response(413, f"request body exceeds {limit} bytes")
            return await self._call_handler(
                found.handler, HttpRequest(_with_params(head, found.params), body)
            )
        except _BudgetShort as short:
            return self._refuse_unread(self._budget_short(short.size))
        finally:
            self._give_back_body()

    def _route(
        self, head: RequestHead, query_error: HttpError | None
    ) -> tuple[HttpMatch | None, HttpError | None]:
        if query_error is not None:
            return None, query_error
        try:
            return self._router.match(head.method, head.path), None
        except HttpError as exc:
            if exc.status == 404 and self._router.match_websocket(head.path) is not None:
                return None, HttpError(
                    426,
                    f"Upgrade Required: {shown_path(head.path)} is a WebSocket endpoint; connect with a "
                    "WebSocket client (a GET with 'Upgrade: websocket', e.g. ws://host:port/ws/v2/...)",
                    (("upgrade", "websocket"),),
                )
            return None, exc

    @staticmethod
    async def _check_head(found: HttpMatch, head: RequestHead) -> tuple[HttpError | None, str | None]:
        """Run the route's head check: the refusal it raised (or None to go on), and the role it named."""
        assert found.check is not None
        try:
            role = await found.check(_with_params(head, found.params))
        except HttpError as exc:
            return exc, None
        except Exception:
            log.exception("head check of %s %s failed", head.method, head.path)
            return HttpError(500, INTERNAL_ERROR_REASON), None
        return None, role

    def _refuse_unread(self, error: HttpError) -> HttpResponse:
        """Answer ``error`` without reading the body, then close (after dropping the body briefly)."""
        self._shutting_down = True
        self._body_unread = True
        return error_response(error.status, error.reason, error.headers)

    def _budget_short(self, size: int) -> HttpError:
        """The 503 for a body of which ``size`` bytes did not fit: the caller's share, or the budget."""
        settings = self._settings
        budget_full = self._budget.taken + size > self._budget.bytes_max
        if not budget_full and self._budget.held_by(self._body_caller) + size > self._budget.share_max:
            share = settings.http_bodies_in_flight_bytes_per_role_max
            caller = self._body_caller.partition(":")[2]
            return HttpError(
                503,
                f"request bodies in flight of {caller} exceed "
                f"http_bodies_in_flight_bytes_per_role_max={share}",
            )
        budget = settings.http_bodies_in_flight_bytes_max
        return HttpError(503, f"request bodies in flight exceed http_bodies_in_flight_bytes_max={budget}")

    def _give_back_body(self) -> None:
        self._budget.give_back(self._body_taken, self._body_caller)
        self._body_taken = 0

    async def _read_body(self, deadline: float, *, metered: bool = False) -> bytes | None:
        """The whole request body, or None when it exceeds ``http_body_bytes_max``. ``metered``: take each
        chunk from the body budget as it arrives (:class:`_BudgetShort` when it does not fit)."""
        if self._h11.they_are_waiting_for_100_continue:
            await self._send(self._h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        size = 0
        limit = self._settings.http_body_bytes_max
        while True:
            event = await self._next_event(deadline)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    return None
                if metered:
                    if not self._budget.try_take(len(event.data), self._body_caller):
                        raise _BudgetShort(len(event.data))
                    self._body_taken += len(event.data)
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:
                raise _CloseConnection

    @staticmethod
    async def _call_handler(handler: HttpHandler, request: HttpRequest) -> HttpResponse:
        try:
            response = await handler(request)
        except HttpError as exc:
            return error_response(exc.status, exc.reason, exc.headers)
        except Exception:
            log.exception("handler for %s %s failed", request.method, request.path)
            return error_response(500, INTERNAL_ERROR_REASON)
        return response

    # --- writing (:class:`~.response_writer.ResponseWriter`) ---------------------------------------------

    async def _send(self, data: bytes) -> None:
        await self._writer.send(data)

    async def _send_response(self, method: str, response: HttpResponse) -> None:
        await self._writer.send_response(method, response, closing=self._shutting_down)

    async def _send_error_and_close(self, status: int, reason: str) -> NoReturn:
        """Answer a request we cannot serve (malformed, timed out) if h11 still allows it, then close."""
        if self._writer.can_answer():
            self._shutting_down = True
            await self._writer.send_error(status, reason)
        raise _CloseConnection

    def _finish_cycle(self) -> bool:
        if self._shutting_down:
            return False
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            return True
        return False

    # --- WebSocket upgrade ------------------------------------------------------------------------------

    async def _serve_websocket(
        self,
        event: h11.Request,
        head: RequestHead,
        route: tuple[WebSocketHandler, dict[str, str]],
        deadline: float,
    ) -> bool:
        handler, params = route
        head = _with_params(head, params)
        if _content_length(head) or head.header("transfer-encoding") is not None:
            self._body_unread = True
            await self._send_error_and_close(400, "an upgrade request carries no body")
        if await self._read_body(deadline) is None:  # read the request's end
            await self._send_error_and_close(400, "an upgrade request carries no body")
        ws_conn = WSConnection(ConnectionType.SERVER)
        try:
            ws_conn.initiate_upgrade_connection(list(event.headers), event.target)
            ws_request = next(e for e in ws_conn.events() if isinstance(e, WsRequest))
        except (WsRemoteProtocolError, StopIteration) as exc:
            await self._send_error_and_close(400, f"invalid WebSocket upgrade: {exc}")
        self._ws_conn = ws_conn
        self._ws_head = head
        request = WebSocketRequest(head, ws_request.subprotocols, self)
        async with trio.open_nursery() as nursery:
            self._ws_nursery = nursery
            await self._run_ws_handler(handler, request)
        if self.websocket is not None:
            return False  # the socket belonged to the WebSocket session, which is over
        return self._finish_cycle()

    async def _run_ws_handler(self, handler: WebSocketHandler, request: WebSocketRequest) -> None:
        try:
            await handler(request)
        except HttpError as exc:
            if not request.answered:
                await request.reject(error_response(exc.status, exc.reason, exc.headers))
            elif self.websocket is not None:
                await self.websocket.close(CLOSE_INTERNAL_ERROR, exc.reason)
        except Exception:
            log.exception("websocket handler for %s failed", request.path)
            if not request.answered:
                await request.reject(error_response(500, INTERNAL_ERROR_REASON))
            elif self.websocket is not None:
                await self.websocket.close(CLOSE_INTERNAL_ERROR, INTERNAL_ERROR_REASON)
        else:
            if not request.answered:
                log.error("websocket handler for %s neither accepted nor rejected", request.path)
                await request.reject(error_response(500, INTERNAL_ERROR_REASON))
        if self.websocket is not None:
            await self.websocket.close(CLOSE_NORMAL)

    async def accept(self, subprotocol: str | None, headers: Sequence[tuple[str, str]]) -> WebSocket:
        """:class:`~.websocket.Upgrader`: send 101 and start the session's reader and writer."""
        assert self._ws_conn is not None
        assert self._ws_nursery is not None
        assert self._ws_head is not None
        extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        extra.append(SERVER_HEADER)
        data = self._ws_conn.send(AcceptConnection(subprotocol=subprotocol, extra_headers=extra))
        await self._send(data)
        trailing, _ = self._h11.trailing_data
        ws = WebSocket(
            self._stream,
            self._settings,
            self._ws_head,
            subprotocol,
            initial_data=trailing,
            receive_budget=self._ws_budget,
        )
        self.websocket = ws
        self._ws_nursery.start_soon(ws.run)
        if self._shutting_down:
            ws.server_shutdown()
        return ws

    async def reject(self, response: HttpResponse) -> None:
        """:class:`~.websocket.Upgrader`: answer the upgrade with an ordinary response; the connection stays
        usable for further requests."""
        await self._send_response("GET", response)


def _content_length(head: RequestHead) -> int | None:
    """The announced body size (h11 has checked the header's syntax already)."""
    value = head.header("content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _head_bytes(event: h11.Request) -> int:
    """Size of the request head as sent (request line and header lines with their CRLFs)."""
    size = len(event.method) + len(event.target) + 12
    for name, value in event.headers:
        size += len(name) + len(value) + 4
    return size


def _with_params(head: RequestHead, params: dict[str, str]) -> RequestHead:
    return RequestHead(
        method=head.method,
        target=head.target,
        path=head.path,
        query=head.query,
        headers=head.headers,
        path_params=params,
        client=head.client,
        http_version=head.http_version,
        tls=head.tls,
    )
