from __future__ import annotations

import trio
import trio.testing

from magnetar.bookkeeper.runtime import LimitExceeded, SystemClock, TrioClock


async def test_trio_clock_follows_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioClock(wall_origin_ms=1_000_000)
    start = clock.monotonic()
    await trio.sleep(2.5)
    assert clock.monotonic() - start == 2.5
    assert clock.time_ms() == 1_002_500


def test_system_clock_is_epoch_ms() -> None:
    assert SystemClock().time_ms() > 1_700_000_000_000


def test_limit_exceeded_names_the_setting() -> None:
    err = LimitExceeded("pending_adds_max", 1000, "adds waiting")
    assert "pending_adds_max=1000" in str(err)
    assert err.setting == "pending_adds_max"
