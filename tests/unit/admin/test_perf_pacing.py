"""The open-loop pacing of ``magnetar perf produce --rate`` (JSON and binary senders share it)."""

from __future__ import annotations

import time

import trio

from magnetar.admin.perf.common import messages_due


def test_a_sender_behind_schedule_owes_every_message_due_so_far() -> None:
    start = time.monotonic() - 2.0

    async def main() -> tuple[int, float, float]:
        before = time.monotonic()
        owed = await messages_due(1000.0, start, 500)
        return owed, before, time.monotonic()

    owed, before, after = trio.run(main)
    assert int((before - start) * 1000) + 1 - 500 <= owed <= int((after - start) * 1000) + 1 - 500


def test_a_sender_ahead_of_schedule_returns_only_once_the_next_message_is_due() -> None:
    async def main() -> tuple[int, float, float]:
        start = time.monotonic()
        owed = await messages_due(100.0, start, 3)  # the 4th message is due 30 ms after start
        return owed, start, time.monotonic()

    owed, start, returned = trio.run(main)
    assert owed >= 1
    assert returned >= start + 3 / 100
