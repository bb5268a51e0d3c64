"""What one consumer session may make the broker hold: its outbound queue bounded in messages and bytes
(whatever permits the client grants), and the messages it has not acknowledged."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import PERMITS_MAX, Delivery, FlowControl
from magnetar.broker.protocols.pulsar_ws.session_io import JsonFrames
from magnetar.broker.wire.entry_format import StoredMessage


class SlowSocket:
    """Stands in for the WebSocket: takes a batch only when the test lets it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.gate = trio.Event()

    async def send_many(self, batch: list[bytes], *, text: bool, now: bool = False) -> None:
        await self.gate.wait()
        self.gate = trio.Event()
        self.sent.extend(batch)


def consumer(frames: JsonFrames, flow: FlowControl, **bounds: int) -> Consumer:
    return Consumer(
        name="c",
        priority_level=0,
        partition=-1,
        flow=flow,
        sink=frames,
        **bounds,
    )


def delivery(entry_id: int, size: int = 10) -> Delivery:
    return Delivery(1, entry_id, -1, 0, StoredMessage(b"x" * size, "p", 0, 0, 0, None))


def test_a_full_outbound_queue_leaves_no_room_whatever_the_permits() -> None:
    frames = JsonFrames(bytes_max=10_000, messages_max=5)
    flow = FlowControl(0, pull_mode=True)
    flow.grant(PERMITS_MAX)
    c = consumer(frames, flow)
    assert c.available() == 5  # the permits a dispatcher may use at once: the room in the queue
    for i in range(5):
        c.push(delivery(i), 0, 0.0)
    assert frames.full
    assert c.available() == 0
    assert flow.available() == PERMITS_MAX - 5  # the permits themselves are kept


def test_bytes_fill_the_queue_before_the_count() -> None:
    frames = JsonFrames(bytes_max=1000, messages_max=1000)
    c = consumer(frames, FlowControl(1000, pull_mode=False))
    pushed = 0
    before = 0
    while not c.saturated():
        before = frames.bytes
        c.push(delivery(pushed, size=300), 0, 0.0)
        pushed += 1
    assert before < 1000 <= frames.bytes  # the message that crossed the bound is the last one
    assert pushed < 10
    assert c.available() == 0


def test_permits_held_are_capped_at_a_java_int() -> None:
    flow = FlowControl(0, pull_mode=True)
    for _ in range(3):
        flow.grant(PERMITS_MAX)
    assert flow.available() == PERMITS_MAX


def test_unacknowledged_messages_are_bounded_in_count_and_bytes() -> None:
    flow = FlowControl(0, pull_mode=True)
    flow.grant(1000)
    woken: list[int] = []
    flow.add_listener(lambda: woken.append(1))
    c = consumer(JsonFrames(), flow, unacked_messages_max=3, unacked_bytes_max=1_000_000)
    for i in range(3):
        c.push(delivery(i), 0, 0.0)
    assert c.available() == 0  # pull mode: permits left, but three unacknowledged
    c.take_pending((1, 0, -1))  # an ack: below the bound again, and the dispatchers are told
    assert c.available() == 1
    assert woken

    big = consumer(JsonFrames(), FlowControl(1000, pull_mode=False), unacked_bytes_max=2500)
    for i in range(3):
        big.push(delivery(i, size=1000), 0, 0.0)
    assert big.pending_bytes == 3000
    assert big.saturated()
    assert big.available() == 0
    big.take_pending((1, 1, -1))
    assert big.pending_bytes == 2000
    assert big.available() > 0
    big.clear_pending()
    assert big.pending_bytes == 0


async def test_room_returns_once_the_socket_took_the_queue() -> None:
    frames = JsonFrames(bytes_max=10_000, messages_max=3)
    socket = SlowSocket()
    woken: list[int] = []
    frames.add_listener(lambda: woken.append(1))
    for i in range(3):
        frames.push(b"frame %d" % i)
    assert frames.full
    waited = trio.Event()

    async def wait_then_mark() -> None:
        await frames.wait_for_room()
        waited.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(frames.run, cast(Any, socket))
        nursery.start_soon(wait_then_mark)
        await trio.testing.wait_all_tasks_blocked()
        assert not waited.is_set()  # the batch is with the socket, not taken yet: still counted
        assert frames.full
        socket.gate.set()
        with trio.fail_after(5):
            await waited.wait()
        assert not frames.full
        assert (frames.messages, frames.bytes) == (0, 0)
        assert woken == [1]
        frames.close()
        socket.gate.set()
    assert socket.sent == [b"frame 0", b"frame 1", b"frame 2"]
