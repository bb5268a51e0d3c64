"""Run plain callbacks soon, in order, from one task - the client's way to answer "later, on the loop".

The transport contract forbids calling a response callback synchronously from inside ``send`` (the caller
may be half-way through updating its state), and the client itself must sometimes report an error to a
callback it was just handed. Both go through a :class:`CallSoon`: a FIFO of callbacks drained by one task
that the owner runs in its nursery. One task for all callbacks (no task per request) keeps pipelining cheap
and keeps the order deterministic under a seeded scheduler.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

log = logging.getLogger(__name__)


class CallSoon:
    def __init__(self) -> None:
        self._queue: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._wakeup = trio.Event()

    def __call__(self, fn: Callable[..., object], *args: Any) -> None:
        self._queue.append((fn, args))
        self._wakeup.set()

    def __len__(self) -> int:
        return len(self._queue)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            self.drain()

    def drain(self) -> None:
        queue = self._queue
        while queue:
            fn, args = queue.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("callback %r failed", fn)
