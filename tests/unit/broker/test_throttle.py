"""The rate limits' sans-IO core (:mod:`magnetar.broker.core.throttle`) with a fake clock: what each bucket
admits over any run of requests and times, and the pause / allowance / refusal the callers act on."""

from __future__ import annotations

import math

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.core.producer import Capacity
from magnetar.broker.core.throttle import (
    RESUME_S,
    DispatchLimit,
    DispatchLimiter,
    PublishThrottle,
    RateBucket,
    SubscribeLimiter,
    ThrottledEvents,
    dispatch_allowance,
    dispatch_consumed,
    dispatch_wait_s,
)

steps = st.lists(st.tuples(st.floats(0, 2, allow_nan=False), st.integers(1, 50)), min_size=1, max_size=200)
"""(seconds since the previous request, its size)."""


@settings(max_examples=300, deadline=None)
@given(rate=st.floats(0.5, 10_000), capacity=st.floats(1, 10_000), requests=steps)
def test_take_up_to_never_grants_more_than_rate_times_elapsed_plus_burst(
    rate: float, capacity: float, requests: list[tuple[float, int]]
) -> None:
    now = 100.0
    bucket = RateBucket(rate, capacity, now)
    granted = 0.0
    elapsed = 0.0
    for gap, size in requests:
        elapsed += gap
        granted += bucket.take_up_to(size, now + elapsed)
        assert granted <= rate * elapsed + capacity + 1e-6 * max(1.0, granted)


@settings(max_examples=300, deadline=None)
@given(rate=st.integers(1, 10_000), requests=steps)
def test_paused_producer_admits_at_most_rate_times_elapsed_plus_burst_plus_its_last_request(
    rate: int, requests: list[tuple[float, int]]
) -> None:
    """A producer that honours the pause (publishes only when ``pause_s`` is 0) gets at most one second's
    tokens plus ``rate * elapsed``, plus the request that went over."""
    throttle = PublishThrottle(rate, 0, 0.0)
    now = 0.0
    admitted = 0
    for gap, size in requests:
        now += gap
        wait = throttle.pause_s(now)
        now += wait
        assert throttle.pause_s(now) == 0
        throttle.record(size, 0, now)
        admitted += size
        assert admitted <= rate * now + rate + size + 1e-6 * admitted


def test_publish_throttle_pauses_in_debt_and_resumes_with_a_little_margin() -> None:
    throttle = PublishThrottle(100, 0, 0.0)
    assert not throttle.record(100, 10, 0.0)  # one second's worth: the bucket starts full
    assert throttle.limited_times == 0
    assert throttle.record(1, 10, 0.0)
    assert throttle.limited_times == 1
    wait = throttle.pause_s(0.0)
    assert wait == pytest.approx(0.01 + RESUME_S, abs=1e-4)  # the debt of 1 message, then 10 ms worth
    assert throttle.pause_s(wait) == 0


def test_publish_throttle_by_bytes_only() -> None:
    throttle = PublishThrottle(0, 1000, 0.0)
    assert not throttle.record(10_000, 1000, 0.0)  # messages are not limited
    assert throttle.record(1, 500, 0.0)
    assert throttle.pause_s(0.0) == pytest.approx(0.5 + RESUME_S, abs=1e-4)


def test_bucket_started_without_a_clock_starts_at_its_first_use() -> None:
    bucket = RateBucket(10, 10)
    assert bucket.take(10, 5_000.0) == 0
    assert bucket.refill(5_000.5) == pytest.approx(5)


def test_bucket_ignores_time_going_backwards_and_refuses_bad_rates() -> None:
    bucket = RateBucket(10, 10, 10.0)
    bucket.take(10, 10.0)
    assert bucket.refill(9.0) == 0
    for rate in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match="rate_per_s"):
            RateBucket(rate, 1, 0.0)
    with pytest.raises(ValueError, match="capacity"):
        RateBucket(1, 0, 0.0)


def test_dispatch_allowance_is_capped_by_every_limiter_and_waits_when_empty() -> None:
    topic = DispatchLimiter(DispatchLimit(msgs=100, bytes=0), 0.0, reason="topic")
    subscription = DispatchLimiter(DispatchLimit(msgs=10, bytes=0, period_s=2), 0.0)
    chain = (topic, subscription)
    events = ThrottledEvents()
    assert dispatch_allowance(chain, 50, 0.0, events) == 10
    assert events.stats()["dispatchThrottledMsgEventsBySubscriptionLimit"] == 1
    assert events.stats()["dispatchThrottledMsgEventsByTopicLimit"] == 0
    dispatch_consumed(chain, 10, 1000, 0.0)
    assert dispatch_allowance(chain, 50, 0.0, events) == 0
    assert events.stats()["dispatchThrottledMsgEventsBySubscriptionLimit"] == 2
    wait = dispatch_wait_s(chain, 0.0)
    assert wait == pytest.approx(0.2, abs=1e-3)  # 10 messages per 2 s: one message every 0.2 s
    assert dispatch_allowance(chain, 50, wait) == 1


def test_dispatch_by_bytes_lets_one_read_go_into_debt() -> None:
    limiter = DispatchLimiter(DispatchLimit(msgs=0, bytes=1000), 0.0, reason="topic")
    events = ThrottledEvents()
    assert dispatch_allowance((limiter,), 100, 0.0, events) == 100
    dispatch_consumed((limiter,), 100, 3000, 0.0)
    assert dispatch_allowance((limiter,), 100, 0.0, events) == 0
    assert events.stats() == {
        "dispatchThrottledMsgEventsBySubscriptionLimit": 0,
        "dispatchThrottledBytesEventsBySubscriptionLimit": 0,
        "dispatchThrottledMsgEventsByTopicLimit": 0,
        "dispatchThrottledBytesEventsByTopicLimit": 1,
        "dispatchThrottledMsgEventsByBrokerLimit": 0,
        "dispatchThrottledBytesEventsByBrokerLimit": 0,
    }
    assert dispatch_wait_s((limiter,), 0.0) == pytest.approx(2.0, abs=1e-3)


def test_relative_dispatch_rate_adds_the_publish_rate() -> None:
    limiter = DispatchLimiter(DispatchLimit(msgs=10, bytes=0, relative=True), 0.0, publish_rate=(90.0, 0.0))
    assert dispatch_allowance((limiter,), 1000, 0.0) == 100


def test_subscribe_limiter_per_consumer_and_bounded() -> None:
    limiter = SubscribeLimiter(2, 10, keys_max=3)
    assert limiter.try_subscribe("a", 0.0)
    assert limiter.try_subscribe("a", 0.0)
    assert not limiter.try_subscribe("a", 0.0)
    assert limiter.try_subscribe("b", 0.0)
    assert limiter.try_subscribe("a", 5.0)  # 2 per 10 s: one more after 5 s
    for key in "cdef":
        limiter.try_subscribe(key, 5.0)
    assert len(limiter) == 3
    with pytest.raises(ValueError):
        SubscribeLimiter(0, 10)


async def test_a_paused_capacity_sits_out_the_throttle_then_restores_its_limit(
    autojump_clock: object,
) -> None:
    """The session's wait for room (:class:`Capacity`) is where a producer over its topic's rate pauses: on
    the mock clock, the wait lasts until the debt is paid back plus ``RESUME_S`` worth of tokens."""
    capacity = Capacity(10)
    throttle = PublishThrottle(100, 0)
    start = trio.current_time()
    assert throttle.record(150, 0, start)  # 50 messages in debt
    capacity.pause(throttle)
    assert capacity.limit == 0
    await capacity.wait_for(1)
    assert trio.current_time() - start == pytest.approx(0.5 + RESUME_S, abs=1e-3)
    assert capacity.limit == 10
    paused_at = trio.current_time()
    await capacity.wait_for(1)  # not paused: no wait
    assert trio.current_time() == paused_at
    assert throttle.record(100, 0, paused_at)
    capacity.pause(throttle)
    await capacity.wait()  # the JSON adapter's wait (count >= limit) sits it out too
    assert capacity.limit == 10
