"""Rate limits and per-key connection counts that protect a service from one noisy user.

Theory of operation. A :class:`TokenBucket` holds up to ``burst`` tokens and gains ``rate_per_s`` per second
of the injected clock's monotonic time; an operation takes one token (or ``n``) or is refused. Refusal is
immediate - nothing waits - so a flooding client is answered "too many requests" (HTTP 429, Pulsar's
``TooManyRequestsException``; ``send-error`` on a WebSocket producer) while everybody else is served.

:class:`KeyedRateLimiter` keeps one bucket per key (a role, a connection, a client address), so exceeding a
limit never takes tokens from another key. It holds at most ``keys_max`` buckets: the least recently used
one is dropped to admit a new key (an idle bucket refills to full anyway, so little is lost).
:class:`ConnectionCounter` counts open connections per key (Pulsar's ``brokerMaxConnectionsPerIp``) with
the same bound on keys.
Everything here is plain computation over the clock: no I/O, no tasks, deterministic under a fake clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from magnetar.bookkeeper.runtime.clock import Clock
from magnetar.bookkeeper.runtime.limits import LimitExceeded

RATE_LIMIT_KEYS_MAX_DEFAULT = 10_000


class RateLimitedError(LimitExceeded):
    """A rate limit refused an operation; ``retry_after_s`` says when one token will be there again."""

    http_status = 429

    def __init__(self, setting: str, limit: float, retry_after_s: float, detail: str = "") -> None:
        super().__init__(setting, limit, detail)
        self.retry_after_s = retry_after_s


class TokenBucket:
    """``rate_per_s`` operations per second on average, up to ``burst`` at once."""

    __slots__ = ("_clock", "_tokens", "_updated", "burst", "rate_per_s")

    def __init__(self, rate_per_s: float, burst: float, clock: Clock) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"rate_per_s must be positive and finite, not {rate_per_s}")
        if not burst >= 1:
            raise ValueError(f"burst must be at least 1, not {burst}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._updated = clock.monotonic()

    def _refill(self) -> float:
        now = self._clock.monotonic()
        elapsed = now - self._updated
        if elapsed > 0:
            self._tokens = min(self.burst, self._tokens + elapsed * self.rate_per_s)
            self._updated = now
        return self._tokens

    @property
    def tokens(self) -> float:
        return self._refill()

    def try_acquire(self, n: float = 1) -> bool:
        """Take ``n`` tokens if there are that many; otherwise take none and return False."""
        if self._refill() >= n:
            self._tokens -= n
            return True
        return False

    def retry_after_s(self, n: float = 1) -> float:
        """Seconds until ``n`` tokens will be available (0 when they are now; inf when n > burst)."""
        missing = n - self._refill()
        if missing <= 0:
            return 0.0
        if n > self.burst:
            return math.inf
        return missing / self.rate_per_s


class KeyedRateLimiter:
    """One :class:`TokenBucket` per key, at most ``keys_max`` of them (least recently used dropped)."""

    def __init__(
        self,
        rate_per_s: float,
        burst: float,
        clock: Clock,
        *,
        setting: str,
        keys_max: int = RATE_LIMIT_KEYS_MAX_DEFAULT,
    ) -> None:
        if keys_max < 1:
            raise ValueError(f"keys_max must be at least 1, not {keys_max}")
        TokenBucket(rate_per_s, burst, clock)  # validates the arguments now, not at first use
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.setting = setting
        self._clock = clock
        self._keys_max = keys_max
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def _bucket(self, key: str) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._keys_max:
                self._buckets.popitem(last=False)
            bucket = self._buckets[key] = TokenBucket(self.rate_per_s, self.burst, self._clock)
        else:
            self._buckets.move_to_end(key)
        return bucket

    def try_acquire(self, key: str, n: float = 1) -> bool:
        return self._bucket(key).try_acquire(n)

    def acquire_or_raise(self, key: str, n: float = 1, *, what: str = "requests") -> None:
        """Take ``n`` tokens of ``key`` or raise :class:`RateLimitedError` (HTTP 429)."""
        bucket = self._bucket(key)
        if not bucket.try_acquire(n):
            raise RateLimitedError(
                self.setting,
                self.rate_per_s,
                bucket.retry_after_s(n),
                f"too many {what} for {key} (at most {self.rate_per_s:g}/s, bursts of {self.burst:g})",
            )

    def forget(self, key: str) -> None:
        """Drop a key's bucket (its connection closed)."""
        self._buckets.pop(key, None)


class ConnectionCounter:
    """Open connections per key, at most ``per_key_max`` each (0: unlimited)."""

    def __init__(self, per_key_max: int, *, keys_max: int = RATE_LIMIT_KEYS_MAX_DEFAULT) -> None:
        if per_key_max < 0:
            raise ValueError(f"per_key_max must be >= 0, not {per_key_max}")
        self.per_key_max = per_key_max
        self._keys_max = keys_max
        self._counts: dict[str, int] = {}

    def count(self, key: str) -> int:
        return self._counts.get(key, 0)

    def try_acquire(self, key: str) -> bool:
        """Count one more connection of ``key``; False (nothing counted) when it has ``per_key_max``, or when
        ``keys_max`` distinct keys are already connected."""
        current = self._counts.get(key, 0)
        if self.per_key_max and current >= self.per_key_max:
            return False
        if current == 0 and len(self._counts) >= self._keys_max:
            return False
        self._counts[key] = current + 1
        return True

    def release(self, key: str) -> None:
        current = self._counts.get(key, 0)
        assert current > 0, f"release of {key!r} without a matching acquire"
        if current == 1:
            del self._counts[key]
        else:
            self._counts[key] = current - 1
