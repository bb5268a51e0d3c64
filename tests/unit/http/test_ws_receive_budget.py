"""The received-bytes budget shared by a port's WebSocket sessions, and the deadline to finish a message:
the sans-IO budget with stand-in sessions, the decoder dropping an unfinished message, and hostile peers
over real sockets (sessions parking unfinished messages, a message that never ends)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from fixtures.ws_raw import frame, open_raw, sleeping_router
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime.http import WebSocket
from magnetar.bookkeeper.runtime.http.ws_budget import EVICT_BYTES_MIN, ReceiveBudget
from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_POLICY_VIOLATION,
    CLOSE_TRY_AGAIN_LATER,
    OPCODE_BINARY,
    OPCODE_CLOSE,
    OPCODE_CONTINUATION,
    OPCODE_PING,
    OPCODE_TEXT,
    Close,
    FrameDecoder,
    Ping,
    close_payload,
)

StartServer = Any  # see conftest.py


class Holder:
    def __init__(self, unfinished: int) -> None:
        self.unfinished_bytes = unfinished
        self.evicted: list[str] = []

    def evict(self, reason: str) -> None:
        self.evicted.append(reason)
        self.unfinished_bytes = 0


def test_over_the_budget_the_largest_unfinished_message_is_evicted() -> None:
    budget = ReceiveBudget(1000 * 1024)
    small, large, queued = Holder(100 * 1024), Holder(600 * 1024), Holder(0)
    budget.hold(small, 100 * 1024)
    budget.hold(large, 600 * 1024)
    budget.hold(queued, 200 * 1024)  # complete messages waiting for a handler
    assert budget.taken == 900 * 1024
    assert not large.evicted
    budget.hold(small, 300 * 1024)  # 1,100 KiB: over
    assert len(large.evicted) == 1
    assert "ws_received_bytes_in_flight_max=1024000" in large.evicted[0]
    assert budget.taken == 500 * 1024
    assert budget.held_by(large) == 0
    assert not small.evicted
    assert not queued.evicted


def test_complete_messages_and_small_remainders_are_never_evicted() -> None:
    budget = ReceiveBudget(100_000)
    queued, tiny = Holder(0), Holder(EVICT_BYTES_MIN - 1)
    budget.hold(queued, 80_000)
    budget.hold(tiny, 30_000)
    assert budget.full
    assert not queued.evicted
    assert not tiny.evicted
    assert budget.evictions == 0


async def test_a_reader_waits_for_room_until_a_handler_takes_its_messages() -> None:
    budget = ReceiveBudget(1000)
    queued, waiter = Holder(0), Holder(0)
    budget.hold(queued, 1000)
    room = trio.Event()

    async def wait() -> None:
        await budget.wait_for_room()
        room.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not room.is_set()
        budget.hold(queued, 10)
        with trio.fail_after(5):
            await room.wait()
    budget.release(queued)
    assert budget.taken == 0
    assert not waiter.evicted


MESSAGE = b"m" * 70_000


@given(
    cut=st.integers(min_value=1, max_value=len(frame(OPCODE_BINARY, MESSAGE)) - 1), split=st.integers(1, 999)
)
def test_an_abandoned_message_frees_its_bytes_and_the_close_is_still_decoded(cut: int, split: int) -> None:
    """Abandoned anywhere within a 70,000-byte message - fragmented or not - the decoder holds nothing of
    it, skips the rest of it and every later data frame, and still reports the peer's ping and Close."""
    for wire in (
        frame(OPCODE_BINARY, MESSAGE),
        frame(OPCODE_TEXT, MESSAGE[:30_000], fin=False) + frame(OPCODE_CONTINUATION, MESSAGE[30_000:]),
    ):
        if cut >= len(wire):
            continue
        decoder = FrameDecoder(expect_masked=True, message_bytes_max=1 << 20)
        assert decoder.feed(wire[:cut]) == []
        assert 0 < decoder.unfinished_bytes <= cut
        decoder.abandon()
        assert decoder.unfinished_bytes <= 14  # at most an incomplete frame header is kept
        rest = wire[cut:] + frame(OPCODE_BINARY, b"later") + frame(OPCODE_PING, b"p")
        rest += frame(OPCODE_CLOSE, close_payload(1000, "bye"))
        events: list[object] = []
        for start in range(0, len(rest), split):
            events += decoder.feed(rest[start : start + split])
        assert events == [Ping(b"p"), Close(1000, "bye")]


async def parked(port: int, size: int) -> trio.SocketStream:
    """A session that sent all of a ``size``-byte message but its last 100 bytes."""
    stream = await open_raw(port, "/sleep")
    wire = frame(OPCODE_BINARY, b"x" * size)
    await stream.send_all(wire[:-100])
    return stream


async def close_code(stream: trio.SocketStream) -> int | None:
    decoder = FrameDecoder(expect_masked=False, message_bytes_max=1 << 20)
    with trio.move_on_after(10):
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return None
            for event in decoder.feed(data):
                if isinstance(event, Close):
                    return event.code
    return None


async def test_sessions_parking_unfinished_messages_share_one_budget(start_server: StartServer) -> None:
    """Eight sessions each park 400 KiB of an unfinished message on a port with a 1 MiB budget: the port
    never holds more than the budget (plus one read per session), the largest are closed with 1013, and a
    session sending small messages goes on."""
    sessions: list[WebSocket] = []
    never = trio.Event()
    srv = await start_server(
        sleeping_router(sessions, never), ws_received_bytes_in_flight_max=1 << 20, ws_frame_bytes_max=1 << 20
    )
    streams = []
    try:
        for _ in range(8):
            streams.append(await parked(srv.port, 400 * 1024))
            await trio.sleep(0.05)
        with trio.fail_after(10):
            while sum(s.closed for s in sessions) < 8 - 2 or len(sessions) < 8:
                await trio.sleep(0.01)
        held = sum(s.unfinished_bytes + s.receive_queue_bytes for s in sessions if not s.closed)
        assert held <= (1 << 20) + 8 * 65536
        codes = [await close_code(stream) for stream in streams[:6]]
        assert codes.count(CLOSE_TRY_AGAIN_LATER) >= 5, codes
    finally:
        never.set()
        for stream in streams:
            await stream.aclose()


async def test_a_message_that_never_ends_closes_with_1008(start_server: StartServer) -> None:
    sessions: list[WebSocket] = []
    never = trio.Event()
    srv = await start_server(sleeping_router(sessions, never), ws_message_timeout_ms=300)
    stream = await parked(srv.port, 10_000)
    try:
        assert await close_code(stream) == CLOSE_POLICY_VIOLATION
        assert sessions[0].close_reason == "message not complete within 300 ms"
        assert sessions[0].unfinished_bytes == 0
    finally:
        never.set()
        await stream.aclose()
