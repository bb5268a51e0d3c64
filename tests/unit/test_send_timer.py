"""SendTimer: a stalled send is reported at its deadline, finished sends never are (virtual time)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from magnetar.bookkeeper.runtime.send_timer import SendTimer


async def _watched(timer: SendTimer, stalls: list[float], task_status: trio.TaskStatus[None]) -> None:
    task_status.started()
    await timer.watch(lambda: stalls.append(trio.current_time()))


async def test_a_send_that_never_ends_is_reported_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timer = SendTimer(10.0)
    stalls: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(_watched, timer, stalls)
        await trio.sleep(9.5)  # the watcher sleeps a whole timeout while nothing is sent: wakes at 10
        started = trio.current_time()
        timer.sending()
        await trio.sleep(100)
    assert stalls == [started + 10.0]  # exactly its deadline, not the next check after it


async def test_sends_that_finish_in_time_are_never_reported(autojump_clock: trio.testing.MockClock) -> None:
    timer = SendTimer(1.0)
    stalls: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(_watched, timer, stalls)
        for _ in range(50):
            timer.sending()
            await trio.sleep(0.9)  # each send takes just under the timeout
            timer.sent()
            await trio.sleep(0.5)
        assert stalls == []
        timer.sending()
        await trio.sleep(1.0)
        await trio.testing.wait_all_tasks_blocked()
        assert len(stalls) == 1
        nursery.cancel_scope.cancel()


def test_deadline_and_next_check() -> None:
    timer = SendTimer(2.0)
    assert timer.deadline == math.inf
    assert timer.next_check(5.0) == 7.0  # idle: look again one timeout from now


async def test_next_check_follows_the_send_in_progress(autojump_clock: trio.testing.MockClock) -> None:
    timer = SendTimer(2.0)
    await trio.sleep(3.0)
    timer.sending()
    started = trio.current_time()
    assert timer.deadline == started + 2.0
    assert timer.next_check(started + 1.0) == started + 2.0  # not one timeout from then
    timer.sent()
    assert timer.deadline == math.inf


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, math.nan])
def test_a_timeout_must_be_positive(timeout_s: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        SendTimer(timeout_s)
