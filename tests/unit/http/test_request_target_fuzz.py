"""Hypothesis against the real HTTP layer: request lines with arbitrary targets, as plain requests and as
WebSocket upgrades, sent over raw sockets to a server on 127.0.0.1 (port 0). Never a 5xx, the server keeps
serving, and a target holding a character RFC 3986 does not allow is answered ``400 Bad Request`` with a
``{"reason": ...}`` naming it - never a Python repr."""

from __future__ import annotations

import json
import socket
import urllib.parse
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    Router,
    WebSocketRequest,
    json_response,
)
from magnetar.bookkeeper.runtime.http.request_target import target_error

StartServer = Any  # see conftest.py

UPGRADE = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)
EDGES = [bytes([b]) for b in b' "#%<>[\\]^`{|}\x00\x01\t\x7f\x80\xff'] + ["\u202e".encode(), "é".encode()]
targets = st.builds(
    lambda prefix, parts: prefix + b"".join(parts),
    st.sampled_from([b"/echo/", b"/ws/", b"/", b"", b"*", b"http://h/echo/"]),
    st.lists(
        st.one_of(st.sampled_from(EDGES), st.binary(max_size=3), st.sampled_from([b"a", b"%41", b"?q=1&"]))
    ),
)


async def echo(request: HttpRequest) -> HttpResponse:
    return json_response({"path": request.path})


async def session(request: WebSocketRequest) -> None:
    ws = await request.accept(None)
    await ws.close()


def make_router() -> Router:
    router = Router()
    router.get("/echo/{name}", echo)
    router.websocket("/ws/{name}", session)
    return router


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read the answer until the server closes (or its head and body are in)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def parse(answer: bytes) -> tuple[int, str, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("ascii")
    version, status, phrase = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    return int(status), phrase, body


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def test_fuzzed_targets_and_upgrade_paths_never_get_a_5xx_and_bad_characters_get_400_with_a_reason(
    start_server: StartServer,
) -> None:
    server = await start_server(make_router())

    @settings(max_examples=400, suppress_health_check=list(HealthCheck))
    @given(target=targets, upgrade=st.booleans())
    def check(target: bytes, upgrade: bool) -> None:
        request = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + (UPGRADE if upgrade else b"") + b"\r\n"
        answer = exchange(server.port, request)
        if not answer:  # h11 may see no request at all (an empty line): nothing to answer
            assert not target.strip(b"\r\n ")
            return
        status, phrase, body = parse(answer)
        assert status < 500, answer
        assert phrase, answer  # a real reason phrase, always
        if status == 101:  # an accepted upgrade: what follows is the session's Close frame
            assert target_error(target) is None
            return
        if status >= 300:  # an error's reason, in our words
            reason = json.loads(body)["reason"]
            assert "bytearray(" not in reason, answer
            if b"b'" not in target:  # a 404 names the path it was asked for
                assert "b'" not in reason, answer
        delimited = not any(b in target for b in b" \r\n")
        refused = target_error(target) if target else None
        if delimited and refused is not None:
            assert (status, phrase) == (400, "Bad Request"), answer
            assert json.loads(body) == {"reason": refused}
        elif status == 400:
            assert reason, answer
        if refused is None and delimited and target.startswith(b"/echo/") and b"?" not in target[6:7]:
            # a path parameter percent-decodes to bytes; if they are not UTF-8 the route refuses them by name
            name = urllib.parse.unquote_to_bytes(target[6:].split(b"?")[0].split(b"#")[0])
            if _is_utf8(name):
                assert status in (200, 404), answer
            elif status != 404:
                assert (status, reason) == (400, "path parameter 'name' is not valid UTF-8"), answer

    await trio.to_thread.run_sync(check)
    not_utf8 = b"GET /echo/a%FF HTTP/1.1\r\nHost: x\r\n\r\n"
    invalid = await trio.to_thread.run_sync(exchange, server.port, not_utf8)
    status, _, body = parse(invalid)
    assert (status, json.loads(body)) == (400, {"reason": "path parameter 'name' is not valid UTF-8"})
    still = b"GET /echo/still-serving HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = await trio.to_thread.run_sync(exchange, server.port, still)
    assert parse(answer)[0] == 200


async def test_a_raw_space_and_a_fragment_are_answered_as_a_newcomer_can_read_them(
    start_server: StartServer,
) -> None:
    server = await start_server(make_router())

    def run() -> list[bytes]:
        return [
            exchange(server.port, b"GET /echo/my topic HTTP/1.1\r\nHost: x\r\n\r\n"),
            exchange(server.port, b"GET /ws/locked#x HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"\r\n"),
        ]

    space, fragment = await trio.to_thread.run_sync(run)
    assert space.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert json.loads(parse(space)[2]) == {
        "reason": "Invalid request target: a space (%20) at offset 8 is not allowed: percent-encode it"
    }
    assert fragment.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert json.loads(parse(fragment)[2]) == {
        "reason": "Invalid request target: '#' (%23) at offset 10 is not allowed: percent-encode it"
    }
