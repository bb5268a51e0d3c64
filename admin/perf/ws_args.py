"""The command line of ``magnetar perf produce`` / ``magnetar perf consume`` (:mod:`.ws`): their arguments and
the parsers that check each value (a count, a number of seconds, a rate) with a message naming what it must
be."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

DEFAULT_WS_URL = "ws://127.0.0.1:8080"
DEFAULT_DURATION_S = 30.0
"""How long a run without ``--messages`` lasts unless ``--duration-s`` says otherwise."""
TOPICS_MAX = 10_000
"""``--topics`` at most (one producer or consumer task per topic at least)."""


def _number(
    kind: Callable[[str], Any], low: float, what: str, high: float = math.inf
) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high or (isinstance(value, float) and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


COUNT = _number(int, 0, "a whole number >= 0")
POSITIVE = _number(int, 1, "a whole number >= 1")
SECONDS = _number(float, 0.0, "a number of seconds >= 0")
POSITIVE_SECONDS = _number(float, 0.001, "a number of seconds >= 0.001")
RATE = _number(float, 0.0, "a rate >= 0")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=None,
        help=f"broker URL: ws:// or http:// ({DEFAULT_WS_URL} when unset); with --protocol pulsar its "
        "pulsar:// URL (pulsar://127.0.0.1:6650 when unset)",
    )
    parser.add_argument(
        "--topic", required=True, help="persistent://tenant/ns/topic, tenant/ns/topic or topic"
    )
    parser.add_argument(
        "--messages",
        type=COUNT,
        default=0,
        help="run until this many messages are acknowledged (produce) or received (consume); 0: no count",
    )
    parser.add_argument(
        "--duration-s",
        type=SECONDS,
        default=None,
        help=f"stop after this long; unset: {DEFAULT_DURATION_S:g} s without --messages, no limit with it; "
        "0: no limit",
    )
    parser.add_argument(
        "--report-interval-s", type=POSITIVE_SECONDS, default=5.0, help="seconds between progress lines"
    )
    parser.add_argument(
        "--reconnect-timeout-s",
        type=POSITIVE_SECONDS,
        default=60.0,
        help="give up (exit 1) when no connection could be made, or the broker refused every message, "
        "for this long",
    )
    parser.add_argument(
        "--auth-token",
        default=None,
        help="token for a broker with authentication: token:<jwt>, file:///path or the bare token (sent as "
        "the WebSocket API's token query parameter); unset: $MAGNETAR_AUTH_TOKEN, else none",
    )
    parser.add_argument(
        "--protocol",
        default="json",
        choices=["json", "binary", "pulsar"],
        help="Pulsar's JSON API, Magnetar's binary subprotocol magnetar.v1 (many messages per frame), or "
        "Pulsar's binary protocol through the official client (pip install pulsar-client)",
    )
    parser.add_argument(
        "--topics",
        type=_number(int, 1, f"a number of topics from 1 to {TOPICS_MAX:,}", TOPICS_MAX),
        default=1,
        help="spread the load over this many topics, <topic>-0 .. <topic>-(N-1) (1: --topic itself)",
    )
    parser.add_argument(
        "--lookup",
        action="store_true",
        help="connect each session to its topic's owner found by the broker's lookup, as a Pulsar client "
        "does, instead of to --url",
    )


def add_produce_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument(
        "--rate", type=RATE, default=0.0, help="messages/s in total; 0: as fast as acks allow"
    )
    parser.add_argument("--size", type=COUNT, default=100, help="payload bytes of every message")
    parser.add_argument("--producers", type=POSITIVE, default=1, help="producer connections")
    parser.add_argument("--max-pending", type=POSITIVE, default=1000, help="unacked messages per producer")
    parser.add_argument(
        "--batch-size", type=POSITIVE, default=100, help="messages per SEND frame (--protocol binary only)"
    )
    pulsar = parser.add_argument_group("--protocol pulsar (as pulsar-perf produce)")
    pulsar.add_argument(
        "--disable-batching", action="store_true", help="one message per SEND (batching is on by default)"
    )
    pulsar.add_argument(
        "--batch-max-messages", type=POSITIVE, default=1000, help="messages one client batch holds at most"
    )
    pulsar.add_argument(
        "--batch-time-window-ms",
        type=_number(int, 0, "a whole number of milliseconds >= 0"),
        default=1,
        help="how long the client waits to fill a batch",
    )
    pulsar.add_argument(
        "--compression",
        default="NONE",
        choices=["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"],
        help="compression of each batch, by the client (a broker that stores no compressed batches refuses "
        "them: each counts as an error)",
    )


def add_consume_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--subscription", default="perf-sub", help="subscription name")
    parser.add_argument(
        "--subscription-type",
        default="Exclusive",
        choices=["Exclusive", "Shared", "Failover", "Key_Shared"],
        help="subscription type",
    )
    parser.add_argument(
        "--initial-position",
        default="Earliest",
        choices=["Earliest", "Latest"],
        help="where a new subscription starts",
    )
    parser.add_argument(
        "--receiver-queue-size", type=COUNT, default=1000, help="messages delivered ahead of acks (max 1000)"
    )
