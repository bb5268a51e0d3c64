"""``magnetar perf produce|consume --protocol binary``: the load of :mod:`.ws` over the ``magnetar.v1``
binary subprotocol (:mod:`magnetar.broker.wire.magnetar_v1`).

produce: each SEND frame carries up to ``--batch-size`` messages, and at most ``--max-pending`` messages are
unacknowledged; a RECEIPT acknowledges its frame's messages, whose latency is send -> receipt. A failed
RECEIPT counts its frame's messages as errors, and with code 8 sends them again (as the JSON producer does).
consume: every MESSAGES frame is acknowledged with one ACK_RANGE per partition (first to last position it
carried); latency is ``publishTime`` -> delivery.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import trio

from magnetar.admin.perf.common import messages_due
from magnetar.bookkeeper.runtime.http import WsClient, connection_loss
from magnetar.broker.wire.magnetar_v1 import (
    FrameType,
    Position3,
    encode_ack_ranges,
    encode_send,
    parse_receipt,
    scan_messages,
)

if TYPE_CHECKING:
    from magnetar.admin.perf.ws_stats import SendProgress, Stats

_request_ids = itertools.count(1)


class _Window:
    """SEND frames in flight: request id -> (sent at, messages), and the room they leave."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_flight: dict[int, tuple[float, int]] = {}
        self.messages = 0
        self.room = trio.Event()

    def sent(self, request_id: int, count: int) -> None:
        self.in_flight[request_id] = (time.monotonic(), count)
        self.messages += count

    def settle(self, frames: list[str | bytes], progress: SendProgress, stats: Stats) -> None:
        now = time.monotonic()
        for frame in frames:
            if not isinstance(frame, bytes):
                continue
            receipt = parse_receipt(frame)
            found = self.in_flight.pop(receipt.request_id, None)
            if found is None:
                continue  # not an answer to a frame of this connection
            sent_at, count = found
            self.messages -= count
            if receipt.ok:
                stats.record(now - sent_at, now, count)
                progress.acknowledged()
            else:
                progress.refused(count, receipt.error_code, receipt.reason, stats)
        self.room.set()

    async def wait_for_room(self) -> None:
        self.room = trio.Event()
        await self.room.wait()


async def produce_on(
    client: WsClient,
    payload: bytes,
    messages: int,
    progress: SendProgress,
    rate: float,
    batch_size: int,
    stats: Stats,
) -> None:
    window = _Window(progress.window)
    start = time.monotonic()
    first = progress.sent

    async def receipts() -> None:
        while True:
            window.settle(await client.receive_batch(), progress, stats)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receipts)
            while True:
                count = min(window.size - window.messages, batch_size)
                if messages:
                    if progress.sent >= messages and not window.in_flight:
                        break  # every message acknowledged (or refused for good)
                    count = min(count, messages - progress.sent)
                if rate and count > 0:
                    count = min(count, await messages_due(rate, start, progress.sent - first))
                if count <= 0:
                    await window.wait_for_room()
                    continue
                await progress.pause_before_resending()
                request_id = next(_request_ids)
                window.sent(request_id, count)
                progress.sent += count
                await client.send_bytes(encode_send(request_id, [payload] * count))
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        lost = connection_loss(group)
        if lost is None:
            raise
        progress.rewind(window.messages, stats)  # their outcome is unknown: send them again
        raise lost from None


async def consume_on(client: WsClient, messages: int, stats: Stats) -> None:
    while not messages or stats.count < messages:
        batch = await client.receive_batch()
        now = time.monotonic()
        wall_ms = time.time() * 1000
        spans: dict[int, tuple[Position3, Position3]] = {}
        for frame in batch:
            if not isinstance(frame, bytes) or frame[:1] != bytes((FrameType.MESSAGES,)):
                continue
            for partition, ledger, entry, index, published in scan_messages(frame):
                stats.record(max(0.0, wall_ms - published) / 1000, now)
                position = (ledger, entry, index)
                span = spans.get(partition)
                if span is None:
                    spans[partition] = (position, position)
                else:
                    spans[partition] = (min(span[0], position), max(span[1], position))
        if spans:
            ranges = [(partition, low, high) for partition, (low, high) in spans.items()]
            await client.send_bytes(encode_ack_ranges(ranges))
