"""WebSocket sessions over real sockets: the ``websockets`` sync client (in a thread) as a user would use it,
and a small wsproto client on trio where a test must control reading exactly (back-pressure)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import trio
import trio.testing
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request, TextMessage

from magnetar.bookkeeper.runtime.http import (
    CLOSE_GOING_AWAY,
    CLOSE_MESSAGE_TOO_BIG,
    HttpError,
    HttpRequest,
    HttpResponse,
    Router,
    WebSocket,
    WebSocketClosed,
    WebSocketRequest,
    error_response,
    text_response,
)
from magnetar.bookkeeper.runtime.http.websocket import RECEIVE_CHUNK_BYTES
from magnetar.bookkeeper.runtime.http.ws_frames import CLOSE_ABNORMAL

StartServer = Any  # see conftest.py
RawRequest = Any
T = TypeVar("T")


async def in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


def ws_connect(url: str, **kwargs: Any) -> ClientConnection:
    return connect(url, proxy=None, open_timeout=10, close_timeout=10, ping_interval=None, **kwargs)


async def echo(request: WebSocketRequest) -> None:
    ws = await request.accept()
    async for message in ws:
        if isinstance(message, str):
            await ws.send_text(message)
        else:
            await ws.send_bytes(message)


async def params(request: WebSocketRequest) -> None:
    ws = await request.accept()
    await ws.send_text(f"{dict(request.path_params)}|{request.query.get('q')}")
    await ws.close(4001, "Failed to create producer")


async def reject(request: WebSocketRequest) -> None:
    status = int(request.path_params["status"])
    await request.reject(error_response(status, "Failed to create producer: topic not found"))


async def raises_before_accept(request: WebSocketRequest) -> None:
    raise RuntimeError("secret")


async def raises_http_error(request: WebSocketRequest) -> None:
    raise HttpError(400, "Invalid query params: bad receiverQueueSize")


async def plain(request: HttpRequest) -> HttpResponse:
    return text_response("plain")


def make_router() -> Router:
    router = Router()
    router.websocket("/echo", echo)
    router.websocket("/params/{topic:path}/{sub}", params)
    router.websocket("/reject/{status}", reject)
    router.websocket("/raises", raises_before_accept)
    router.websocket("/http-error", raises_http_error)
    router.get("/plain", plain)
    return router


async def test_echo_text_and_binary(start_server: StartServer) -> None:
    srv = await start_server(make_router())

    def client() -> list[str | bytes]:
        with ws_connect(f"{srv.ws_url}/echo") as ws:
            ws.send("héllo")
            first = ws.recv()
            ws.send(b"\x00\x01\xff")
            second = ws.recv()
            return [first, second]

    assert await in_thread(client) == ["héllo", b"\x00\x01\xff"]


async def test_fragmented_messages_are_reassembled(start_server: StartServer) -> None:
    srv = await start_server(make_router())

    def client() -> list[str | bytes]:
        with ws_connect(f"{srv.ws_url}/echo") as ws:
            ws.send(["frag", "ment", "ed"])
            first = ws.recv()
            ws.send([b"\x01", b"\x02", b"\x03"])
            return [first, ws.recv()]

    assert await in_thread(client) == ["fragmented", b"\x01\x02\x03"]


async def test_path_params_query_and_custom_close_code(start_server: StartServer) -> None:
    srv = await start_server(make_router())

    def client() -> tuple[str | bytes, int, str]:
        with ws_connect(f"{srv.ws_url}/params/a/b%2Fc/my-sub?q=1") as ws:
            message = ws.recv()
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd is not None
            return message, closed.value.rcvd.code, closed.value.rcvd.reason

    message, code, reason = await in_thread(client)
    assert message == "{'topic': 'a/b/c', 'sub': 'my-sub'}|1"
    assert (code, reason) == (4001, "Failed to create producer")


@pytest.mark.parametrize("status", [400, 404, 409, 429, 503])
async def test_rejected_upgrade_answers_the_http_status_and_body(
    start_server: StartServer, status: int
) -> None:
    srv = await start_server(make_router())

    def client() -> InvalidStatus:
        with pytest.raises(InvalidStatus) as err:
            ws_connect(f"{srv.ws_url}/reject/{status}")
        return err.value

    error = await in_thread(client)
    assert error.response.status_code == status
    assert b'"reason":"Failed to create producer: topic not found"' in error.response.body


async def test_handler_failures_before_accept_become_http_errors(start_server: StartServer) -> None:
    srv = await start_server(make_router())

    def client(path: str) -> InvalidStatus:
        with pytest.raises(InvalidStatus) as err:
            ws_connect(f"{srv.ws_url}{path}")
        return err.value

    internal = await in_thread(lambda: client("/raises"))
    assert internal.response.status_code == 500
    assert internal.response.body == b'{"reason":"internal error"}'
    bad = await in_thread(lambda: client("/http-error"))
    assert bad.response.status_code == 400
    assert b"Invalid query params" in bad.response.body


async def test_connection_stays_usable_after_a_rejected_upgrade(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(
            b"GET /reject/404 HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
            b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            b"GET /plain HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        answer = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 404 ")
    assert answer.rstrip().endswith(b"plain")


async def test_plain_get_on_a_websocket_route_is_426(
    start_server: StartServer, raw_request: RawRequest
) -> None:
    srv = await start_server(make_router())
    answer = await raw_request(srv.port, b"GET /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 426 ")


async def test_upgrade_without_a_key_is_400(start_server: StartServer, raw_request: RawRequest) -> None:
    srv = await start_server(make_router())
    answer = await raw_request(
        srv.port,
        b"GET /echo HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
        b"sec-websocket-version: 13\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400 ")


async def test_oversized_message_closes_with_1009(start_server: StartServer) -> None:
    srv = await start_server(make_router(), ws_frame_bytes_max=1000)

    def client() -> int:
        with ws_connect(f"{srv.ws_url}/echo") as ws:
            ws.send("x" * 1000)  # exactly at the limit: fine
            assert ws.recv() == "x" * 1000
            try:
                ws.send(["y" * 600, "y" * 600])  # 1200 bytes in two fragments
            except ConnectionClosed as during_send:  # the server's close came while the client still sent
                ended = during_send
            else:
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv()
                ended = closed.value
            assert ended.rcvd is not None
            return ended.rcvd.code

    assert await in_thread(client) == CLOSE_MESSAGE_TOO_BIG


async def test_ping_is_answered(start_server: StartServer) -> None:
    srv = await start_server(make_router())

    def client() -> bool:
        with ws_connect(f"{srv.ws_url}/echo") as ws:
            pong = ws.ping(b"are you there")
            return pong.wait(10)

    assert await in_thread(client)


async def test_client_close_ends_the_handler_loop(start_server: StartServer) -> None:
    done = trio.Event()
    codes: list[int | None] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        async for _ in ws:
            pass
        codes.append(ws.close_code)
        done.set()

    router = Router()
    router.websocket("/w", handler)
    srv = await start_server(router)

    def client() -> None:
        with ws_connect(f"{srv.ws_url}/w") as ws:
            ws.send("one")
            ws.close(1000, "bye")

    await in_thread(client)
    with trio.fail_after(10):
        await done.wait()
    assert codes == [1000]


async def test_graceful_shutdown_closes_websockets_with_1001(start_server: StartServer) -> None:
    accepted = trio.Event()
    seen: list[int] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        accepted.set()
        try:
            await ws.receive()
        except WebSocketClosed as closed:
            seen.append(closed.code)

    router = Router()
    router.websocket("/w", handler)
    srv = await start_server(router)

    def client() -> int:
        with ws_connect(f"{srv.ws_url}/w") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd is not None
            return closed.value.rcvd.code

    async with trio.open_nursery() as nursery:
        codes: list[int] = []

        async def run_client() -> None:
            codes.append(await in_thread(client))

        nursery.start_soon(run_client)
        await accepted.wait()
        await srv.shutdown()
    assert codes == [CLOSE_GOING_AWAY]
    assert seen == [CLOSE_GOING_AWAY]


async def test_idle_session_is_closed_with_1001(start_server: StartServer) -> None:
    srv = await start_server(make_router(), ws_idle_timeout_ms=200, ws_close_timeout_ms=100)

    def client() -> tuple[int, str]:
        with ws_connect(f"{srv.ws_url}/echo") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None
            return closed.value.rcvd.code, closed.value.rcvd.reason

    assert await in_thread(client) == (CLOSE_GOING_AWAY, "Idle timeout")


async def test_handler_exception_after_accept_closes_with_1011(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.receive()
        raise RuntimeError("secret")

    router = Router()
    router.websocket("/w", handler)
    srv = await start_server(router)

    def client() -> tuple[int, str]:
        with ws_connect(f"{srv.ws_url}/w") as ws:
            ws.send("go")
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd is not None
            return closed.value.rcvd.code, closed.value.rcvd.reason

    with caplog.at_level(logging.ERROR, logger="magnetar.bookkeeper.runtime.http"):
        assert await in_thread(client) == (1011, "internal error")
    assert any("websocket handler for /w failed" in r.getMessage() for r in caplog.records)


# --- a minimal trio WebSocket client, for tests that must control the client's reading ---------------------


class RawWsClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = WSConnection(ConnectionType.CLIENT)

    @classmethod
    async def open(cls, port: int, path: str) -> RawWsClient:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        await client.stream.send_all(client.conn.send(Request(host="127.0.0.1", target=path)))
        with trio.fail_after(10):
            while True:
                client.conn.receive_data(await client.stream.receive_some(65536))
                if any(isinstance(e, AcceptConnection) for e in client.conn.events()):
                    return client

    async def send_text(self, text: str) -> None:
        await self.stream.send_all(self.conn.send(TextMessage(data=text)))


async def test_slow_reader_applies_back_pressure_to_the_sender(start_server: StartServer) -> None:
    queue_max = 64 * 1024
    sessions: list[WebSocket] = []
    sent = 0
    total = 200 * 1024 * 1024  # far more than any socket buffers can hold

    async def flood(request: WebSocketRequest) -> None:
        nonlocal sent
        ws = await request.accept()
        sessions.append(ws)
        message = b"z" * 4096
        while sent < total:
            await ws.send_bytes(message)
            sent += len(message)

    router = Router()
    router.websocket("/flood", flood)
    srv = await start_server(router, ws_send_queue_bytes_max=queue_max)
    client = await RawWsClient.open(srv.port, "/flood")
    async with client.stream:
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        # The handler is parked in send_bytes: it has not finished, and the server's queue is bounded.
        assert 0 < sent < total
        assert sessions[0].send_queue_bytes <= queue_max + 4096 + 16
        before = sent
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        assert sent == before  # nothing moves while the client does not read


async def _sleeping_application(
    start_server: StartServer, **settings: int
) -> tuple[RawWsClient, list[WebSocket], trio.Event]:
    """A server whose application accepts ``/sleep`` and then reads nothing until the returned event is set;
    a client connected to it, and the server-side sessions."""
    sessions: list[WebSocket] = []
    never = trio.Event()

    async def sleeper(request: WebSocketRequest) -> None:
        ws = await request.accept()
        sessions.append(ws)
        await never.wait()

    router = Router()
    router.websocket("/sleep", sleeper)
    srv = await start_server(router, **settings)
    return await RawWsClient.open(srv.port, "/sleep"), sessions, never


async def test_unread_messages_stop_the_server_reading(start_server: StartServer) -> None:
    queue_max = 16 * 1024
    client, sessions, never = await _sleeping_application(start_server, ws_receive_queue_bytes_max=queue_max)
    chunk = "m" * 1024
    pushed = 0

    async def push_forever() -> None:
        nonlocal pushed
        while True:
            await client.send_text(chunk)
            pushed += len(chunk)

    try:
        async with client.stream, trio.open_nursery() as nursery:
            nursery.start_soon(push_forever)
            # Returns only once the pushing client is stuck: the server stopped reading its socket.
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert pushed > queue_max
            # one socket read may complete several messages beyond the bound
            assert sessions[0].receive_queue_bytes <= queue_max + RECEIVE_CHUNK_BYTES
            nursery.cancel_scope.cancel()
    finally:
        never.set()


async def test_queued_messages_leave_in_few_socket_writes() -> None:
    """Write coalescing: 1000 messages sent in a loop cost far fewer than 1000 ``send_all`` calls."""
    from magnetar.bookkeeper.runtime.http import HttpSettings, QueryParams, RequestHead

    server_stream, client_stream = trio.testing.memory_stream_pair()
    writes = 0
    real_send_all = server_stream.send_all

    async def counting_send_all(data: bytes | bytearray | memoryview) -> None:
        nonlocal writes
        writes += 1
        await real_send_all(data)

    server_stream.send_all = counting_send_all  # type: ignore[method-assign]
    client = WSConnection(ConnectionType.CLIENT)
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="x", target="/")))
    assert any(isinstance(e, Request) for e in server.events())
    client.receive_data(server.send(AcceptConnection()))
    head = RequestHead("GET", "/", "/", QueryParams(), (), {}, None)
    ws = WebSocket(server_stream, HttpSettings(), head, None)
    received: list[str | bytes] = []

    async def read_all() -> None:
        while True:
            data = await client_stream.receive_some(65536)
            if not data:
                return
            client.receive_data(data)
            for event in client.events():
                if isinstance(event, TextMessage | BytesMessage):
                    received.append(event.data)
                elif isinstance(event, CloseConnection):
                    await client_stream.send_all(client.send(event.response()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.run)
        nursery.start_soon(read_all)
        for i in range(1000):
            await ws.send_text(f"message {i}")
        await ws.close()
    assert received == [f"message {i}" for i in range(1000)]
    assert writes <= 20


async def test_a_peer_that_reads_nothing_is_dropped_after_the_send_timeout(start_server: StartServer) -> None:
    ended = trio.Event()
    sessions: list[WebSocket] = []

    async def flood(request: WebSocketRequest) -> None:
        ws = await request.accept()
        sessions.append(ws)
        try:
            while True:
                await ws.send_bytes(b"z" * 65536)
        except WebSocketClosed:
            ended.set()

    router = Router()
    router.websocket("/flood", flood)
    srv = await start_server(router, http_send_timeout_ms=300)
    client = await RawWsClient.open(srv.port, "/flood")
    async with client.stream:
        started = trio.current_time()
        with trio.fail_after(10):
            await ended.wait()  # the socket buffers filled, one send stalled, the session was aborted
        assert trio.current_time() - started >= 0.3
        assert sessions[0].close_code == CLOSE_ABNORMAL


async def test_a_close_the_peer_never_answers_ends_the_session_after_the_close_timeout(
    start_server: StartServer,
) -> None:
    """A closing handshake started while the session's watcher sleeps towards a far deadline (the send
    timeout, the idle timeout) still ends the session ``ws_close_timeout_ms`` later: here the server closes
    with 1009 for a message over ``ws_frame_bytes_max`` and waits for the client's Close, which never
    comes."""
    client, sessions, never = await _sleeping_application(
        start_server,
        ws_frame_bytes_max=1024,
        ws_close_timeout_ms=100,
        http_send_timeout_ms=60_000,
        ws_idle_timeout_ms=60_000,
    )
    try:
        async with client.stream:
            await trio.testing.wait_all_tasks_blocked()  # the watcher sleeps towards its far deadlines
            await client.send_text("x" * 2048)
            with trio.fail_after(10):  # our Close arrives, then the server drops the connection
                while await client.stream.receive_some(65536):
                    pass
            assert sessions[0].close_code == CLOSE_MESSAGE_TOO_BIG
    finally:
        never.set()


async def test_an_application_that_reads_nothing_is_not_an_idle_peer(start_server: StartServer) -> None:
    client, sessions, never = await _sleeping_application(
        start_server, ws_receive_queue_bytes_max=1024, ws_idle_timeout_ms=200, ws_close_timeout_ms=100
    )
    try:
        async with client.stream:
            for _ in range(4):
                await client.send_text("m" * 1024)  # past the receive queue's bound: the server stops reading
            await trio.sleep(0.6)  # three idle timeouts with the peer waiting for the application
            assert not sessions[0].closed
            for _ in range(4):  # the application catches up ...
                await sessions[0].receive()
            with trio.fail_after(10):  # ... and from then on the idle timeout counts again
                while not sessions[0].closed:
                    await trio.sleep(0.05)
            assert sessions[0].close_code == CLOSE_GOING_AWAY
    finally:
        never.set()
