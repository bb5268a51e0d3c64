"""An entry read from a managed ledger."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.managed_ledger.entry_prefix import SIZE, encode_prefix
from magnetar.managed_ledger.position import Position


@dataclass(frozen=True, slots=True)
class Entry:
    """``data`` is the entry as its writer added it: the managed ledger's message index prefix
    (:mod:`.entry_prefix`) removed - a ``memoryview`` slice of the bytes read, no copy - and ``first_index``
    the index it named (None for an entry stored without one)."""

    position: Position
    data: bytes | memoryview
    first_index: int | None = None

    @property
    def length(self) -> int:
        """The size stored on the bookies (the prefix included)."""
        return len(self.data) if self.first_index is None else len(self.data) + SIZE

    @property
    def stored(self) -> bytes:
        """The bytes as stored on the bookies (the prefix put back in front: a copy, for the rare reader that
        forwards stored entries untouched)."""
        if self.first_index is None:
            return bytes(self.data)
        return b"".join((encode_prefix(self.first_index), self.data))
