"""The request-body bytes one HTTP server holds at once, across all its connections.

``http_body_bytes_max`` bounds one body; ``http_connections_max`` bodies of that size could still add up to
gigabytes. Before a connection reads a body it takes the body's bytes from this budget
(``http_bodies_in_flight_bytes_max``) and gives them back once the handler has answered. A body announced
with ``Content-Length`` is taken whole before any of it is read: when the budget is short the connection
waits - reading nothing, so TCP holds the client back - until the request's deadline, then answers 503. A
chunked body, whose size is unknown, takes each chunk as it arrives and is answered 503 at once when the
budget is short (waiting chunk by chunk could leave every connection holding part of the budget and waiting
for the rest).
"""

from __future__ import annotations

import trio

from magnetar.bookkeeper.runtime.memory import process_trimmer


class BodyBudget:
    """A count of bytes taken by the bodies being read or handled, bounded by ``bytes_max``."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.taken = 0
        self._freed = trio.Event()

    def try_take(self, size: int) -> bool:
        if self.taken + size > self.bytes_max:
            return False
        self.taken += size
        return True

    async def take(self, size: int, deadline: float) -> bool:
        """Take ``size`` bytes, waiting until ``deadline`` (trio time) for others to give theirs back."""
        await trio.lowlevel.checkpoint_if_cancelled()
        with trio.move_on_at(deadline):
            while not self.try_take(size):
                if self._freed.is_set():
                    self._freed = trio.Event()
                await self._freed.wait()
            return True
        return False

    def give_back(self, size: int) -> None:
        if size:
            self.taken -= size
            assert self.taken >= 0, "a body budget gave back more than it took"
            process_trimmer().freed(size)
            self._freed.set()
