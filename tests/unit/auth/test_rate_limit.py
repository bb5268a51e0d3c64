"""Token buckets, per-key limiters and per-key connection counts under a fake clock."""

from __future__ import annotations

import math

import pytest
from fixtures.auth import FakeClock

from magnetar.bookkeeper.runtime.rate_limit import (
    ConnectionCounter,
    KeyedRateLimiter,
    RateLimitedError,
    TokenBucket,
)


def test_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=10, burst=5, clock=clock)
    assert [bucket.try_acquire() for _ in range(6)] == [True] * 5 + [False]
    assert bucket.retry_after_s() == pytest.approx(0.1)
    clock.advance(0.1)
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.advance(100)
    assert bucket.tokens == 5  # never more than the burst
    assert not bucket.try_acquire(6)
    assert bucket.retry_after_s(6) == math.inf
    assert bucket.try_acquire(5)


def test_bucket_validation() -> None:
    clock = FakeClock()
    for rate, burst in ((0, 1), (-1, 1), (math.inf, 1), (1, 0.5)):
        with pytest.raises(ValueError, match="must be"):
            TokenBucket(rate, burst, clock)


def test_keys_are_isolated() -> None:
    clock = FakeClock()
    limiter = KeyedRateLimiter(1, 2, clock, setting="publish_rate_per_role")
    assert limiter.try_acquire("noisy")
    assert limiter.try_acquire("noisy")
    with pytest.raises(RateLimitedError) as caught:
        limiter.acquire_or_raise("noisy", what="publishes")
    assert caught.value.http_status == 429
    assert caught.value.setting == "publish_rate_per_role"
    assert caught.value.retry_after_s == pytest.approx(1.0)
    assert "too many publishes for noisy" in str(caught.value)
    limiter.acquire_or_raise("quiet")  # another key is unaffected
    limiter.acquire_or_raise("quiet")


def test_keyed_limiter_is_bounded_and_forgets() -> None:
    clock = FakeClock()
    limiter = KeyedRateLimiter(1, 1, clock, setting="s", keys_max=3)
    for key in "abcd":
        assert limiter.try_acquire(key)
    assert len(limiter) == 3  # "a", the least recently used, was dropped
    assert not limiter.try_acquire("d")
    limiter.forget("d")
    assert limiter.try_acquire("d")
    with pytest.raises(ValueError, match="keys_max"):
        KeyedRateLimiter(1, 1, clock, setting="s", keys_max=0)


def test_connection_counter() -> None:
    counter = ConnectionCounter(2, keys_max=2)
    assert counter.try_acquire("10.0.0.1")
    assert counter.try_acquire("10.0.0.1")
    assert not counter.try_acquire("10.0.0.1")
    assert counter.try_acquire("10.0.0.2")
    assert not counter.try_acquire("10.0.0.3")  # keys_max distinct addresses
    counter.release("10.0.0.1")
    assert counter.count("10.0.0.1") == 1
    assert counter.try_acquire("10.0.0.1")
    counter.release("10.0.0.2")
    assert counter.try_acquire("10.0.0.3")
    unlimited = ConnectionCounter(0)
    assert all(unlimited.try_acquire("x") for _ in range(1000))
