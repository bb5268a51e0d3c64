"""Bulk work on the event loop that gives way to foreground tasks between its slices.

Theory of operation. Everything in a Magnetar process shares one trio thread. A bulk job (a checkpoint packing
ten thousand entries into the entry log, say) that yields with a plain ``trio.lowlevel.checkpoint()`` between
its slices is rescheduled in the scheduler's very next batch, so every slice still runs in front of the
foreground tasks that became runnable meanwhile. A publish crosses several such batches on its way (socket
read, journal append, sync completion, acknowledgement write), so each slice is paid several times: slices of
about 2 ms made the publish p99 of a standalone at 5,000 msgs/s jump from 2.5 ms to 8-13 ms in the second a
checkpoint ran.

:class:`GiveWay` instead parks the job until the loop is idle - no task runnable and no I/O ready, trio's
``wait_all_tasks_blocked`` - but for at most ``wait_max_s``, so that on a saturated loop the job still
advances by one slice per ``wait_max_s`` (its share of the loop is then slice / (slice + wait_max_s)). When
the job is urgent (``hurry()`` is true, e.g. writers are about to block on it) it takes plain yields and runs
at full speed. ``wait_max_s`` 0 turns the pacing off.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.lowlevel


def _never() -> bool:
    return False


class GiveWay:
    """``await give_way()`` between the slices of a bulk job (see the module docstring)."""

    __slots__ = ("hurry", "idle_pauses", "pauses", "wait_max_s")

    def __init__(self, wait_max_s: float, hurry: Callable[[], bool] = _never) -> None:
        if wait_max_s < 0:
            raise ValueError(f"wait_max_s must be >= 0, got {wait_max_s}")
        self.wait_max_s = wait_max_s
        self.hurry = hurry
        self.pauses = 0
        """Pauses taken (plain yields included)."""
        self.idle_pauses = 0
        """Pauses that ended because the loop went idle (the others ran out of ``wait_max_s``)."""

    async def __call__(self) -> None:
        self.pauses += 1
        if self.wait_max_s <= 0 or self.hurry():
            await trio.lowlevel.checkpoint()
            return
        # Imported here, not at the top: trio.testing imports pytest where it is installed, and every
        # process (the admin command line too) imports this package.
        from trio.testing import wait_all_tasks_blocked  # noqa: PLC0415

        with trio.move_on_after(self.wait_max_s):
            await wait_all_tasks_blocked()
            self.idle_pauses += 1
