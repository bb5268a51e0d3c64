"""Publishing a delayed message (the core's side, whatever protocol it came in): the deliver-at time resolved
at publish, the layout that keeps it alone in its entry, the maximum delay of the policy."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.broker.core.errors import DeliveryDelayTooLongError, ErrorKind
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.publish import COMPACT_ALONE, MESSAGES, DelayedLayout, PublishRequest
from magnetar.broker.core.topic_limits import TopicLimits
from magnetar.broker.wire import StoredMessage, decode_entry

NOW_MS = 1_800_000_000_000


class Clock:
    def time_ms(self) -> int:
        return NOW_MS

    def monotonic(self) -> float:
        return 0.0


class Target:
    def __init__(self, limits: TopicLimits) -> None:
        self.limits = limits
        self.requests: list[PublishRequest] = []

    def publish(self, request: PublishRequest) -> None:
        self.requests.append(request)


class Completion:
    def stored(self, *args: Any) -> None:
        pass

    def failed(self, *args: Any) -> None:
        pass


def publish(limits: TopicLimits, **delay: int) -> PublishRequest:
    target = Target(limits)
    producer = Producer(target, "p", Capacity(10), partition=-1, clock=Clock())
    message = StoredMessage(b"x", "p", 0, 0)
    producer.publish_delayed(MESSAGES, message, 1, 1, Completion(), None, 0.0, **delay)
    (request,) = target.requests
    return request


@pytest.mark.parametrize(
    ("delay", "deliver_at"),
    [
        ({"deliver_at_ms": NOW_MS + 5}, NOW_MS + 5),
        ({"deliver_after_ms": 1500}, NOW_MS + 1500),
        ({"deliver_at_ms": NOW_MS + 5, "deliver_after_ms": 1500}, NOW_MS + 1500),  # after wins, as in Java
        ({"deliver_after_ms": 2**63 - 1}, 2**63 - 1),  # capped, not wrapped
        ({"deliver_at_ms": 2**63 - 1}, 2**63 - 1),
    ],
)
def test_a_delayed_message_goes_alone_with_its_time(delay: dict[str, int], deliver_at: int) -> None:
    request = publish(TopicLimits(), **delay)
    layout = request.layout
    assert isinstance(layout, DelayedLayout)
    assert layout.alone
    assert layout.deliver_at_ms == deliver_at
    data, batched = layout.encode([request], 1, NOW_MS)
    assert not batched
    assert decode_entry(data).deliver_at_ms == deliver_at


@pytest.mark.parametrize(
    "delay",
    [{}, {"deliver_at_ms": NOW_MS}, {"deliver_at_ms": -5}, {"deliver_at_ms": -(2**63)},
     {"deliver_after_ms": -1}, {"deliver_after_ms": 0, "deliver_at_ms": 1}],
)  # fmt: skip
def test_a_time_not_after_now_is_no_delay(delay: dict[str, int]) -> None:
    assert publish(TopicLimits(), **delay).layout is MESSAGES


def test_the_maximum_delay_refuses_before_anything_is_published() -> None:
    limits = TopicLimits(delayed_delivery_max_delay_ms=1000)
    assert isinstance(publish(limits, deliver_after_ms=1000).layout, DelayedLayout)
    with pytest.raises(
        DeliveryDelayTooLongError, match="Exceeds max allowed delivery delay of 1000 milliseconds"
    ):
        publish(limits, deliver_after_ms=1001)
    assert DeliveryDelayTooLongError.kind is ErrorKind.NOT_ALLOWED
    # Pulsar checks it only while delayed delivery is on
    off = TopicLimits(delayed_delivery_enabled=False, delayed_delivery_max_delay_ms=1000)
    assert isinstance(publish(off, deliver_after_ms=10_000).layout, DelayedLayout)


def test_a_compact_send_keeps_its_messages() -> None:
    target = Target(TopicLimits())
    producer = Producer(target, "p", Capacity(10), partition=-1, clock=Clock())
    body = bytes.fromhex("01000000ffff00000000000000000000") + b"y"  # one compact message, no key
    producer.publish_delayed(COMPACT_ALONE, body, 1, 1, Completion(), None, 0.0, deliver_at_ms=NOW_MS + 9)
    (request,) = target.requests
    data, batched = request.layout.encode([request], 1, NOW_MS)
    entry = decode_entry(data)
    assert (batched, entry.deliver_at_ms, [m.payload for m in entry.messages]) == (True, NOW_MS + 9, [b"y"])
