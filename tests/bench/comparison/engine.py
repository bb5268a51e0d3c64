"""The measurements, written once for every system (anyio: trio for Magnetar's clients, asyncio for peers).

A system (see :mod:`.system`) gives a *publisher* - ``send_many([(seq, payload), ...])`` hands messages to
its client, and the client calls ``on_ack(seq, ok)`` on the event loop when the server acknowledged each
one - and a *consumer* that reads a topic from its first message and calls ``on_payload(payload)`` for each.
Every phase uses one producer connection and one consumer, and the same window of unacknowledged messages
(``window``); at most ``BATCH_MAX`` messages are handed over per call, so clients that can write several
messages at once (Redis pipelining, WebSocket frames, RabbitMQ publish frames) do.

* publish throughput: ``count`` messages pipelined with the window, until all are acknowledged;
  rate = acknowledged / (last ack - first send). Bounded by ``time_limit_s``. Message ``i`` carries ``i``.
* consume throughput: read what the publish phase stored; rate = (n - 1) / (last - first delivery), ``n``
  counting distinct messages: the sequence numbers they carry tell redeliveries (counted apart, not as
  throughput) and messages skipped.
* publish latency at a fixed rate: open loop, message ``i`` is due at ``start + i / rate``; latency runs from
  that due time to its ack, so a client that falls behind (window full, slow server) shows it in its
  latency instead of silently sending later (no coordinated omission). Achieved rate = acked / elapsed.
* end-to-end latency: the same fixed-rate publisher while a consumer, subscribed first, receives; latency =
  delivery time - due time carried in the payload's first 8 bytes (one process, one monotonic clock). A
  delivery whose due time is not after the previous one's is a redelivery: counted, not timed.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import time
from dataclasses import dataclass

import anyio
from bench.comparison.figures import Latency, Throughput
from bench.comparison.system import System

from magnetar.admin.perf.ws_stats import Histogram

BATCH_MAX = 100
"""Messages handed to a client per call (one socket write where the client can)."""
PROGRESS_INTERVAL_S = 2.0
STAMP = struct.Struct("<Q")
"""The payload starts with the message's due time (monotonic ns); the rest is filler up to ``size``."""


def make_payload(size: int, stamp_ns: int) -> bytes:
    if size < STAMP.size:
        raise ValueError(f"a payload needs at least {STAMP.size} bytes for its timestamp, got {size}")
    return STAMP.pack(stamp_ns) + b"m" * (size - STAMP.size)


def payload_stamp(payload: bytes) -> int:
    stamp: int = STAMP.unpack_from(payload)[0]
    return stamp


class Window:
    """At most ``size`` messages sent and not yet acknowledged."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_flight = 0
        self._room = anyio.Event()

    async def room(self) -> int:
        while self.in_flight >= self.size:
            self._room = anyio.Event()
            await self._room.wait()
        return self.size - self.in_flight

    def take(self, count: int) -> None:
        self.in_flight += count

    def release(self) -> None:
        self.in_flight -= 1
        self._room.set()


class Progress:
    """A progress line at most every ``PROGRESS_INTERVAL_S`` (long runs must show life)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._last = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < PROGRESS_INTERVAL_S:
            return False
        self._last = now
        return True

    def show(self, text: str) -> None:
        print(f"    [{self.label}] {text}", flush=True)


@dataclass
class _Acks:
    count: int = 0
    errors: int = 0
    first_send: float = 0.0
    last_ack: float = 0.0


async def publish_throughput(
    system: System, topic: str, size: int, count: int, window: int, time_limit_s: float
) -> Throughput:
    acks = _Acks()
    room = Window(window)
    all_acked = anyio.Event()
    progress = Progress(f"{system.name} publish {size} B")

    def on_ack(_seq: int, ok: bool) -> None:
        room.release()
        if ok:
            acks.count += 1
            acks.last_ack = time.monotonic()
        else:
            acks.errors += 1
        if acks.count + acks.errors >= count:
            all_acked.set()

    async with system.publisher(topic, on_ack) as publisher:
        with anyio.move_on_after(time_limit_s):
            acks.first_send = time.monotonic()
            sent = 0
            while sent < count:
                batch = min(await room.room(), BATCH_MAX, count - sent)
                room.take(batch)
                await publisher.send_many(
                    [(seq, make_payload(size, seq)) for seq in range(sent, sent + batch)]
                )
                sent += batch
                if progress.due():
                    progress.show(f"sent {sent:,} acked {acks.count:,}")
            await all_acked.wait()
    elapsed = (acks.last_ack or time.monotonic()) - acks.first_send
    return Throughput(count=acks.count, elapsed_s=elapsed, errors=acks.errors, complete=acks.count == count)


@dataclass
class _Deliveries:
    """Sequence numbers seen by a consumer that should see 0, 1, 2, ... once each."""

    next_seq: int = 0
    distinct: int = 0
    duplicates: int = 0
    skipped: int = 0
    first: float = 0.0
    last: float = 0.0

    def see(self, seq: int) -> None:
        if seq < self.next_seq:
            self.duplicates += 1
            return
        self.skipped += seq - self.next_seq
        self.next_seq = seq + 1
        self.last = time.monotonic()
        if not self.distinct:
            self.first = self.last
        self.distinct += 1


async def consume_throughput(system: System, topic: str, count: int, time_limit_s: float) -> Throughput:
    seen = _Deliveries()
    progress = Progress(f"{system.name} consume")

    def on_payload(payload: bytes) -> bool:
        seen.see(payload_stamp(payload))
        if progress.due():
            progress.show(f"received {seen.distinct:,} (+{seen.duplicates:,} redelivered)")
        return seen.next_seq < count

    with anyio.move_on_after(time_limit_s):
        async with anyio.create_task_group() as tasks:
            await tasks.start(system.consume, topic, on_payload)
    return Throughput(
        count=seen.distinct,
        elapsed_s=seen.last - seen.first,
        skipped=seen.skipped,
        complete=seen.distinct >= count,
        intervals=seen.distinct - 1,
        duplicates=seen.duplicates,
    )


@dataclass
class _RateRun:
    histogram: Histogram
    send_lag: Histogram
    acked: int = 0
    errors: int = 0
    sent: int = 0
    last_ack_ns: int = 0


async def _publish_at_rate(
    system: System, topic: str, size: int, rate: float, total: int, window: int, time_limit_s: float
) -> tuple[_RateRun, int]:
    """Publish ``total`` messages due at ``rate``; returns the run and its start (monotonic ns)."""
    run = _RateRun(Histogram(), Histogram())
    due_ns: dict[int, int] = {}
    room = Window(window)
    all_acked = anyio.Event()
    interval_ns = 1e9 / rate
    progress = Progress(f"{system.name} {size} B at {rate:,.0f}/s")

    def on_ack(seq: int, ok: bool) -> None:
        now = time.monotonic_ns()
        room.release()
        due = due_ns.pop(seq, None)
        if ok and due is not None:
            run.acked += 1
            run.last_ack_ns = now
            run.histogram.record((now - due) / 1e9)
        else:
            run.errors += 1
        if run.acked + run.errors >= total:
            all_acked.set()

    start = time.monotonic_ns()
    async with system.publisher(topic, on_ack) as publisher:
        with anyio.move_on_after(time_limit_s):
            start = time.monotonic_ns()
            while run.sent < total:
                now = time.monotonic_ns()
                due = min(total, int((now - start) / interval_ns) + 1) - run.sent
                if due <= 0:
                    await anyio.sleep((start + run.sent * interval_ns - now) / 1e9)
                    continue
                batch_size = min(due, await room.room(), BATCH_MAX)
                batch = []
                for seq in range(run.sent, run.sent + batch_size):
                    stamp = start + int(seq * interval_ns)
                    due_ns[seq] = stamp
                    batch.append((seq, make_payload(size, stamp)))
                room.take(batch_size)
                run.send_lag.record((time.monotonic_ns() - due_ns[run.sent]) / 1e9)
                await publisher.send_many(batch)
                run.sent += batch_size
                if progress.due():
                    progress.show(f"sent {run.sent:,} acked {run.acked:,}")
            await all_acked.wait()
    return run, start


def _latency(run: _RateRun, rate: float, total: int, start_ns: int, histogram: Histogram) -> Latency:
    elapsed_s = (run.last_ack_ns - start_ns) / 1e9 if run.last_ack_ns else math.nan
    return Latency(
        target_rate=rate,
        achieved_rate=run.acked / elapsed_s if run.acked and elapsed_s > 0 else 0.0,
        p50_ms=histogram.percentile_ms(50),
        p99_ms=histogram.percentile_ms(99),
        p999_ms=histogram.percentile_ms(99.9),
        max_ms=histogram.max_us / 1000 if histogram.total else math.nan,
        count=histogram.total,
        expected=total,
        errors=run.errors,
        send_lag_p99_ms=run.send_lag.percentile_ms(99),
    )


async def publish_latency(
    system: System, topic: str, size: int, rate: float, duration_s: float, window: int, drain_s: float
) -> Latency:
    total = max(1, int(rate * duration_s))
    run, start = await _publish_at_rate(system, topic, size, rate, total, window, duration_s + drain_s)
    return _latency(run, rate, total, start, run.histogram)


async def end_to_end_latency(
    system: System, topic: str, size: int, rate: float, duration_s: float, window: int, drain_s: float
) -> Latency:
    total = max(1, int(rate * duration_s))
    delivered = Histogram()
    all_delivered = anyio.Event()
    latest = -1
    duplicates = 0

    def on_payload(payload: bytes) -> bool:
        nonlocal latest, duplicates
        due = payload_stamp(payload)
        if due <= latest:
            duplicates += 1
            return True
        latest = due
        delivered.record((time.monotonic_ns() - due) / 1e9)
        if delivered.total >= total:
            all_delivered.set()
            return False
        return True

    async with anyio.create_task_group() as tasks:
        await tasks.start(system.consume, topic, on_payload)
        run, start = await _publish_at_rate(system, topic, size, rate, total, window, duration_s + drain_s)
        with anyio.move_on_after(drain_s):
            await all_delivered.wait()
        tasks.cancel_scope.cancel()
    return dataclasses.replace(_latency(run, rate, total, start, delivered), duplicates=duplicates)
