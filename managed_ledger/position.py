"""Positions in a managed ledger: ``(ledgerId, entryId)``, ordered, rendered ``"L:E"`` as Pulsar does.

``L:-1`` is the position *before* the first entry of ledger ``L`` (an empty ledger's last confirmed entry,
or a cursor that has consumed nothing in ``L``).
"""

from __future__ import annotations

from dataclasses import dataclass


class InvalidPositionError(ValueError):
    pass


@dataclass(frozen=True, slots=True, order=True)
class Position:
    ledger_id: int
    entry_id: int

    def __post_init__(self) -> None:
        if self.ledger_id < -1 or self.entry_id < -1:
            raise InvalidPositionError(f"invalid position {self.ledger_id}:{self.entry_id}")

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, sep, entry = text.partition(":")
        try:
            if not sep:
                raise ValueError(text)
            return cls(int(ledger), int(entry))
        except ValueError as exc:
            raise InvalidPositionError(f"not a position 'ledgerId:entryId': {text!r}") from exc

    def next(self) -> Position:
        return Position(self.ledger_id, self.entry_id + 1)

    def previous(self) -> Position:
        return Position(self.ledger_id, self.entry_id - 1)


EARLIEST = Position(-1, -1)
"""Sorts before every real position."""

LATEST = Position(2**63 - 1, 2**63 - 1)
"""Sorts after every real position (Pulsar's ``Long.MAX:Long.MAX`` for "latest")."""
