"""SyncThread: the journal's own thread - results, errors, order, cancellation, shutdown."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from magnetar.bookkeeper.runtime.sync_thread import SyncThread, open_sync_thread


async def test_calls_run_in_the_thread_and_return_their_result() -> None:
    async with open_sync_thread("test-sync") as sync:
        name = await sync.run(lambda: threading.current_thread().name)
        assert name == "test-sync"
        assert await sync.run(pow, 2, 10) == 1024
        assert sync.calls == 2


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    async with open_sync_thread("test-sync") as sync:
        with pytest.raises(OSError, match="disk on fire"):
            await sync.run(_raise, OSError(5, "disk on fire"))
        assert await sync.run(len, b"abc") == 3


def _raise(exc: BaseException) -> None:
    raise exc


async def test_calls_from_several_tasks_run_one_at_a_time_in_order() -> None:
    order: list[int] = []
    running = 0
    overlapped = False

    def record(index: int) -> None:
        nonlocal running, overlapped
        running += 1
        overlapped |= running > 1
        order.append(index)
        running -= 1

    async with open_sync_thread("test-sync") as sync, trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(sync.run, record, index)
            await trio.testing.wait_all_tasks_blocked()  # each task has handed its call over
    assert order == list(range(20))
    assert not overlapped


async def test_a_cancelled_caller_still_gets_the_result_of_its_call() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(10)
        finished.set()
        return "done"

    outcome: list[str] = []

    async def caller(scope: trio.CancelScope) -> None:
        with scope:
            outcome.append(await sync.run(slow))
        outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

    async with open_sync_thread("test-sync") as sync, trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        nursery.start_soon(caller, scope)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.sleep(0.05)  # the cancellation is pending, the call still runs
        assert not finished.is_set()
        assert not outcome
        release.set()
    assert finished.is_set()
    # As with trio.to_thread: the call's result is not lost; the cancellation would take effect at the
    # caller's next checkpoint inside the scope (there is none here).
    assert outcome == ["done", "not cancelled"]


async def test_the_thread_ends_on_exit_and_later_calls_are_refused() -> None:
    async with open_sync_thread("test-sync") as sync:
        await sync.run(int)
    assert not sync._thread.is_alive()
    with pytest.raises(trio.ClosedResourceError, match="test-sync is stopped"):
        await sync.run(int)


def test_a_sync_thread_needs_a_trio_loop() -> None:
    with pytest.raises(RuntimeError):
        SyncThread("outside")
