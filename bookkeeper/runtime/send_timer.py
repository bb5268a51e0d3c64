"""A bound on how long one socket send may stall, without a cancel scope per send.

Theory of operation. ``with trio.fail_after(t): await stream.send_all(data)`` registers and removes a deadline
and enters and leaves a cancel scope through a generator context manager for every send: 10-12 µs here,
about as much as the send of a small frame on loopback itself (17 µs), paid for each frame the brokers and
bookies write. A :class:`SendTimer` costs the writer two attribute writes per send: it notes when the
send started (:meth:`sending`) and that it ended (:meth:`sent`). One task per connection, :meth:`watch`,
sleeps until the running send's deadline - a full timeout while nothing is being sent, since a send that
starts meanwhile cannot be due before the task wakes - and calls ``on_stall`` once a single send has lasted
the whole timeout. A stall is thus noticed exactly at its deadline, as with ``fail_after``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio


class SendTimer:
    """Notes the start of the send in progress; :meth:`watch` reports one that lasts ``timeout_s``."""

    __slots__ = ("_started", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self._started = math.inf

    def sending(self) -> None:
        """A send starts now."""
        self._started = trio.current_time()

    def sent(self) -> None:
        """The send in progress ended (completed or failed)."""
        self._started = math.inf

    @property
    def deadline(self) -> float:
        """When the send in progress stalls (``inf`` while nothing is being sent)."""
        return self._started + self.timeout_s

    def next_check(self, now: float) -> float:
        """When a watcher must look again: the running send's deadline, or one timeout from ``now`` (no send
        that starts meanwhile can be due earlier)."""
        return min(self._started, now) + self.timeout_s

    async def watch(self, on_stall: Callable[[], None]) -> None:
        """Call ``on_stall`` when a send has been in progress for ``timeout_s``, then return. Run it next to
        the writer task, in a nursery that ``on_stall`` (or the connection's end) cancels."""
        while True:
            now = trio.current_time()
            if self.deadline <= now:
                on_stall()
                return
            await trio.sleep_until(self.next_check(now))
