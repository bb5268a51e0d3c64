"""Request bodies cost nothing until the request is accepted: a route's head check (authentication,
authorization) and unknown routes are answered before the body is read, and the bodies read at once across
connections stay within ``http_bodies_in_flight_bytes_max``."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import trio
import trio.testing
from fixtures.http_raw import read_answer

from magnetar.bookkeeper.runtime.http import (
    HttpError,
    HttpRequest,
    HttpResponse,
    HttpSettings,
    RequestHead,
    Router,
    WebSocketRequest,
    text_response,
)
from magnetar.bookkeeper.runtime.http.body_budget import BodyBudget

StartServer = Any  # see conftest.py
RawRequest = Any

MIB = 1024 * 1024


class Recorder:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.heads: list[RequestHead] = []
        self.release = trio.Event()
        self.holding = 0

    async def check(self, head: RequestHead) -> None:
        self.heads.append(head)
        if head.header("authorization") != "Bearer good":
            raise HttpError(401, "Authentication required")

    async def handler(self, request: HttpRequest) -> HttpResponse:
        self.bodies.append(request.body)
        return text_response(f"got {len(request.body)}")

    async def holding_handler(self, request: HttpRequest) -> HttpResponse:
        self.holding += 1
        await self.release.wait()
        self.holding -= 1
        return text_response(f"held {len(request.body)}")


def make_router(recorder: Recorder) -> Router:
    router = Router()
    router.put("/guarded/{name}", recorder.handler, check=recorder.check)
    router.get("/guarded/{name}", recorder.handler, check=recorder.check)
    router.post("/hold", recorder.holding_handler)
    router.post("/open", recorder.handler)

    async def ws(request: WebSocketRequest) -> None:
        await request.accept()

    router.websocket("/ws", ws)
    return router


async def test_a_refused_head_is_answered_before_the_body_is_sent(start_server: StartServer) -> None:
    """The audit's attack: bodies announced without a token used to be read whole before the 401."""
    recorder = Recorder()
    srv = await start_server(make_router(recorder), http_body_bytes_max=20 * MIB)
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(b"PUT /guarded/a%20b HTTP/1.1\r\nhost: x\r\ncontent-length: 10485760\r\n\r\n")
        answer = await read_answer(stream)  # not one byte of the 10 MiB body was sent
        assert answer.startswith(b"HTTP/1.1 401 ")
        assert b"connection: close" in answer.lower()
        assert b'{"reason":"Authentication required"}' in answer
        with trio.fail_after(10):  # the server closes (after dropping what still comes, briefly)
            while await stream.receive_some(65536):
                pass
    assert recorder.bodies == []
    assert recorder.heads[0].path_params == {"name": "a b"}  # the check sees the route's parameters


async def test_a_refused_client_that_keeps_sending_is_cut_off(start_server: StartServer) -> None:
    """After the answer the unread body is dropped for a moment only: a trickle cannot hold the connection."""
    recorder = Recorder()
    srv = await start_server(make_router(recorder), http_body_bytes_max=20 * MIB)
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(b"PUT /guarded/x HTTP/1.1\r\nhost: x\r\ncontent-length: 10485760\r\n\r\n")
        assert (await read_answer(stream)).startswith(b"HTTP/1.1 401 ")
        with trio.fail_after(10):
            try:
                while True:
                    await stream.send_all(b"x")
                    await trio.sleep(0.05)
            except trio.BrokenResourceError:
                pass  # the server closed the connection while we were still sending


async def test_an_accepted_head_gets_its_body_read(start_server: StartServer) -> None:
    recorder = Recorder()
    srv = await start_server(make_router(recorder))
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        head = b"PUT /guarded/x HTTP/1.1\r\nhost: x\r\nauthorization: Bearer good\r\ncontent-length: 5\r\n"
        await stream.send_all(head + b"\r\nhello")
        assert (await read_answer(stream)).startswith(b"HTTP/1.1 200 ")
    assert recorder.bodies == [b"hello"]


async def test_a_refused_request_without_a_body_keeps_its_connection(start_server: StartServer) -> None:
    recorder = Recorder()
    srv = await start_server(make_router(recorder))
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(b"GET /guarded/x HTTP/1.1\r\nhost: x\r\n\r\n")
        first = await read_answer(stream)
        assert first.startswith(b"HTTP/1.1 401 ")
        assert b"connection: close" not in first.lower()
        await stream.send_all(b"GET /guarded/x HTTP/1.1\r\nhost: x\r\nauthorization: Bearer good\r\n\r\n")
        assert (await read_answer(stream)).startswith(b"HTTP/1.1 200 ")


async def test_an_unknown_route_is_answered_before_the_body(start_server: StartServer) -> None:
    srv = await start_server(make_router(Recorder()), http_body_bytes_max=20 * MIB)
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(b"POST /nowhere HTTP/1.1\r\nhost: x\r\ncontent-length: 10485760\r\n\r\n")
        assert (await read_answer(stream)).startswith(b"HTTP/1.1 404 ")


async def send_body_request(port: int, path: str, body: bytes, role: str = "") -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        extra = f"x-role: {role}\r\n" if role else ""
        head = f"POST {path} HTTP/1.1\r\nhost: x\r\n{extra}content-length: {len(body)}\r\n\r\n".encode()
        await stream.send_all(head + body)
        return await read_answer(stream)


async def test_bodies_beyond_the_budget_wait_unread_then_get_503(start_server: StartServer) -> None:
    recorder = Recorder()
    srv = await start_server(
        make_router(recorder),
        http_body_bytes_max=1000,
        http_bodies_in_flight_bytes_max=1500,
        http_request_timeout_ms=300,
    )
    answers: list[bytes] = []

    async def held() -> None:
        answers.append(await send_body_request(srv.port, "/hold", b"h" * 1000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(held)
        with trio.fail_after(10):
            while recorder.holding == 0:
                await trio.sleep(0.01)
        # 1000 of 1500 bytes are taken: a second body of 1000 waits, then gets 503
        second = await send_body_request(srv.port, "/open", b"o" * 1000)
        assert second.startswith(b"HTTP/1.1 503 ")
        assert b"http_bodies_in_flight_bytes_max=1500" in second
        assert (await send_body_request(srv.port, "/open", b"s" * 400)).startswith(b"HTTP/1.1 200 ")  # fits
        recorder.release.set()
    assert answers[0].startswith(b"HTTP/1.1 200 ")
    # everything was given back
    assert (await send_body_request(srv.port, "/open", b"o" * 1000)).startswith(b"HTTP/1.1 200 ")
    assert recorder.bodies == [b"s" * 400, b"o" * 1000]


async def test_a_waiting_body_goes_in_once_the_budget_frees(start_server: StartServer) -> None:
    recorder = Recorder()
    srv = await start_server(
        make_router(recorder), http_body_bytes_max=1000, http_bodies_in_flight_bytes_max=1000
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_body_request, srv.port, "/hold", b"h" * 1000)
        with trio.fail_after(10):
            while recorder.holding == 0:
                await trio.sleep(0.01)
        answers: list[bytes] = []

        async def waiting() -> None:
            answers.append(await send_body_request(srv.port, "/open", b"w" * 10))

        nursery.start_soon(waiting)
        await trio.testing.wait_all_tasks_blocked(cushion=0.1)
        assert answers == []  # waiting for the budget, its body unread
        recorder.release.set()
    assert answers[0].startswith(b"HTTP/1.1 200 ")
    assert recorder.bodies == [b"w" * 10]


async def test_a_chunked_body_beyond_the_budget_is_503(start_server: StartServer) -> None:
    recorder = Recorder()
    srv = await start_server(
        make_router(recorder), http_body_bytes_max=1000, http_bodies_in_flight_bytes_max=1000
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_body_request, srv.port, "/hold", b"h" * 900)
        with trio.fail_after(10):
            while recorder.holding == 0:
                await trio.sleep(0.01)
        stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
        async with stream:
            chunk = b"c8\r\n" + b"c" * 200 + b"\r\n"
            await stream.send_all(
                b"POST /open HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + chunk
            )
            assert (await read_answer(stream)).startswith(b"HTTP/1.1 503 ")
        recorder.release.set()
    assert recorder.bodies == []


async def test_an_upgrade_announcing_a_body_is_refused_unread(start_server: StartServer) -> None:
    srv = await start_server(make_router(Recorder()), http_body_bytes_max=20 * MIB)
    stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
    async with stream:
        await stream.send_all(
            b"GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
            b"content-length: 10485760\r\n\r\n"
        )
        assert (await read_answer(stream)).startswith(b"HTTP/1.1 400 ")


def test_the_budget_must_hold_one_body() -> None:
    with pytest.raises(pydantic.ValidationError, match="http_bodies_in_flight_bytes_max"):
        HttpSettings(http_body_bytes_max=2 * MIB, http_bodies_in_flight_bytes_max=MIB)


async def test_one_caller_holds_at_most_its_share_of_the_budget() -> None:
    """Sans-IO: a caller (role or address) over its share waits like a body that does not fit; another
    caller's body still goes in; giving back frees the caller's share."""
    budget = BodyBudget(100, share_max=40)
    assert budget.try_take(30, "role:a")
    assert not budget.try_take(20, "role:a")  # 50 > its share of 40
    assert budget.try_take(40, "role:b")
    assert budget.held_by("role:a") == 30
    assert not await budget.take(20, trio.current_time() + 0.05, "role:a")
    budget.give_back(30, "role:a")
    assert budget.held_by("role:a") == 0
    assert await budget.take(40, trio.current_time() + 0.05, "role:a")
    assert budget.taken == 80


async def test_a_role_over_its_share_waits_while_another_role_is_served(start_server: StartServer) -> None:
    """Over real sockets: the head check names the role; role a's second body waits (then 503 naming the
    share's setting) while role b's body is read at once."""
    recorder = Recorder()
    router = Router()

    async def check(head: RequestHead) -> str:
        return head.header("x-role") or "?"

    router.post("/hold", recorder.holding_handler, check=check)
    router.post("/open", recorder.handler, check=check)
    srv = await start_server(
        router,
        http_body_bytes_max=1000,
        http_bodies_in_flight_bytes_max=3000,
        http_bodies_in_flight_bytes_per_role_max=1000,
        http_request_timeout_ms=300,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_body_request, srv.port, "/hold", b"h" * 1000, "a")
        with trio.fail_after(10):
            while recorder.holding == 0:
                await trio.sleep(0.01)
        second = await send_body_request(srv.port, "/open", b"a" * 10, "a")
        assert second.startswith(b"HTTP/1.1 503 ")
        assert b"of a exceed http_bodies_in_flight_bytes_per_role_max=1000" in second
        other = await send_body_request(srv.port, "/open", b"b" * 1000, "b")
        assert other.startswith(b"HTTP/1.1 200 ")
        recorder.release.set()
