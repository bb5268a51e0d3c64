"""``magnetar perf produce|consume --protocol pulsar``: the same load over Pulsar's binary protocol, through
Apache's official client (``pulsar-client``, an optional dependency: without it the run stops at once with
"pip install pulsar-client").

The run is :mod:`.ws`'s - its :class:`~magnetar.admin.perf.ws.PerfRun`, progress lines every
``--report-interval-s``, closing JSON summary, exit codes, ``--messages`` / ``--duration-s`` / ``--rate`` /
``--producers`` / ``--max-pending`` / ``--topics`` - with the client in place of the WebSocket sessions:

* produce: one ``pulsar.Client`` per producer (its own connection, as ``pulsar-perf``'s ``-n``), a producer
  with ``pulsar-perf``'s knobs - batching on unless ``--disable-batching``, ``--batch-max-messages``,
  ``--batch-time-window-ms``, ``--compression`` (the client compresses; a broker that does not store
  compressed batches refuses them, and each refused message counts as an error, the first reason in the
  summary). ``send_async`` keeps at most ``--max-pending`` messages unacknowledged; the client's callback
  thread hands each result back to the trio loop (``TrioToken.run_sync_soon``). Latency: send -> receipt.
  The client reconnects by itself and sends again what was not acknowledged; a message it could not store
  within ``--reconnect-timeout-s`` (its send timeout) fails and counts as an error, and a producer that got
  no answer at all for that long stops the run (a broker that refuses a SEND with an error the client
  retries - compression it does not store - would otherwise keep it resending forever).
* consume: one client and consumer per topic (``--subscription``, ``--subscription-type``,
  ``--initial-position``, ``--receiver-queue-size``); a worker thread waits for a message, drains what else
  is queued and acknowledges each; latency is end to end, the message's publish time -> its receipt here
  (same machine clock, millisecond resolution).

``--url`` is the broker's ``pulsar://`` (or ``pulsar+ssl://``) URL, ``pulsar://127.0.0.1:6650`` by default;
``--auth-token`` is sent as the client's token authentication.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from magnetar.admin.perf.common import messages_due
from magnetar.admin.perf.ws import EXIT_USAGE, PerfRun, _execute, _quotas, _run
from magnetar.admin.perf.ws_connect import auth_token, topic_paths
from magnetar.admin.perf.ws_stats import PerfFailure, Stats

DEFAULT_URL = "pulsar://127.0.0.1:6650"
COMPRESSIONS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
RECEIVE_WAIT_MS = 200
DRAIN_MAX = 1000
MISSING = "--protocol pulsar needs Apache's Pulsar client: pip install pulsar-client"


def _pulsar() -> Any:
    """The ``pulsar`` module, or :class:`PerfFailure` naming the package to install."""
    try:
        import pulsar  # noqa: PLC0415 (optional dependency)
    except ImportError:
        raise PerfFailure(MISSING) from None
    return pulsar


def service_url(args: argparse.Namespace) -> str:
    url = str(args.url or DEFAULT_URL)
    if not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise PerfFailure(f"--protocol pulsar takes the broker's pulsar:// URL, not {url}")
    return url


def _topics(args: argparse.Namespace) -> list[str]:
    return [path.replace("/", "://", 1) for path in topic_paths(args)]


def _client(pulsar: Any, args: argparse.Namespace) -> Any:
    token = auth_token(args)
    timeout_s = max(1, int(args.reconnect_timeout_s))
    return pulsar.Client(
        service_url(args),
        authentication=pulsar.AuthenticationToken(token) if token else None,
        operation_timeout_seconds=timeout_s,
        connection_timeout_ms=timeout_s * 1000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )


def _check(args: argparse.Namespace) -> int | None:
    """A usage error before anything starts (the exit code), else None."""
    try:
        _pulsar()
        service_url(args)
    except PerfFailure as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return None


# -- produce -----------------------------------------------------------------------------------------------


async def produce(args: argparse.Namespace, run: PerfRun) -> None:
    topics = _topics(args)
    producers_total = args.producers * len(topics)
    rate = args.rate / producers_total if args.rate else 0.0
    run.extra = {
        "size": args.size,
        "producers": producers_total,
        "topics": len(topics),
        "target_rate": args.rate,
        "protocol": "pulsar",
        "batching": not args.disable_batching,
        "batch_max_messages": args.batch_max_messages,
        "compression": args.compression,
    }
    refusals: list[str] = []

    async def producers() -> None:
        async with trio.open_nursery() as nursery:
            for index, quota in enumerate(_quotas(args.messages, producers_total)):
                topic = topics[index % len(topics)]
                nursery.start_soon(_producer, topic, args, quota, rate, run.stats, refusals)

    try:
        await _run(run, args, producers)
    finally:
        if refusals:
            run.extra["first_error"] = refusals[0]


async def _producer(
    topic: str, args: argparse.Namespace, quota: int, rate: float, stats: Stats, refusals: list[str]
) -> None:
    """One client and producer: sends ``quota`` messages (0: until cancelled), at most ``--max-pending``
    unacknowledged."""
    pulsar = _pulsar()
    client = await trio.to_thread.run_sync(_client, pulsar, args)
    try:
        producer = await _create_producer(pulsar, client, topic, args)
        payload = os.urandom(args.size)
        window, give_up_after_s = args.max_pending, args.reconnect_timeout_s
        await _send_all(pulsar, producer, payload, quota, rate, window, give_up_after_s, stats, refusals)
        await trio.to_thread.run_sync(producer.flush, abandon_on_cancel=True)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)


async def _create_producer(pulsar: Any, client: Any, topic: str, args: argparse.Namespace) -> Any:
    options: dict[str, Any] = {
        "batching_enabled": not args.disable_batching,
        "batching_max_messages": args.batch_max_messages,
        "batching_max_publish_delay_ms": args.batch_time_window_ms,
        "compression_type": getattr(pulsar.CompressionType, args.compression),
        "max_pending_messages": args.max_pending,
        "block_if_queue_full": True,
        "send_timeout_millis": int(args.reconnect_timeout_s * 1000),
    }
    try:
        return await trio.to_thread.run_sync(partial(client.create_producer, topic, **options))
    except pulsar.PulsarException as exc:
        raise PerfFailure(f"producer on {topic}: {exc}") from None


async def _send_all(
    pulsar: Any,
    producer: Any,
    payload: bytes,
    quota: int,
    rate: float,
    window: int,
    give_up_after_s: float,
    stats: Stats,
    refusals: list[str],
) -> None:
    token = trio.lowlevel.current_trio_token()
    in_flight = 0
    sent = 0
    room = trio.Event()
    start = last_answer = time.monotonic()

    def done(sent_at: float, result: Any) -> None:  # on the trio thread
        nonlocal in_flight, last_answer
        in_flight -= 1
        now = last_answer = time.monotonic()
        if result == pulsar.Result.Ok:
            stats.record(now - sent_at, now)
        else:
            stats.errors += 1
            if not refusals:
                refusals.append(str(result))
        room.set()

    def callback(sent_at: float, result: Any, _message_id: Any) -> None:  # on a client thread
        with contextlib.suppress(trio.RunFinishedError):  # the run ended: nobody counts any more
            token.run_sync_soon(done, sent_at, result)

    send = producer.send_async
    while not quota or sent < quota or in_flight:
        count = window - in_flight
        if quota:
            count = min(count, quota - sent)
        if rate and count > 0:
            count = min(count, await messages_due(rate, start, sent))
        if count <= 0:
            room = trio.Event()
            with trio.move_on_after(give_up_after_s):
                await room.wait()
            if in_flight and time.monotonic() - last_answer >= give_up_after_s:
                raise PerfFailure(
                    f"{in_flight} messages without an answer for {give_up_after_s:g} s "
                    "(--reconnect-timeout-s); the client keeps sending them again (its log says why)"
                )
            continue
        now = time.monotonic()
        for _ in range(count):
            send(payload, partial(callback, now))
        in_flight += count
        sent += count
        await trio.lowlevel.checkpoint()


# -- consume -----------------------------------------------------------------------------------------------


async def consume(args: argparse.Namespace, run: PerfRun) -> None:
    topics = _topics(args)
    run.extra = {"protocol": "pulsar", "topics": len(topics)}
    quotas = _quotas(args.messages, len(topics)) if args.messages else [0] * len(topics)

    async def consumers() -> None:
        async with trio.open_nursery() as nursery:
            for topic, quota in zip(topics, quotas, strict=False):
                nursery.start_soon(_consumer, topic, args, quota, run.stats)

    await _run(run, args, consumers)


async def _consumer(topic: str, args: argparse.Namespace, quota: int, stats: Stats) -> None:
    pulsar = _pulsar()
    client = await trio.to_thread.run_sync(_client, pulsar, args)
    try:
        try:
            consumer = await trio.to_thread.run_sync(
                partial(
                    client.subscribe,
                    topic,
                    args.subscription,
                    consumer_type=getattr(pulsar.ConsumerType, args.subscription_type),
                    initial_position=getattr(pulsar.InitialPosition, args.initial_position),
                    receiver_queue_size=args.receiver_queue_size,
                )
            )
        except pulsar.PulsarException as exc:
            raise PerfFailure(f"consumer on {topic}: {exc}") from None
        received = 0
        while not quota or received < quota:
            want = DRAIN_MAX if not quota else min(DRAIN_MAX, quota - received)
            times = await trio.to_thread.run_sync(
                _receive_and_ack, pulsar, consumer, want, abandon_on_cancel=True
            )
            now = time.monotonic()
            wall = time.time()
            for published_ms in times:
                stats.record(max(0.0, wall - published_ms / 1000), now)
            received += len(times)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)


def _receive_and_ack(pulsar: Any, consumer: Any, most: int) -> list[int]:
    """Wait (bounded) for one message, take what else is queued (up to ``most``), acknowledge each; their
    publish times (epoch ms)."""
    try:
        messages = [consumer.receive(timeout_millis=RECEIVE_WAIT_MS)]
    except pulsar.Timeout:
        return []
    while len(messages) < most:
        try:
            messages.append(consumer.receive(timeout_millis=0))
        except pulsar.Timeout:
            break
    for message in messages:
        consumer.acknowledge(message)
    return [message.publish_timestamp() for message in messages]


# -- entry points ------------------------------------------------------------------------------------------


def _entry(kind: str, main: Callable[[argparse.Namespace, PerfRun], Any], args: argparse.Namespace) -> int:
    code = _check(args)
    if code is not None:
        return code
    return _execute(PerfRun(kind, args.messages), main, args)


def run_produce(args: argparse.Namespace) -> int:
    return _entry("produce", produce, args)


def run_consume(args: argparse.Namespace) -> int:
    return _entry("consume", consume, args)
