"""GiveWay: a bulk job's pause lets every foreground task that is runnable finish its hops first."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from magnetar.bookkeeper.runtime.pacing import GiveWay

HOPS = 6


async def _hops(log: list[str], count: int = HOPS) -> None:
    """A foreground request crossing several scheduler batches (read, journal, sync, ack...)."""
    for hop in range(count):
        log.append(f"hop {hop}")
        await trio.lowlevel.checkpoint()


async def _job(
    log: list[str], pause: GiveWay | None, slices: int = 2, nursery: trio.Nursery | None = None
) -> None:
    for index in range(slices):
        log.append(f"slice {index}")
        if nursery is not None and index == 0:
            nursery.start_soon(_hops, log)  # a request arrives while the slice runs
        if pause is None:
            await trio.lowlevel.checkpoint()
        else:
            await pause()


async def test_a_paused_job_resumes_only_after_the_foreground_went_idle() -> None:
    log: list[str] = []
    give_way = GiveWay(wait_max_s=60)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_job, log, give_way, 2, nursery)
    assert log == ["slice 0", *[f"hop {hop}" for hop in range(HOPS)], "slice 1"]
    assert give_way.pauses == 2
    assert give_way.idle_pauses == 2


async def test_plain_yields_put_every_slice_in_front_of_the_foreground_hops() -> None:
    """What GiveWay is for: with plain checkpoints the job's next slice runs before the request is done."""
    log: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_job, log, None, 3, nursery)
    assert log.index("slice 2") < log.index(f"hop {HOPS - 1}")


async def test_a_saturated_loop_still_lets_the_job_advance_once_per_wait_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    give_way = GiveWay(wait_max_s=0.002)
    stop = trio.Event()

    async def busy() -> None:  # never blocks: the loop is never idle
        while not stop.is_set():
            await trio.sleep(0.0005)

    log: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy)
        await _job(log, give_way, slices=3)
        stop.set()
    assert log == ["slice 0", "slice 1", "slice 2"]
    assert give_way.pauses == 3


async def test_an_urgent_job_only_yields() -> None:
    urgent = True
    give_way = GiveWay(wait_max_s=60, hurry=lambda: urgent)
    await give_way()
    assert (give_way.pauses, give_way.idle_pauses) == (1, 0)
    urgent = False
    await give_way()  # nothing else runs: the loop is idle at once
    assert (give_way.pauses, give_way.idle_pauses) == (2, 1)


async def test_wait_max_zero_turns_pacing_off() -> None:
    give_way = GiveWay(wait_max_s=0)
    await give_way()
    assert (give_way.pauses, give_way.idle_pauses) == (1, 0)


def test_a_negative_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="wait_max_s must be >= 0"):
        GiveWay(wait_max_s=-1)
