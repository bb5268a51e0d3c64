"""The received WebSocket bytes one server (a port) holds at once, across all its sessions.

Theory of operation. Each session bounds what it holds itself (a message being reassembled up to
``ws_frame_bytes_max``, a receive queue up to ``ws_receive_queue_bytes_max``), but a port serves up to
``http_connections_max`` sessions: 2,048 sessions each parking an unfinished 5 MiB message would hold 10 GiB.
This budget (``ws_received_bytes_in_flight_max``) bounds the sum. A session reports what it holds - the
unfinished message and partial frame in its decoder plus the complete messages its handler has not taken
yet - after every read and every hand-over to the handler (:meth:`ReceiveBudget.hold`).

When the sum is over the budget, the budget *evicts* the session holding the largest unfinished message
(at least :data:`EVICT_BYTES_MIN`): its unfinished message is dropped at once and it is closed with 1013 (Try
Again Later) and a reason naming the setting; it is evicted again until the sum fits. Evicting rather than
making readers wait is what protects the others: an unfinished message can only be completed by reading
more, so waiting would let a few sessions parking large unfinished messages stall every session of the
port (their deadline, ``ws_message_timeout_ms``, would be the only way out); evicting the largest holder
costs the session that holds the memory, and a client whose large message was dropped can send it again.
Complete messages waiting for a handler are never evicted (they are on their way out: the handler takes
them without reading the socket); when they alone fill the budget, every session stops reading until the
handlers have taken enough (:meth:`ReceiveBudget.wait_for_room`), and TCP slows the clients.

The sum can pass the budget by at most one read (``RECEIVE_CHUNK_BYTES``) per session, since a session
accounts a read once it has decoded it. What a session that ended or was evicted held is reported to the
process's :class:`~magnetar.bookkeeper.runtime.memory.MemoryTrimmer`, which returns it to the system.
"""

from __future__ import annotations

from typing import Protocol

import trio

from magnetar.bookkeeper.runtime import process_trimmer

EVICT_BYTES_MIN = 65536
"""A session holding less of an unfinished message than this is not evicted (evicting it frees too little)."""


class ReceiveHolder(Protocol):
    """A session as the budget sees it."""

    @property
    def unfinished_bytes(self) -> int:
        """Bytes of a message (or frame) received but not complete yet."""
        ...

    def evict(self, reason: str) -> None:
        """Drop the unfinished message now and close the session with 1013 and ``reason``."""
        ...


class ReceiveBudget:
    """A count of received WebSocket bytes held by the sessions of one port, bounded by ``bytes_max``."""

    def __init__(self, bytes_max: int, setting: str = "ws_received_bytes_in_flight_max") -> None:
        self.bytes_max = bytes_max
        self.taken = 0
        self.evictions = 0
        self._setting = setting
        self._held: dict[ReceiveHolder, int] = {}
        self._freed = trio.Event()

    def held_by(self, holder: ReceiveHolder) -> int:
        return self._held.get(holder, 0)

    def hold(self, holder: ReceiveHolder, size: int) -> None:
        """Record that ``holder`` now holds ``size`` bytes; evict while the sum is over the budget."""
        before = self._held.get(holder, 0)
        if size == before:
            if self.taken > self.bytes_max:
                self._shed()
            return
        if size:
            self._held[holder] = size
        else:
            self._held.pop(holder, None)
        self.taken += size - before
        if size < before:
            self._freed.set()
        if self.taken > self.bytes_max:
            self._shed()

    def release(self, holder: ReceiveHolder) -> None:
        """``holder`` is gone (its session ended): it holds nothing any more."""
        process_trimmer().freed(self._held.get(holder, 0))
        self.hold(holder, 0)

    @property
    def full(self) -> bool:
        return self.taken >= self.bytes_max

    async def wait_for_room(self) -> None:
        """Return once the sessions hold less than the budget (evicting large unfinished messages first)."""
        self._shed()
        while self.taken >= self.bytes_max:
            if self._freed.is_set():
                self._freed = trio.Event()
            await self._freed.wait()
        await trio.lowlevel.checkpoint()

    def _shed(self) -> None:
        while self.taken >= self.bytes_max and self._held:
            victim = max(self._held, key=lambda holder: holder.unfinished_bytes)
            if victim.unfinished_bytes < EVICT_BYTES_MIN:
                return
            self.evictions += 1
            reason = f"{self._setting}={self.bytes_max} reached: unfinished message dropped, send it again"
            victim.evict(reason)
            freed = self._held.pop(victim)
            self.taken -= freed
            process_trimmer().freed(freed)
            self._freed.set()
