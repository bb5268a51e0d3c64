"""Rate limits of the topic policies (Pulsar's ``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate``, ``subscribeRate``), sans-IO: every call is given the time (seconds, any
monotonic origin) and nothing here sleeps; the callers (:class:`~.producer.Capacity`, the dispatcher, the
topic) wait.

The bucket (:class:`RateBucket`): ``rate_per_s`` tokens a second, refilled continuously up to ``capacity``
(one period's worth: the burst a quiet topic may take at once), starting full. Its balance may go negative:
a publish is never refused, it is taken whole and the producers wait until the balance is back above zero.

Publish (:class:`PublishThrottle`, one per topic): up to two buckets, messages and payload bytes. Each
publish is recorded; once a bucket is in debt the producer's session reads no more requests until the debt
is paid back and a little more (``RESUME_S`` worth of tokens, so a throttled producer wakes once per few
milliseconds, not once per message) - Pulsar pauses the connection's reads the same way. What a producer
admits over ``t`` seconds is at most ``capacity + rate * t`` plus its last request.

Dispatch (:class:`DispatchLimiter`, one per topic shared by its subscriptions and one per subscription): a
read asks :func:`dispatch_allowance` for the messages it may read (the tokens left in every limiter of the
subscription); with none left it is rescheduled after :func:`dispatch_wait_s`. What was dispatched is then
taken from each limiter (:func:`dispatch_consumed`), bytes included, so a read larger than the byte tokens
left puts that bucket in debt and the next read waits. Each read a limiter cuts short or holds back counts
once in the subscription's :class:`ThrottledEvents`, by dimension (messages, bytes) and by the limiter's
``reason`` (``"topic"``, ``"subscription"``) - Pulsar's ``dispatchThrottled{Msg,Bytes}EventsBy*Limit``.

Subscribe (:class:`SubscribeLimiter`, one per topic): a bucket of ``count`` tokens per ``period_s`` for each
consumer (its client address and name), at most ``SUBSCRIBE_KEYS_MAX`` of them (least recently used
forgotten); an empty bucket refuses the subscribe.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

RESUME_S = 0.01
"""A paused producer resumes once its topic's buckets hold this many seconds of tokens again."""
REASON_SUBSCRIPTION = "subscription"
REASON_TOPIC = "topic"
REASON_BROKER = "broker"
REASONS = (REASON_SUBSCRIPTION, REASON_TOPIC, REASON_BROKER)
"""Whose dispatch rate held a read back (Pulsar's ``reason`` label and ``By*Limit`` stats)."""
THROTTLED_STATS_FIELDS = tuple(
    f"dispatchThrottled{dimension}EventsBy{reason.capitalize()}Limit"
    for reason in REASONS
    for dimension in ("Msg", "Bytes")
)
"""The subscription stats fields of :class:`ThrottledEvents`, in Pulsar's order."""
SUBSCRIBE_KEYS_MAX = 10_000
"""Consumers (address and name) whose subscribe rate one topic tracks at once."""


class RateBucket:
    """``rate_per_s`` tokens a second up to ``capacity``; the balance may go below zero."""

    __slots__ = ("_at", "capacity", "rate_per_s", "tokens")

    def __init__(self, rate_per_s: float, capacity: float, now: float | None = None) -> None:
        """``now`` None: the clock starts at the first call (a bucket made where no clock is at hand)."""
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"rate_per_s must be positive and finite, not {rate_per_s}")
        if not capacity > 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.rate_per_s = rate_per_s
        self.capacity = capacity
        self.tokens = capacity
        self._at = now

    def refill(self, now: float) -> float:
        """The balance at ``now`` (a time before the last one seen adds nothing)."""
        if self._at is None:
            self._at = now
        elapsed = now - self._at
        if elapsed > 0:
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
            self._at = now
        return self.tokens

    def take(self, n: float, now: float) -> float:
        """Take ``n`` tokens whatever the balance; the balance left (negative: in debt)."""
        self.tokens = self.refill(now) - n
        return self.tokens

    def take_up_to(self, n: float, now: float) -> float:
        """Take at most ``n`` tokens, never more than the balance; how many were taken."""
        granted = max(0.0, min(n, self.refill(now)))
        self.tokens -= granted
        return granted

    def wait_s(self, now: float, above: float = 0.0) -> float:
        """Seconds until the balance exceeds ``above`` (0 when it does now)."""
        missing = min(above, self.capacity) - self.refill(now)
        return 0.0 if missing < 0 else missing / self.rate_per_s + 1e-6


def _bucket(rate: float, period_s: float, now: float | None) -> RateBucket | None:
    return RateBucket(rate / period_s, rate, now) if rate > 0 else None


class PublishThrottle:
    """A topic's publish rate: ``msgs_per_s`` messages and ``bytes_per_s`` payload bytes a second (a
    dimension at 0 or below is off)."""

    __slots__ = ("_buckets", "bytes_per_s", "limited_times", "msgs_per_s")

    def __init__(self, msgs_per_s: int, bytes_per_s: int, now: float | None = None) -> None:
        self.msgs_per_s = msgs_per_s
        self.bytes_per_s = bytes_per_s
        msgs = _bucket(msgs_per_s, 1.0, now)
        size = _bucket(bytes_per_s, 1.0, now)
        self._buckets = (msgs, size)
        self.limited_times = 0
        """Publishes that found the topic over its rate (Pulsar's ``publishRateLimitedTimes``)."""

    def record(self, messages: int, payload_bytes: int, now: float) -> bool:
        """A publish of ``messages`` messages, ``payload_bytes`` bytes: True when the topic is now over its
        rate (the producer's session must pause, :meth:`pause_s`)."""
        msgs, size = self._buckets
        over = False
        if msgs is not None and msgs.take(messages, now) < 0:
            over = True
        if size is not None and size.take(payload_bytes, now) < 0:
            over = True
        if over:
            self.limited_times += 1
        return over

    def pause_s(self, now: float) -> float:
        """Seconds a paused producer still waits (0: it may go on)."""
        wait = 0.0
        for bucket in self._buckets:
            if bucket is not None:
                wait = max(wait, bucket.wait_s(now, bucket.rate_per_s * RESUME_S))
        return wait


@dataclass(frozen=True, slots=True)
class DispatchLimit:
    """A dispatch rate in the core's terms: messages and bytes per ``period_s`` (a dimension at 0 or below
    is off); ``relative``: the topic's last publish rate is added."""

    msgs: int
    bytes: int
    period_s: int = 1
    relative: bool = False


class DispatchLimiter:
    """The buckets of one dispatch rate (a topic's, shared by its subscriptions, or a subscription's)."""

    __slots__ = ("buckets", "limit", "reason")

    def __init__(
        self,
        limit: DispatchLimit,
        now: float | None = None,
        publish_rate: tuple[float, float] = (0.0, 0.0),
        *,
        reason: str = REASON_SUBSCRIPTION,
    ) -> None:
        self.limit = limit
        self.reason = reason
        """Whose rate it is (:data:`REASON_TOPIC`, :data:`REASON_SUBSCRIPTION`): the stats' ``By*Limit``."""
        period = max(1, limit.period_s)
        msgs, size = float(limit.msgs), float(limit.bytes)
        if limit.relative:  # the publish rate is per second; the limit per period
            msgs = msgs + publish_rate[0] * period if msgs > 0 else msgs
            size = size + publish_rate[1] * period if size > 0 else size
        self.buckets = (_bucket(msgs, period, now), _bucket(size, period, now))
        """Messages, bytes (None: that dimension is off)."""


class ThrottledEvents:
    """One subscription's reads held back or cut short by a dispatch rate, by dimension and by whose rate
    (Pulsar's subscription stats ``dispatchThrottled{Msg,Bytes}EventsBy{Subscription,Topic,Broker}Limit``;
    Magnetar has no broker-wide dispatch rate, so the broker's stay 0)."""

    __slots__ = ("bytes", "msgs")

    def __init__(self) -> None:
        self.msgs: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.bytes: dict[str, int] = dict.fromkeys(REASONS, 0)

    def stats(self) -> dict[str, int]:
        """The six stats fields under Pulsar's names (:data:`THROTTLED_STATS_FIELDS`)."""
        counts = [(self.msgs[reason], self.bytes[reason]) for reason in REASONS]
        values = [count for pair in counts for count in pair]
        return dict(zip(THROTTLED_STATS_FIELDS, values, strict=True))


def dispatch_allowance(
    limiters: tuple[DispatchLimiter, ...], wanted: int, now: float, events: ThrottledEvents | None = None
) -> int:
    """How many of ``wanted`` messages may be read now (0: none, wait :func:`dispatch_wait_s`); a limiter
    that cuts the read counts in ``events`` (its message or its byte bucket, or both)."""
    allowed = wanted
    for limiter in limiters:
        msgs, size = limiter.buckets
        by_msgs = allowed
        if msgs is not None:
            by_msgs = min(allowed, math.floor(msgs.refill(now)))
        by_bytes = size is not None and size.refill(now) <= 0
        if events is not None:
            if by_msgs < allowed:
                events.msgs[limiter.reason] += 1
            if by_bytes:
                events.bytes[limiter.reason] += 1
        allowed = 0 if by_bytes else max(0, by_msgs)
    return allowed


def dispatch_wait_s(limiters: tuple[DispatchLimiter, ...], now: float) -> float:
    """Seconds until every limiter has a message's and a byte's worth of tokens."""
    wait = 0.0
    for limiter in limiters:
        msgs, size = limiter.buckets
        if msgs is not None:
            wait = max(wait, msgs.wait_s(now, 1.0 - 1e-9))
        if size is not None:
            wait = max(wait, size.wait_s(now))
    return wait


def dispatch_consumed(limiters: tuple[DispatchLimiter, ...], messages: int, size: int, now: float) -> None:
    """``messages`` messages of ``size`` bytes were dispatched: taken from every limiter."""
    for limiter in limiters:
        msgs, size_bucket = limiter.buckets
        if msgs is not None:
            msgs.take(messages, now)
        if size_bucket is not None:
            size_bucket.take(size, now)


class SubscribeLimiter:
    """``count`` subscribes per ``period_s`` for each consumer key (bounded, see the module's doc)."""

    __slots__ = ("_buckets", "count", "keys_max", "period_s")

    def __init__(self, count: int, period_s: int, *, keys_max: int = SUBSCRIBE_KEYS_MAX) -> None:
        if count <= 0 or period_s <= 0 or keys_max <= 0:
            raise ValueError("count, period_s and keys_max must be positive")
        self.count = count
        self.period_s = period_s
        self.keys_max = keys_max
        self._buckets: OrderedDict[str, RateBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def try_subscribe(self, key: str, now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.keys_max:
                self._buckets.popitem(last=False)
            bucket = self._buckets[key] = RateBucket(self.count / self.period_s, self.count, now)
        else:
            self._buckets.move_to_end(key)
        if bucket.refill(now) < 1:
            return False
        bucket.take(1, now)
        return True
