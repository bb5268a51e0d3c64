"""The comparison's measurement phases against an in-memory system (no server, no timing assertions)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from bench.comparison import engine
from bench.comparison.system import AckSink, PayloadSink, Publisher


class MemoryPublisher:
    def __init__(self, system: MemorySystem, topic: str, on_ack: AckSink, tasks: anyio.abc.TaskGroup) -> None:
        self.system = system
        self.topic = topic
        self.on_ack = on_ack
        self.tasks = tasks

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        self.system.in_flight += len(messages)
        self.system.most_in_flight = max(self.system.most_in_flight, self.system.in_flight)
        self.system.batch_sizes.append(len(messages))
        self.system.topics[self.topic] += [payload for _, payload in messages]
        self.system.stored.set()
        self.system.stored = anyio.Event()
        self.tasks.start_soon(self._acknowledge, [seq for seq, _ in messages])

    async def _acknowledge(self, seqs: list[int]) -> None:
        await anyio.lowlevel.checkpoint()
        for seq in seqs:
            self.system.in_flight -= 1
            self.on_ack(seq, not self.system.fail)


class MemorySystem:
    """Stores each batch at once and acknowledges it a scheduling round later; consumers read the lists."""

    name = "memory"
    backend = "trio"
    durability = "memory"
    durability_detail = "a Python list"
    consume_mode = "iterates the list"
    how = "in this process"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.topics: defaultdict[str, list[bytes]] = defaultdict(list)
        self.in_flight = 0
        self.most_in_flight = 0
        self.batch_sizes: list[int] = []
        self.stored = anyio.Event()

    def available(self) -> str | None:
        return None

    def versions(self) -> dict[str, str]:
        return {}

    def start(self, workdir: Path) -> None:
        pass

    def stop(self) -> None:
        pass

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        async with anyio.create_task_group() as tasks:
            yield MemoryPublisher(self, topic, on_ack, tasks)

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        index = 0
        while True:
            stored = self.topics[topic]
            if index == len(stored):
                await self.stored.wait()
                continue
            index += 1
            if not on_payload(stored[index - 1]):
                return


def test_a_payload_carries_its_due_time_and_has_the_requested_size() -> None:
    payload = engine.make_payload(100, 123_456_789)
    assert len(payload) == 100
    assert engine.payload_stamp(payload) == 123_456_789
    with pytest.raises(ValueError, match="at least 8 bytes"):
        engine.make_payload(4, 0)


async def test_publish_throughput_acknowledges_every_message_within_the_window() -> None:
    system = MemorySystem()
    figure = await engine.publish_throughput(system, "t", 100, count=5_000, window=250, time_limit_s=60)
    assert figure.count == 5_000
    assert figure.complete
    assert figure.errors == 0
    assert len(system.topics["t"]) == 5_000
    assert system.most_in_flight <= 250
    assert max(system.batch_sizes) <= engine.BATCH_MAX


async def test_failed_acks_are_errors_not_throughput() -> None:
    figure = await engine.publish_throughput(MemorySystem(fail=True), "t", 100, 300, 100, 60)
    assert (figure.count, figure.errors, figure.complete) == (0, 300, False)


async def test_consume_throughput_reads_what_was_published() -> None:
    system = MemorySystem()
    system.topics["t"] = [engine.make_payload(100, seq) for seq in range(2_000)]
    figure = await engine.consume_throughput(system, "t", 2_000, time_limit_s=60)
    assert (figure.count, figure.intervals, figure.complete) == (2_000, 1_999, True)


async def test_consume_counts_redeliveries_and_skipped_messages_apart() -> None:
    system = MemorySystem()
    system.topics["t"] = [engine.make_payload(100, seq) for seq in (0, 1, 1, 2, 0, 4, 5)]
    figure = await engine.consume_throughput(system, "t", 6, time_limit_s=60)
    assert (figure.count, figure.duplicates, figure.skipped, figure.complete) == (5, 2, 1, False)


async def test_published_messages_carry_their_sequence_numbers() -> None:
    system = MemorySystem()
    await engine.publish_throughput(system, "t", 100, count=300, window=100, time_limit_s=60)
    assert [engine.payload_stamp(p) for p in system.topics["t"]] == list(range(300))


async def test_fixed_rate_publishes_rate_times_duration_messages() -> None:
    system = MemorySystem()
    figure = await engine.publish_latency(
        system, "t", 100, rate=4_000, duration_s=0.05, window=50, drain_s=10
    )
    assert figure.expected == 200
    assert figure.count == 200
    assert len(system.topics["t"]) == 200
    assert system.most_in_flight <= 50
    assert figure.p50_ms <= figure.p99_ms <= figure.p999_ms <= figure.max_ms


async def test_end_to_end_delivers_every_message_to_the_consumer_subscribed_first() -> None:
    system = MemorySystem()
    figure = await engine.end_to_end_latency(
        system, "t", 100, rate=4_000, duration_s=0.05, window=50, drain_s=10
    )
    assert (figure.count, figure.expected) == (200, 200)
    stamps = [engine.payload_stamp(p) for p in system.topics["t"]]
    assert stamps == sorted(stamps)
