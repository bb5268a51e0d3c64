"""The HTTP server over real sockets on 127.0.0.1 (port 0), driven by httpx as a user would, and by raw
sockets where a well-behaved client cannot produce the input (garbage, pipelining, slow requests)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from magnetar.bookkeeper.runtime.http import (
    HttpError,
    HttpRequest,
    HttpResponse,
    Router,
    json_response,
    text_response,
)

StartServer = Any  # see conftest.py
RawRequest = Any


async def echo(request: HttpRequest) -> HttpResponse:
    return json_response(
        {
            "method": request.method,
            "path": request.path,
            "params": dict(request.path_params),
            "query": {name: request.query.get_all(name) for name in request.query},
            "body": request.body.decode(),
            "client_port": request.client[1] if request.client else None,
        }
    )


async def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret database password in this message")


async def conflict(request: HttpRequest) -> HttpResponse:
    raise HttpError(409, "Topic already exists")


async def stream(request: HttpRequest) -> HttpResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(5):
            yield f"chunk{i};".encode()
            await trio.lowlevel.checkpoint()

    return HttpResponse(200, (("content-type", "text/plain"),), chunks())


def make_router() -> Router:
    router = Router()
    router.get("/echo/{name}", echo)
    router.post("/echo/{name}", echo)
    router.put("/echo/{name}", echo)
    router.get("/fail", fail)
    router.put("/conflict", conflict)
    router.get("/stream", stream)
    router.get("/text", lambda request: _text())
    return router


async def _text() -> HttpResponse:
    return text_response("hello")


async def test_routes_params_query_and_body(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        response = await client.post("/echo/a%20b?x=1&x=2&empty=", content=b"payload")
        assert response.status_code == 200
        data = response.json()
        assert data["method"] == "POST"
        assert data["params"] == {"name": "a b"}
        assert data["query"] == {"x": ["1", "2"], "empty": [""]}
        assert data["body"] == "payload"
        assert response.headers["content-type"] == "application/json"
        assert "date" in response.headers


async def test_unknown_path_and_wrong_method_answer_json_reasons(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        missing = await client.get("/nope")
        assert missing.status_code == 404
        assert missing.json() == {"reason": "Not Found: nothing is served at /nope"}
        wrong = await client.delete("/echo/x")
        assert wrong.status_code == 405
        assert wrong.json() == {
            "reason": "Method Not Allowed: DELETE /echo/x - it takes GET, HEAD, POST, PUT"
        }
        assert wrong.headers["allow"] == "GET, HEAD, POST, PUT"


async def test_handler_exception_is_a_generic_500_and_the_traceback_is_logged(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    srv = await start_server(make_router())
    with caplog.at_level(logging.ERROR, logger="magnetar.bookkeeper.runtime.http"):
        async with httpx.AsyncClient(base_url=srv.base_url) as client:
            response = await client.get("/fail")
            assert response.status_code == 500
            assert response.json() == {"reason": "internal error"}
            assert "secret" not in response.text
            # the connection survives the failure
            assert (await client.get("/text")).text == "hello"
    failures = [r for r in caplog.records if "handler for GET /fail failed" in r.getMessage()]
    assert failures
    assert failures[0].exc_info is not None
    assert "secret database password" in str(failures[0].exc_info[1])


async def test_http_error_carries_status_and_reason(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        response = await client.put("/conflict")
        assert response.status_code == 409
        assert response.json() == {"reason": "Topic already exists"}


async def test_keep_alive_reuses_one_connection(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        ports = {(await client.get(f"/echo/{i}")).json()["client_port"] for i in range(20)}
    assert len(ports) == 1
    assert srv.server.connection_count <= 1


async def test_pipelined_requests_are_answered_in_order(
    start_server: StartServer, raw_request: RawRequest
) -> None:
    srv = await start_server(make_router())
    requests = (
        b"".join(f"GET /echo/{i} HTTP/1.1\r\nhost: x\r\n\r\n".encode() for i in range(3))
        + b"GET /echo/last HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    answer = await raw_request(srv.port, requests)
    assert answer.count(b"HTTP/1.1 200 OK") == 4
    positions = [answer.index(f'"name":"{name}"'.encode()) for name in ("0", "1", "2", "last")]
    assert positions == sorted(positions)


async def test_expect_100_continue(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    stream_ = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream_:
        await stream_.send_all(
            b"PUT /echo/c HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
        )
        with trio.fail_after(10):
            interim = await stream_.receive_some(65536)
        assert interim.startswith(b"HTTP/1.1 100 ")
        await stream_.send_all(b"data")
        with trio.fail_after(10):
            final = await stream_.receive_some(65536)
        assert final.startswith(b"HTTP/1.1 200 ")
        assert b'"body":"data"' in final


async def test_expect_100_continue_to_a_missing_route_is_refused_without_reading_the_body(
    start_server: StartServer, raw_request: RawRequest
) -> None:
    srv = await start_server(make_router())
    answer = await raw_request(
        srv.port, b"PUT /missing HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 404 ")
    assert b"100 Continue" not in answer


async def test_oversized_head_is_431(start_server: StartServer) -> None:
    srv = await start_server(make_router(), http_header_bytes_max=1024)
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        response = await client.get("/echo/x", headers={"x-big": "a" * 4096})
        assert response.status_code == 431
        assert "reason" in response.json()


async def test_oversized_body_is_413_by_content_length_and_when_chunked(
    start_server: StartServer, raw_request: RawRequest
) -> None:
    srv = await start_server(make_router(), http_body_bytes_max=1000)
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        response = await client.post("/echo/x", content=b"a" * 1001)
        assert response.status_code == 413
        assert response.headers["connection"] == "close"
        assert (await client.post("/echo/x", content=b"a" * 1000)).status_code == 200
    chunk = b"64\r\n" + b"b" * 100 + b"\r\n"
    answer = await raw_request(
        srv.port,
        b"POST /echo/x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 11 + b"0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 413 ")


async def test_connections_beyond_the_limit_get_503(start_server: StartServer) -> None:
    srv = await start_server(make_router(), http_connections_max=2)
    held = [await trio.open_tcp_stream("127.0.0.1", srv.port) for _ in range(2)]
    try:
        for stream_ in held:  # make sure both are accepted and counted
            await stream_.send_all(b"GET /echo/held HTTP/1.1\r\nhost: x\r\n\r\n")
            with trio.fail_after(10):
                assert (await stream_.receive_some(65536)).startswith(b"HTTP/1.1 200 ")
        async with httpx.AsyncClient(base_url=srv.base_url) as client:
            refused = await client.get("/echo/extra")
            assert refused.status_code == 503
            assert refused.json() == {"reason": "too many connections"}
    finally:
        for stream_ in held:
            await stream_.aclose()
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        with trio.fail_after(10):
            while (await client.get("/echo/after")).status_code != 200:
                await trio.sleep(0.01)  # the server notices the closed connections asynchronously


@pytest.mark.parametrize(
    ("garbage", "status"),
    [
        (b"\x00\x01\x02garbage\r\n\r\n", b"400"),
        (b"GET / HTTP/9.9\r\nhost: x\r\n\r\n", b"505"),
        (b"GET /echo/x HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
        (b"GET /echo/x HTTP/1.1\r\n\r\n", b"400"),  # HTTP/1.1 requires Host
        (b"POST /echo/x HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n", b"400"),
        (b"POST /echo/x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", b"400"),
        (b"GET /echo/x?a=%ff HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", b"400"),
    ],
)
async def test_malformed_requests_are_refused_and_do_not_disturb_other_connections(
    start_server: StartServer, raw_request: RawRequest, garbage: bytes, status: bytes
) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        assert (await client.get("/echo/before")).status_code == 200
        answer = await raw_request(srv.port, garbage)
        assert answer.startswith(b"HTTP/1.1 " + status + b" ")
        assert (await client.get("/echo/after")).status_code == 200


async def test_peer_vanishing_mid_request_is_harmless(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    stream_ = await trio.open_tcp_stream("127.0.0.1", srv.port)
    await stream_.send_all(b"POST /echo/x HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc")
    await stream_.aclose()
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        assert (await client.get("/echo/still")).status_code == 200


async def test_idle_keep_alive_connection_is_closed(start_server: StartServer) -> None:
    srv = await start_server(make_router(), http_idle_timeout_ms=100)
    stream_ = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream_:
        await stream_.send_all(b"GET /echo/x HTTP/1.1\r\nhost: x\r\n\r\n")
        with trio.fail_after(10):
            assert (await stream_.receive_some(65536)).startswith(b"HTTP/1.1 200 ")
            assert await stream_.receive_some(65536) == b""  # closed by the server once idle


async def test_slow_request_gets_408(start_server: StartServer, raw_request: RawRequest) -> None:
    srv = await start_server(make_router(), http_request_timeout_ms=100)
    answer = await raw_request(srv.port, b"GET /echo/x HTTP/1.1\r\nhost: x\r\n")  # head never finishes
    assert answer.startswith(b"HTTP/1.1 408 ")


async def test_streaming_response_is_chunked(start_server: StartServer) -> None:
    srv = await start_server(make_router())
    async with httpx.AsyncClient(base_url=srv.base_url) as client:
        response = await client.get("/stream")
        assert response.headers["transfer-encoding"] == "chunked"
        assert response.text == "chunk0;chunk1;chunk2;chunk3;chunk4;"


async def test_head_sends_headers_without_body(start_server: StartServer, raw_request: RawRequest) -> None:
    srv = await start_server(make_router())
    answer = await raw_request(srv.port, b"HEAD /text HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"content-length: 5" in head
    assert body == b""


async def test_graceful_shutdown_finishes_in_flight_requests(start_server: StartServer) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def slow(request: HttpRequest) -> HttpResponse:
        entered.set()
        await release.wait()
        return text_response("finished")

    router = make_router()
    router.get("/slow", slow)
    srv = await start_server(router)
    results: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(base_url=srv.base_url) as client, trio.open_nursery() as nursery:

        async def call() -> None:
            results["slow"] = await client.get("/slow")

        nursery.start_soon(call)
        await entered.wait()
        srv.server.shutdown()
        with trio.fail_after(10):
            while srv.port and not await _refuses_connections(srv.port):
                await trio.sleep(0.01)
        release.set()
    await srv.done.wait()
    assert results["slow"].text == "finished"
    assert results["slow"].headers["connection"] == "close"


async def _refuses_connections(port: int) -> bool:
    try:
        stream_ = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return True
    await stream_.aclose()
    return False


async def test_shutdown_grace_expiry_cancels_stuck_handlers(start_server: StartServer) -> None:
    entered = trio.Event()
    cancelled = trio.Event()

    async def stuck(request: HttpRequest) -> HttpResponse:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    router = Router()
    router.get("/stuck", stuck)
    srv = await start_server(router, shutdown_grace_ms=50)
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            async with httpx.AsyncClient(base_url=srv.base_url) as client:
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get("/stuck")

        nursery.start_soon(call)
        await entered.wait()
        await srv.shutdown()
    assert cancelled.is_set()


async def test_serve_http_reports_its_port_and_stops_on_the_shutdown_event() -> None:
    from magnetar.bookkeeper.runtime.http import HttpSettings, serve_http

    shutdown = trio.Event()
    settings = HttpSettings(http_bind_address="127.0.0.1", http_port=0)
    async with trio.open_nursery() as nursery:
        ports = await nursery.start(functools.partial(serve_http, shutdown=shutdown), make_router(), settings)
        assert len(ports) == 1
        assert ports[0] > 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[0]}") as client:
            assert (await client.get("/text")).text == "hello"
        shutdown.set()  # the nursery exits only because serve_http returns
    assert await _refuses_connections(ports[0])
