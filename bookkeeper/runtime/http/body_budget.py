"""The request-body bytes one HTTP server holds at once, across all its connections.

``http_body_bytes_max`` bounds one body; ``http_connections_max`` bodies of that size could still add up to
gigabytes. Before a connection reads a body it takes the body's bytes from this budget
(``http_bodies_in_flight_bytes_max``) and gives them back once the handler has answered. A body announced
with ``Content-Length`` is taken whole before any of it is read: when the budget is short the connection
waits - reading nothing, so TCP holds the client back - until the request's deadline, then answers 503. A
chunked body, whose size is unknown, takes each chunk as it arrives and is answered 503 at once when the
budget is short (waiting chunk by chunk could leave every connection holding part of the budget and waiting
for the rest).

Shares. A connection reads one request at a time, so it holds at most one body (``http_body_bytes_max``).
Each caller - the role the route's head check named, else the client's address - may hold at most
``http_bodies_in_flight_bytes_per_role_max`` of the budget: a role sending many slow bodies on many
connections waits for its own share, while other roles' bodies still find room. A caller over its share
waits (or, chunked, is answered 503) exactly as when the whole budget is short.
"""

from __future__ import annotations

import trio

from magnetar.bookkeeper.runtime import process_trimmer


class BodyBudget:
    """A count of bytes taken by the bodies being read or handled, bounded by ``bytes_max``."""

    def __init__(self, bytes_max: int, share_max: int | None = None) -> None:
        self.bytes_max = bytes_max
        self.share_max = bytes_max if share_max is None else share_max
        """What one caller (a role, or an address) may hold."""
        self.taken = 0
        self._by_caller: dict[str, int] = {}
        self._freed = trio.Event()

    def held_by(self, caller: str) -> int:
        return self._by_caller.get(caller, 0)

    def try_take(self, size: int, caller: str = "") -> bool:
        held = self._by_caller.get(caller, 0)
        if self.taken + size > self.bytes_max or held + size > self.share_max:
            return False
        self.taken += size
        self._by_caller[caller] = held + size
        return True

    async def take(self, size: int, deadline: float, caller: str = "") -> bool:
        """Take ``size`` bytes for ``caller``, waiting until ``deadline`` (trio time) for others (or the
        caller's other requests) to give theirs back."""
        await trio.lowlevel.checkpoint_if_cancelled()
        with trio.move_on_at(deadline):
            while not self.try_take(size, caller):
                if self._freed.is_set():
                    self._freed = trio.Event()
                await self._freed.wait()
            return True
        return False

    def give_back(self, size: int, caller: str = "") -> None:
        if size:
            self.taken -= size
            held = self._by_caller[caller] - size
            assert self.taken >= 0, "a body budget gave back more than it took"
            assert held >= 0, "a caller gave back more than it took"
            if held:
                self._by_caller[caller] = held
            else:
                del self._by_caller[caller]
            process_trimmer().freed(size)
            self._freed.set()
