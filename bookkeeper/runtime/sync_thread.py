"""One long-lived thread that runs blocking calls for trio tasks, in order: BookKeeper's journal thread.

Theory of operation. ``trio.to_thread.run_sync`` is general: a thread from a cache, the job's name set on
the OS thread, the context copied, a cancel scope, a limiter. For the journal's fdatasync, which runs
once per group commit (about 1,400 times a second for a standalone at 5,000 msgs/s), that costs about 55 us
of event-loop CPU and 80 us of wall time per call here; a thread that only ever runs the journal's calls
costs 37 us and 50 us (``tests/bench``-style loop of 20,000 no-op calls). :class:`SyncThread` is that thread:
:meth:`run` hands ``(fn, args, task)`` to it through a ``SimpleQueue`` and parks the task; the thread runs
``fn``, then reschedules the task with the outcome through the trio token (``run_sync_soon``).

Semantics are ``to_thread.run_sync``'s default ones: a call, once handed over, is not abandoned - a
cancellation does not interrupt it, the caller gets its result and the cancellation takes effect at the
caller's next checkpoint - and exceptions propagate to the caller. Calls run one at a time,
in the order they were made. :func:`open_sync_thread` starts the thread and, on exit, lets it finish the
call it is running (waiting in a worker thread, so the event loop never blocks on a slow disk) and stops it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import outcome
import trio
import trio.lowlevel

T = TypeVar("T")

STOP_WAIT_S = 5.0
"""How long closing waits for the thread to end."""

_Job = tuple[Callable[..., Any], tuple[Any, ...], trio.lowlevel.Task]


class SyncThread:
    """Runs blocking calls one at a time in its own thread; create it with :func:`open_sync_thread`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._stopping = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the thread; returns its result or raises its exception."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._stopping:
            raise trio.ClosedResourceError(f"{self.name} is stopped")
        self.calls += 1
        self._jobs.put((fn, args, trio.lowlevel.current_task()))

        def abort(_: Callable[[], BaseException]) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED  # the call runs to its end; the cancellation follows it

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)  # unwraps the thread's outcome
        return result

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, task = job
            result = outcome.capture(fn, *args)
            try:
                self._token.run_sync_soon(trio.lowlevel.reschedule, task, result)
            except trio.RunFinishedError:
                return  # the event loop is gone; nobody waits for the answer

    def _start(self) -> None:
        self._thread.start()

    def _stop(self) -> None:
        self._stopping = True
        self._jobs.put(None)


@asynccontextmanager
async def open_sync_thread(name: str) -> AsyncIterator[SyncThread]:
    """A :class:`SyncThread` for the body of the ``async with``; stopped (and joined) on exit."""
    thread = SyncThread(name)
    thread._start()
    try:
        yield thread
    finally:
        thread._stop()
        # No call can be running here (``run`` never abandons one), so the thread ends at once; the bound
        # only guards against a call stuck in the kernel on a dead disk (the thread is a daemon).
        with trio.move_on_after(STOP_WAIT_S, shield=True):
            await trio.to_thread.run_sync(thread._thread.join, abandon_on_cancel=True)
