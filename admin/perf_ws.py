"""``magnetar perf produce`` / ``magnetar perf consume``: load over the WebSocket API (like ``pulsar-perf``).

produce: ``--producers`` connections publish ``--size``-byte messages, each keeping up to ``--max-pending``
unacknowledged (pipelining), at ``--rate`` messages/s in total (0: as fast as acks allow), until
``--messages`` were acknowledged or ``--duration-s`` passed. Latency is send -> ack ("ok" means stored with
the ack quorum). A closed connection (broker unloaded or died) is reopened through the same URL (the broker
redirects to the owner); the longest pause between two acks is reported as the failover gap.

consume: one consumer (``--subscription``, ``--subscription-type``) acknowledging every message; latency is
end to end, ``publishTime`` -> delivery (same machine clock, millisecond resolution).

``--protocol binary`` runs both over Magnetar's binary subprotocol ``magnetar.v1`` (see
:mod:`.perf_ws_binary`; ``--batch-size`` messages per SEND frame) instead of Pulsar's JSON API.

Both print throughput and latency percentiles every ``--report-interval-s`` and a summary at the end (the
last line is JSON, for scripts). The histogram keeps 3 significant digits (HdrHistogram-style buckets).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
import trio

from magnetar.admin import perf_ws_binary
from magnetar.admin.perf_common import messages_due
from magnetar.admin.process_common import tune_gc
from magnetar.admin.ws_client import WsClient, WsClosed, WsRejected
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.broker.binary_protocol import SUBPROTOCOL

SEND_BATCH_MAX = 100
"""Messages per socket write of the producer."""


_SCALES = ((10_000, 10), (100_000, 100), (1_000_000, 1_000), (10_000_000, 10_000))


def bucket_us(seconds: float) -> int:
    """A latency in microseconds, cut to 3 significant digits (the histogram's bucket)."""
    micros: int = int(seconds * 1e6)
    if micros < 1000:
        return micros if micros > 0 else 0
    for limit, scale in _SCALES:
        if micros < limit:
            return micros - micros % scale
    big_scale = int(10 ** (len(str(micros)) - 3))
    return micros - micros % big_scale


class Histogram:
    """Latencies in microseconds, bucketed to 3 significant digits."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max_us = 0

    def record(self, seconds: float) -> None:
        self.add(bucket_us(seconds))

    def add(self, micros: int, count: int = 1) -> None:
        """Count ``count`` latencies already cut by :func:`bucket_us`."""
        counts = self.counts
        counts[micros] = counts.get(micros, 0) + count
        self.total += count
        self.max_us = max(self.max_us, micros)

    def percentile_ms(self, pct: float) -> float:
        if not self.total:
            return math.nan
        wanted = math.ceil(self.total * pct / 100)
        seen = 0
        for value in sorted(self.counts):
            seen += self.counts[value]
            if seen >= wanted:
                return value / 1000
        return self.max_us / 1000

    def summary(self) -> dict[str, float]:
        return {f"p{p}": round(self.percentile_ms(p), 3) for p in (50, 95, 99, 99.9)} | {
            "max": self.max_us / 1000
        }


@dataclass
class Stats:
    started: float = field(default_factory=time.monotonic)
    count: int = 0
    errors: int = 0
    interval_count: int = 0
    histogram: Histogram = field(default_factory=Histogram)
    interval: Histogram = field(default_factory=Histogram)
    last_ack: float = 0.0
    max_gap_s: float = 0.0

    def record(self, latency_s: float, now: float, count: int = 1) -> None:
        """``count`` messages acknowledged (or received) at ``now`` (``time.monotonic``), ``latency_s``
        after they were sent."""
        if now != self.last_ack:
            if self.last_ack and now - self.last_ack > self.max_gap_s:
                self.max_gap_s = now - self.last_ack
            self.last_ack = now
        self.count += count
        self.interval_count += count
        micros = bucket_us(latency_s)
        self.histogram.add(micros, count)
        self.interval.add(micros, count)


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="ws://127.0.0.1:8080", help="broker URL (ws:// or http://)")
    parser.add_argument("--topic", required=True, help="persistent://tenant/ns/topic or tenant/ns/topic")
    parser.add_argument("--messages", type=int, default=0, help="stop after this many (0: run --duration-s)")
    parser.add_argument("--duration-s", type=float, default=30.0, help="stop after this long")
    parser.add_argument("--report-interval-s", type=float, default=5.0)
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("MAGNETAR_AUTH_TOKEN"),
        help="token for a broker with authentication: token:<jwt>, file:///path or the bare token "
        "(sent as the WebSocket API's token query parameter)",
    )
    parser.add_argument(
        "--protocol",
        default="json",
        choices=["json", "binary"],
        help="Pulsar's JSON API, or Magnetar's binary subprotocol magnetar.v1 (many messages per frame)",
    )


def _with_token(url: str, args: argparse.Namespace) -> str:
    if not args.auth_token:
        return url
    token = read_token_setting(args.auth_token, "--auth-token")
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'token': token})}"


def add_produce_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--rate", type=float, default=0.0, help="messages/s in total (0: unlimited)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--producers", type=int, default=1, help="producer connections")
    parser.add_argument("--max-pending", type=int, default=1000, help="unacked messages per producer")
    parser.add_argument("--batch-size", type=int, default=100, help="messages per SEND frame (binary)")


def add_consume_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--subscription", default="perf-sub")
    parser.add_argument(
        "--subscription-type", default="Exclusive", choices=["Exclusive", "Shared", "Failover", "Key_Shared"]
    )
    parser.add_argument("--initial-position", default="Earliest", choices=["Earliest", "Latest"])
    parser.add_argument("--receiver-queue-size", type=int, default=1000)


def _subprotocols(args: argparse.Namespace) -> list[str]:
    return [SUBPROTOCOL] if args.protocol == "binary" else []


def _path(topic: str) -> str:
    topic = topic.removeprefix("persistent://")
    parts = topic.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    return "persistent/" + "/".join(parts)


def _base(url: str) -> str:
    return "ws://" + url.split("://", 1)[-1].rstrip("/") if url.startswith("http") else url.rstrip("/")


def _report(kind: str, stats: Stats, since: float) -> None:
    elapsed = max(time.monotonic() - since, 1e-9)
    summary = stats.interval.summary()
    print(
        f"{kind}: {stats.interval_count / elapsed:,.0f} msg/s | total {stats.count:,} | "
        f"errors {stats.errors} | "
        f"latency ms p50 {summary['p50']} p95 {summary['p95']} p99 {summary['p99']} max {summary['max']}",
        flush=True,
    )
    stats.interval_count = 0
    stats.interval = Histogram()


async def _reporter(kind: str, stats: Stats, interval_s: float) -> None:
    while True:
        since = time.monotonic()
        await trio.sleep(interval_s)
        _report(kind, stats, since)


def _final(kind: str, stats: Stats, extra: dict[str, Any]) -> None:
    elapsed = time.monotonic() - stats.started
    result = {
        "kind": kind,
        "messages": stats.count,
        "errors": stats.errors,
        "elapsed_s": round(elapsed, 3),
        "rate_msg_s": round(stats.count / elapsed, 1) if elapsed else 0,
        "latency_ms": stats.histogram.summary(),
        "max_gap_s": round(stats.max_gap_s, 3),
        **extra,
    }
    print(json.dumps(result), flush=True)


# -- produce -----------------------------------------------------------------------------------------------


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats()
    url = _with_token(f"{_base(args.url)}/ws/v2/producer/{_path(args.topic)}", args)
    per_producer = args.messages // args.producers if args.messages else 0
    rate = args.rate / args.producers if args.rate else 0.0
    with trio.move_on_after(args.duration_s):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reporter, "produce", stats, args.report_interval_s)
            async with trio.open_nursery() as producers:
                for index in range(args.producers):
                    producers.start_soon(_producer, url, args, per_producer, rate, stats, index)
            nursery.cancel_scope.cancel()
    extra = {
        "size": args.size,
        "producers": args.producers,
        "target_rate": args.rate,
        "protocol": args.protocol,
    }
    _final("produce", stats, extra)
    return {"count": stats.count}


@dataclass
class _Progress:
    sent: int = 0


async def _producer(
    url: str, args: argparse.Namespace, messages: int, rate: float, stats: Stats, index: int
) -> None:
    progress = _Progress()
    raw = os.urandom(args.size)
    payload = base64.b64encode(raw).decode()
    window = args.max_pending
    while True:
        try:
            client = await WsClient.connect(url, subprotocols=_subprotocols(args))
        except (WsRejected, OSError, trio.TooSlowError) as exc:
            print(f"producer {index}: connect failed ({exc}); retrying", flush=True)
            await trio.sleep(0.2)
            continue
        try:
            if args.protocol == "binary":
                await perf_ws_binary.produce_on(
                    client, raw, messages, progress, rate, window, args.batch_size, stats
                )
            else:
                await _produce_on(client, payload, messages, progress, rate, window, stats)
            return
        except (WsClosed, OSError, trio.BrokenResourceError) as exc:
            print(f"producer {index}: connection lost ({exc}); reconnecting", flush=True)
        finally:
            await client.aclose()


async def _produce_on(
    client: WsClient, payload: str, messages: int, progress: _Progress, rate: float, window: int, stats: Stats
) -> None:
    in_flight: dict[str, float] = {}
    room = [trio.Event()]
    start = time.monotonic()
    first = progress.sent
    done = trio.Event()

    async def acks() -> None:
        try:
            while True:
                batch = await client.receive_batch()
                now = time.monotonic()
                for text in batch:
                    ack = orjson.loads(text)
                    sent_at = in_flight.pop(ack.get("context", ""), None)
                    if ack.get("result") == "ok" and sent_at is not None:
                        stats.record(now - sent_at, now)
                    else:
                        stats.errors += 1
                room[0].set()
                if messages and not in_flight and progress.sent >= messages:
                    done.set()
                    return
        except trio.Cancelled:
            raise  # the run's duration ended: what is still in flight is neither acked nor failed
        except BaseException:
            stats.errors += len(in_flight)  # the connection was lost: their outcome is unknown
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(acks)
        while not messages or progress.sent < messages:
            count = min(window - len(in_flight), SEND_BATCH_MAX)
            if messages:
                count = min(count, messages - progress.sent)
            if rate:
                count = min(count, await messages_due(rate, start, progress.sent - first))
            if count <= 0:
                room[0] = trio.Event()
                await room[0].wait()
                continue
            batch: list[str] = []
            now = time.monotonic()
            for _ in range(count):
                context = str(progress.sent)
                in_flight[context] = now
                batch.append(f'{{"payload":"{payload}","context":"{context}"}}')
                progress.sent += 1
            await client.send_many(batch)
        await done.wait()


# -- consume -----------------------------------------------------------------------------------------------


async def consume(args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats()
    query = (
        f"subscriptionType={args.subscription_type}&receiverQueueSize={args.receiver_queue_size}"
        f"&subscriptionInitialPosition={args.initial_position}"
    )
    url = _with_token(
        f"{_base(args.url)}/ws/v2/consumer/{_path(args.topic)}/{args.subscription}?{query}", args
    )
    with trio.move_on_after(args.duration_s):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reporter, "consume", stats, args.report_interval_s)
            while not args.messages or stats.count < args.messages:
                try:
                    client = await WsClient.connect(url, subprotocols=_subprotocols(args))
                except (WsRejected, OSError, trio.TooSlowError) as exc:
                    print(f"consumer: connect failed ({exc}); retrying", flush=True)
                    await trio.sleep(0.2)
                    continue
                try:
                    if args.protocol == "binary":
                        await perf_ws_binary.consume_on(client, args.messages, stats)
                    else:
                        await _consume_on(client, args.messages, stats)
                except (WsClosed, OSError, trio.BrokenResourceError) as exc:
                    print(f"consumer: connection lost ({exc}); reconnecting", flush=True)
                finally:
                    await client.aclose()
            nursery.cancel_scope.cancel()
    _final("consume", stats, {"protocol": args.protocol})
    return {"count": stats.count}


async def _consume_on(client: WsClient, messages: int, stats: Stats) -> None:
    while not messages or stats.count < messages:
        batch = await client.receive_batch()
        now = time.monotonic()
        wall_ms = time.time() * 1000
        acks: list[str] = []
        for text in batch:
            message = orjson.loads(text)
            message_id = message.get("messageId")
            if message_id is None:
                continue
            published = _parse_ms(message.get("publishTime", ""))
            stats.record(max(0.0, wall_ms - published) / 1000 if published else 0.0, now)
            acks.append(f'{{"messageId":"{message_id}"}}')
        if acks:
            await client.send_many(acks)


_PARSED: dict[str, int] = {}


def _parse_ms(text: str) -> int:
    """``publishTime`` -> epoch ms (cached: consecutive messages share their millisecond)."""
    from magnetar.broker.date_format import DateParseError, parse_timestamp  # noqa: PLC0415

    value = _PARSED.get(text)
    if value is None:
        try:
            value = parse_timestamp(text)
        except DateParseError:
            value = 0
        if len(_PARSED) > 10_000:
            _PARSED.clear()
        _PARSED[text] = value
    return value


def run_produce(args: argparse.Namespace) -> int:
    tune_gc()  # the load generator's own collections must not show up as the server's latency
    trio.run(produce, args)
    return 0


def run_consume(args: argparse.Namespace) -> int:
    tune_gc()
    trio.run(consume, args)
    return 0
