"""Bounds of a WebSocket session against a peer that abuses it: empty messages, ping floods without reading,
messages cut into many tiny fragments. Each test plays the hostile peer with raw frames over a real socket
(or a lockstep stream, where the test must control exactly when the peer reads)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from fixtures.ws_raw import frame, open_raw, sleeping_router

from magnetar.bookkeeper.runtime.http import (
    HttpSettings,
    QueryParams,
    RequestHead,
    Router,
    WebSocket,
    WebSocketRequest,
)
from magnetar.bookkeeper.runtime.http.websocket import RECEIVE_CHUNK_BYTES
from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_POLICY_VIOLATION,
    OPCODE_CLOSE,
    OPCODE_CONTINUATION,
    OPCODE_PING,
    OPCODE_TEXT,
    FrameDecoder,
    Ping,
    Pong,
)

StartServer = Any  # see conftest.py


async def test_an_empty_message_wakes_the_handler(start_server: StartServer) -> None:
    received: list[str | bytes] = []
    done = trio.Event()

    async def one(request: WebSocketRequest) -> None:
        ws = await request.accept()
        received.extend(await ws.receive_batch())
        done.set()
        await ws.close()

    router = Router()
    router.websocket("/one", one)
    srv = await start_server(router)
    stream = await open_raw(srv.port, "/one")
    async with stream:
        await stream.send_all(frame(OPCODE_TEXT))
        with trio.fail_after(10):
            await done.wait()
    assert received == [""]


async def test_empty_messages_count_towards_the_receive_bound(start_server: StartServer) -> None:
    """Two million empty messages once cost gigabytes: they weighed nothing against a bound in bytes."""
    sessions: list[WebSocket] = []
    never = trio.Event()
    messages_max = 100
    srv = await start_server(sleeping_router(sessions, never), ws_receive_queue_messages_max=messages_max)
    stream = await open_raw(srv.port, "/sleep")
    pushed = 0
    chunk = frame(OPCODE_TEXT) * 1000

    async def push_forever() -> None:
        nonlocal pushed
        while True:
            await stream.send_all(chunk)
            pushed += 1000

    try:
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(push_forever)
            # Returns only once the pushing client is stuck: the server stopped reading its socket.
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            queued = sessions[0].receive_queue_messages
            assert pushed > queued
            # one socket read may complete a chunk's worth of messages (6 bytes each) beyond the bound
            assert messages_max < queued <= messages_max + RECEIVE_CHUNK_BYTES // 6 + 1
            nursery.cancel_scope.cancel()
    finally:
        never.set()


def lockstep_session(**settings: int) -> tuple[WebSocket, trio.abc.Stream]:
    """A session over a lockstep stream (a send completes only when the peer reads it) and the peer's end."""
    server_stream, peer = trio.testing.lockstep_stream_pair()
    head = RequestHead("GET", "/", "/", QueryParams(), (), {}, None)
    return WebSocket(server_stream, HttpSettings(**settings), head, None), peer


async def test_pings_of_a_peer_that_never_reads_stop_the_reading() -> None:
    """Each chunk's pings get one pong; once the unsent pongs pass the send bound, the session stops
    reading."""
    send_max = 1024
    ws, peer = lockstep_session(ws_send_queue_bytes_max=send_max)
    ping = frame(OPCODE_PING, b"p" * 125)
    sent = 0

    async def ping_forever() -> None:
        nonlocal sent
        while True:
            await peer.send_all(ping * 4)  # one chunk, four pings
            sent += 4

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.run)
        nursery.start_soon(ping_forever)
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        assert sent > 0
        # the writer holds the first pong (the peer reads nothing); the rest wait, up to the bound
        assert send_max < ws.send_queue_bytes <= send_max + 127
        before = sent
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        assert sent == before  # nothing more is read
        assert before <= 4 * (send_max // 127 + 2)
        nursery.cancel_scope.cancel()


async def test_the_pings_of_one_chunk_get_one_pong_for_the_last() -> None:
    ws, peer = lockstep_session()
    decoder = FrameDecoder(expect_masked=False, message_bytes_max=1 << 20)
    events: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.run)
        await peer.send_all(b"".join(frame(OPCODE_PING, b"%d" % i) for i in range(50)))
        await peer.send_all(frame(OPCODE_PING, b"next") + frame(OPCODE_CLOSE, b"\x03\xe8"))
        with trio.fail_after(10):
            while not any(not isinstance(e, Ping | Pong) for e in events):
                events += decoder.feed(await peer.receive_some(65536))
        nursery.cancel_scope.cancel()
    assert events[:2] == [Pong(b"49"), Pong(b"next")]  # then our Close


async def test_a_message_in_too_many_fragments_closes_with_1008(start_server: StartServer) -> None:
    sessions: list[WebSocket] = []
    never = trio.Event()
    srv = await start_server(sleeping_router(sessions, never), ws_message_fragments_max=16)
    stream = await open_raw(srv.port, "/sleep")
    try:
        async with stream:
            wire = frame(OPCODE_TEXT, b"", fin=False) + frame(OPCODE_CONTINUATION, b"", fin=False) * 100
            await stream.send_all(wire)
            decoder = FrameDecoder(expect_masked=False, message_bytes_max=1 << 20)
            with trio.fail_after(10):
                events: list[object] = []
                while not events:
                    events += decoder.feed(await stream.receive_some(65536))
            assert [getattr(e, "code", None) for e in events] == [CLOSE_POLICY_VIOLATION]
            assert sessions[0].receive_queue_messages == 0
    finally:
        never.set()
