"""An entry read from a managed ledger."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.managed_ledger.position import Position


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)
