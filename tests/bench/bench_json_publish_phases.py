"""The broker's Pulsar JSON publish path in process, per phase: frame decode, JSON + base64 parse, the
producer's handler (parse, publish, batcher), the entry encode and the receipts - without sockets or bookies
(a ledger that completes each add when told). Best of ``--reads`` reads of ``--frames`` masked publish
frames of ``--size``-byte payloads, µs per message.

    .venv/bin/python tests/bench/bench_json_publish_phases.py [--reads 80] [--frames 370] [--size 100]

With ``PYTHONPATH`` pointing at another build (see ``ab_standalone.py``) it measures that build, if its
adapter has the same shape (a per-frame handler, as before the per-read one, is driven frame by frame).
"""

from __future__ import annotations

import argparse
import base64
import time
from collections.abc import Callable
from typing import Any

import trio

from magnetar.bookkeeper.runtime import SystemClock
from magnetar.bookkeeper.runtime.http.ws_frames import OPCODE_TEXT, FrameDecoder, encode_frame
from magnetar.broker.core import Capacity, Producer
from magnetar.broker.core.publish_queue import PublishQueue
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.protocols.adapter import ProducerSession
from magnetar.broker.protocols.pulsar_ws import messages
from magnetar.broker.protocols.pulsar_ws.adapter import PulsarWsAdapter
from magnetar.broker.protocols.pulsar_ws.session_io import JsonFrames
from magnetar.managed_ledger.position import Position


class Settings:
    publish_batch_messages_max = 1000
    publish_batch_bytes_max = 128 * 1024
    publish_inflight_entries_max = 1
    publish_pipeline_batch_messages_min = 32


class Ledger:
    """Keeps each add's callback; :meth:`complete` stores them all."""

    def __init__(self) -> None:
        self.pending: list[Callable[[Position], None]] = []
        self.entry = 0

    def add_entry_nowait(self, data: bytes, callback: Callable[[Position], None], messages: int = 1) -> None:
        self.pending.append(callback)

    def complete(self) -> None:
        pending, self.pending = self.pending, []
        for callback in pending:
            self.entry += 1
            callback(Position(3, self.entry))


async def measure(reads: int, count: int, size: int) -> dict[str, float]:
    payload = base64.b64encode(bytes(i % 256 for i in range(size))).decode()
    texts = [f'{{"payload":"{payload}","context":"{i}"}}' for i in range(100_000, 100_000 + count)]
    wire = b"".join(encode_frame(OPCODE_TEXT, text.encode(), mask_key=b"abcd") for text in texts)
    ledger = Ledger()
    clock = SystemClock()
    queue = PublishQueue(
        "bench", ledger, Settings(), clock, TopicMetrics(), on_stored=lambda: None, on_fenced=lambda: None
    )
    capacity = Capacity(1 << 30)
    producer = Producer(queue, "p", capacity, partition=-1, clock=clock)
    frames = JsonFrames(messages_max=1 << 30, bytes_max=1 << 40)  # the acks stay queued: a few MB

    async def refusal(messages: int) -> str | None:
        return None

    fields: dict[str, Any] = {
        "frames": frames,
        "publisher": producer,
        "capacity": capacity,
        "refusal": refusal,
        "batch_messages_max": 1000,
        "batch_bytes_max": 1 << 20,
    }
    per_read = "unrestricted" in ProducerSession.__dataclass_fields__
    if per_read:
        fields["unrestricted"] = lambda: True
    handler: Any = PulsarWsAdapter().producer(ProducerSession(**fields))
    parse_batch = getattr(messages, "parse_publish_batch", None)
    decoder = FrameDecoder(expect_masked=True, message_bytes_max=5 << 20, message_fragments_max=1000)
    best: dict[str, float] = {}
    for _ in range(reads):
        t0 = time.perf_counter()
        batch = decoder.feed(wire)
        t1 = time.perf_counter()
        if parse_batch is not None:
            parse_batch(batch)
        else:
            for message in batch:
                messages.parse_publish_request(message)  # type: ignore[arg-type]
        t2 = time.perf_counter()
        if per_read:
            await handler(batch)
        else:
            for message in batch:
                await handler(message)
        t3 = time.perf_counter()
        ledger.complete()
        ledger.complete()
        t4 = time.perf_counter()
        for phase, seconds in (
            ("frame decode", t1 - t0),
            ("JSON + base64 parse", t2 - t1),
            ("handler: parse + publish + batcher", t3 - t2),
            ("entry encode + receipts", t4 - t3),
        ):
            best[phase] = min(best.get(phase, 1e9), seconds / count * 1e6)
    best["total"] = (
        best["frame decode"] + best["handler: parse + publish + batcher"] + best["entry encode + receipts"]
    )
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reads", type=int, default=80)
    parser.add_argument("--frames", type=int, default=370)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    figures = trio.run(measure, args.reads, args.frames, args.size)
    for phase, us in figures.items():
        print(f"{phase:40s} {us:6.3f} us/msg")


if __name__ == "__main__":
    main()
