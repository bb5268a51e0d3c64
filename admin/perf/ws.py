"""``magnetar perf produce`` / ``magnetar perf consume``: load over the WebSocket API (like ``pulsar-perf``).

produce: ``--producers`` connections publish ``--size``-byte messages, each keeping up to ``--max-pending``
unacknowledged (pipelining), at ``--rate`` messages/s in total (0: as fast as acks allow). With
``--messages N`` it runs until N messages are acknowledged (shared out between the producers, the remainder
to the first ones); without, until ``--duration-s`` (30 s) passed. ``--duration-s`` also bounds a run with
``--messages`` when given. Latency is send -> ack ("ok" means stored with the ack quorum). Every refused
message counts as an error. A closed connection (broker
unloaded or died) is reopened through the same URL (the broker redirects to the owner) and the messages
still unacknowledged on it are sent again (``resent``: their first copy may be stored too), as are messages
the broker refused with ``send-error:8`` (its producer or topic closed under them); the longest pause
between two acks is reported as the failover gap.

consume: one consumer (``--subscription``, ``--subscription-type``) acknowledging every message, until
``--messages`` were received or ``--duration-s`` passed; latency is end to end, ``publishTime`` -> delivery
(same machine clock, millisecond resolution).

``--topics N`` spreads the load over N topics named ``<topic>-0`` .. ``<topic>-(N-1)`` (``pulsar-perf``'s
``--num-topic`` naming): ``--producers`` producers per topic, one consumer per topic; ``--messages`` and
``--rate`` stay totals. ``--lookup`` connects each session to its topic's owner, found by the broker's lookup
(``GET /lookup/v2/topic/...``, following its redirects), as a Pulsar client does, instead of to ``--url``
(which then serves it through itself or redirects); it looks up again on every reconnect.

``--protocol binary`` runs both over Magnetar's binary subprotocol ``magnetar.v1`` (see
:mod:`.ws_binary`; ``--batch-size`` messages per SEND frame) instead of Pulsar's JSON API; ``--protocol
pulsar`` over Pulsar's binary protocol with the official client (:mod:`.pulsar_perf`).

Failures that retrying cannot fix stop the run at once with the broker's reason on stderr and exit code 1:
an upgrade refused with 400, 401 (authentication), 403 (authorization), 404, 405 or 412, a session closed
for authentication or authorization (4005, 4006). Other refusals (409, 429, 5xx) and lost connections are
retried until ``--reconnect-timeout-s`` passes without a connection, and refused messages until it passes
without an acknowledgement. The exit code is 0
when the run ended as asked (every one of ``--messages`` acknowledged, or the duration passed), 1 otherwise,
130 on Ctrl-C (the summary is printed all the same).

Both print throughput and latency percentiles every ``--report-interval-s`` and a summary at the end (the
last line on stdout is JSON, for scripts: :mod:`.ws_stats`). The arguments are :mod:`.ws_args`'; connecting
(lookup, token, retries) is :mod:`.ws_connect`'s.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from magnetar.admin.perf import ws_binary as perf_ws_binary
from magnetar.admin.perf.common import messages_due
from magnetar.admin.perf.ws_args import DEFAULT_DURATION_S, DEFAULT_WS_URL
from magnetar.admin.perf.ws_connect import Session, auth_token, check_close, connect, topic_paths
from magnetar.admin.perf.ws_stats import PerfFailure, SendProgress, Stats, report_line, summary_line
from magnetar.admin.processes.process_common import tune_gc
from magnetar.bookkeeper.runtime.auth.errors import KeyConfigError
from magnetar.bookkeeper.runtime.http import WsClient, WsClosed, connection_loss

SEND_BATCH_MAX = 100
"""Messages per socket write of the producer."""
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


# -- a run ---------------------------------------------------------------------------------------------


def _duration_s(args: argparse.Namespace) -> float:
    if args.duration_s is None:
        return math.inf if args.messages else DEFAULT_DURATION_S
    return math.inf if args.duration_s == 0 else float(args.duration_s)


@dataclass
class PerfRun:
    """One run's figures and outcome, kept outside ``trio.run`` so Ctrl-C still prints the summary."""

    kind: str
    target: int
    stats: Stats = field(default_factory=Stats)
    extra: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    duration_ended: bool = False

    def outcome(self, interrupted: bool = False) -> tuple[str, int]:
        if interrupted:
            return "interrupted", EXIT_INTERRUPTED
        if self.failure is not None:
            return "failed", EXIT_FAILED
        if self.target and self.stats.count < self.target:
            return ("duration ended" if self.duration_ended else "refused messages"), EXIT_FAILED
        return "completed", EXIT_OK

    def finish(self, interrupted: bool = False) -> int:
        outcome, code = self.outcome(interrupted)
        if self.failure is not None:
            print(f"error: {self.failure}", file=sys.stderr, flush=True)
        elif code == EXIT_FAILED:
            print(
                f"error: {self.kind}: {self.stats.count:,} of {self.target:,} messages "
                f"{'acknowledged' if self.kind == 'produce' else 'received'} ({outcome})",
                file=sys.stderr,
                flush=True,
            )
        extra = {**self.extra, "target_messages": self.target or None, "outcome": outcome}
        print(summary_line(self.kind, self.stats, extra), flush=True)
        return code


async def _reporter(kind: str, stats: Stats, interval_s: float) -> None:
    while True:
        since = time.monotonic()
        await trio.sleep(interval_s)
        print(report_line(kind, stats, since), flush=True)


async def _run(run: PerfRun, args: argparse.Namespace, body: Callable[[], Any]) -> None:
    """Run ``body`` (the producers or the consumer) with the reporter, within the duration; a
    :class:`PerfFailure` ends the run at once and is kept in ``run.failure``."""
    try:
        with trio.move_on_after(_duration_s(args)) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_reporter, run.kind, run.stats, args.report_interval_s)
                await body()
                nursery.cancel_scope.cancel()
        run.duration_ended = scope.cancelled_caught
    except* PerfFailure as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        run.failure = str(leaf)


# -- produce -----------------------------------------------------------------------------------------------


def _quotas(messages: int, producers: int) -> list[int]:
    """Each producer's share of ``messages`` (0 each: no count); producers without a share do not start."""
    if not messages:
        return [0] * producers
    share, extra = divmod(messages, producers)
    return [share + (1 if i < extra else 0) for i in range(min(producers, messages))]


async def produce(args: argparse.Namespace, run: PerfRun) -> None:
    sessions = [Session(topic, f"/ws/v2/producer/{topic}") for topic in topic_paths(args)]
    producers_total = args.producers * len(sessions)
    rate = args.rate / producers_total if args.rate else 0.0
    run.extra = {
        "size": args.size,
        "producers": producers_total,
        "topics": len(sessions),
        "target_rate": args.rate,
        "protocol": args.protocol,
    }

    async def producers() -> None:
        async with trio.open_nursery() as nursery:
            for index, quota in enumerate(_quotas(args.messages, producers_total)):
                session = sessions[index % len(sessions)]
                nursery.start_soon(_producer, session, args, quota, rate, run.stats, index)

    await _run(run, args, producers)


async def _producer(
    session: Session, args: argparse.Namespace, quota: int, rate: float, stats: Stats, index: int
) -> None:
    """One producer: sends ``quota`` messages (0: until cancelled); reconnects when the connection is lost."""
    who = f"producer {index}"
    progress = SendProgress(who, args.max_pending, args.reconnect_timeout_s)
    raw = os.urandom(args.size)
    payload = base64.b64encode(raw).decode()
    while True:
        client = await connect(session, args, who)
        try:
            if args.protocol == "binary":
                await perf_ws_binary.produce_on(client, raw, quota, progress, rate, args.batch_size, stats)
            else:
                await _produce_on(client, payload, quota, progress, rate, stats)
            return
        except (WsClosed, OSError, trio.BrokenResourceError) as exc:
            check_close(exc, who)
            print(f"{who}: connection lost ({exc}); reconnecting", flush=True)
        finally:
            await client.aclose()


def _send_error_code(result: str) -> int:
    code = result.removeprefix("send-error:")
    return int(code) if code.isdigit() else 0


async def _produce_on(
    client: WsClient, payload: str, quota: int, progress: SendProgress, rate: float, stats: Stats
) -> None:
    in_flight: dict[str, float] = {}
    contexts = itertools.count()
    room = [trio.Event()]
    start = time.monotonic()
    first = progress.sent

    async def acks() -> None:
        while True:
            batch = await client.receive_batch()
            now = time.monotonic()
            for text in batch:
                ack = orjson.loads(text)
                sent_at = in_flight.pop(str(ack.get("context", "")), None)
                if sent_at is None:
                    continue  # not an answer to a message of this connection
                result = str(ack.get("result", ""))
                if result == "ok":
                    stats.record(now - sent_at, now)
                    progress.acknowledged()
                else:
                    progress.refused(1, _send_error_code(result), str(ack.get("errorMsg", "")), stats)
            room[0].set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            while True:
                count = min(progress.window - len(in_flight), SEND_BATCH_MAX)
                if quota:
                    if progress.sent >= quota and not in_flight:
                        break  # every message of the quota acknowledged (or refused for good)
                    count = min(count, quota - progress.sent)
                if rate and count > 0:
                    count = min(count, await messages_due(rate, start, progress.sent - first))
                if count <= 0:
                    room[0] = trio.Event()
                    await room[0].wait()
                    continue
                await progress.pause_before_resending()
                batch: list[str] = []
                now = time.monotonic()
                for _ in range(count):
                    context = str(next(contexts))
                    in_flight[context] = now
                    batch.append(f'{{"payload":"{payload}","context":"{context}"}}')
                progress.sent += count
                await client.send_many(batch)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        lost = connection_loss(group)
        if lost is None:
            raise
        progress.rewind(len(in_flight), stats)  # their outcome is unknown: send them again
        raise lost from None


# -- consume -----------------------------------------------------------------------------------------------


async def consume(args: argparse.Namespace, run: PerfRun) -> None:
    query = (
        f"subscriptionType={args.subscription_type}&receiverQueueSize={args.receiver_queue_size}"
        f"&subscriptionInitialPosition={args.initial_position}"
    )
    tail = f"/{args.subscription}?{query}"
    sessions = [Session(topic, f"/ws/v2/consumer/{topic}{tail}") for topic in topic_paths(args)]
    run.extra = {"protocol": args.protocol, "topics": len(sessions)}
    stats = run.stats

    async def consumer(session: Session, who: str, done: trio.CancelScope) -> None:
        while not args.messages or stats.count < args.messages:
            client = await connect(session, args, who)
            try:
                if args.protocol == "binary":
                    await perf_ws_binary.consume_on(client, args.messages, stats)
                else:
                    await _consume_on(client, args.messages, stats)
            except (WsClosed, OSError, trio.BrokenResourceError) as exc:
                check_close(exc, who)
                print(f"{who}: connection lost ({exc}); reconnecting", flush=True)
            finally:
                await client.aclose()
        done.cancel()  # --messages received in all: the other topics' consumers stop too

    async def consumers() -> None:
        async with trio.open_nursery() as nursery:
            for index, session in enumerate(sessions):
                who = "consumer" if len(sessions) == 1 else f"consumer {index}"
                nursery.start_soon(consumer, session, who, nursery.cancel_scope)

    await _run(run, args, consumers)


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
    from magnetar.broker.wire import DateParseError, parse_timestamp  # noqa: PLC0415

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


# -- entry points ------------------------------------------------------------------------------------------


def _execute(
    run: PerfRun, main: Callable[[argparse.Namespace, PerfRun], Any], args: argparse.Namespace
) -> int:
    try:
        auth_token(args)  # a token file that cannot be read is a usage error, before anything starts
    except KeyConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    tune_gc()  # the load generator's own collections must not show up as the server's latency
    try:
        trio.run(main, args, run)
    except KeyboardInterrupt:
        return run.finish(interrupted=True)
    except BaseExceptionGroup as group:  # Ctrl-C reached a task: it comes out of the nurseries in a group
        interrupted, rest = group.split(KeyboardInterrupt)
        if interrupted is None or rest is not None:
            raise
        return run.finish(interrupted=True)
    return run.finish()


def run_produce(args: argparse.Namespace) -> int:
    args.url = args.url or DEFAULT_WS_URL
    return _execute(PerfRun("produce", args.messages), produce, args)


def run_consume(args: argparse.Namespace) -> int:
    args.url = args.url or DEFAULT_WS_URL
    return _execute(PerfRun("consume", args.messages), consume, args)
