"""Message deduplication (Pulsar's ``MessageDeduplication``): the sans-IO state of one topic (partition).

Keyed by producer name, two maps: the highest sequence id *pushed* (accepted for writing) and the highest
*persisted* (its entry stored). A message of producer ``name`` with sequence ids ``sequence_id`` ..
``highest`` (a batch) is, by :meth:`DedupState.check`:

* :data:`Verdict.NEW` when ``sequence_id`` > pushed: it is written, and pushed becomes ``highest``;
* :data:`Verdict.DUPLICATE` when ``sequence_id`` <= persisted: nothing is written; the client is answered as
  for a stored message, at the id ``-1:-1`` (Pulsar's receipt for a duplicate);
* :data:`Verdict.UNKNOWN` when persisted < ``sequence_id`` <= pushed: the original is still in flight; the
  answer waits for it (same producer) or is Pulsar's "Cannot determine whether the message is a duplicate at
  this time" error, which a client answers by resending.

Persistence. The persisted map is the *snapshot*: the topic stores it as the properties of the durable cursor
``pulsar.dedup`` whose mark-delete is the last entry the map covers (:meth:`DedupState.snapshot`). The topic
takes one every ``entries_interval`` stored entries (:meth:`DedupState.on_persisted` says when), on a timer
and on close. Recovery loads the snapshot and replays the entries after its position, each message's stored
producer name and sequence id (:meth:`DedupState.replay`), so a snapshot older than the last entry loses
nothing; the cursor holds back retention by at most the entries since the last snapshot.

Bounds. At most ``producers_max`` producer names are tracked (Pulsar's
``brokerDeduplicationMaxNumberOfProducers``): the maps are kept in least-recently-updated order and a new
name beyond the bound evicts the least recently updated one (a producer that stopped publishing; its later
resends are no longer recognised, as after Pulsar's purge of inactive producers). The snapshot holds the
same at most ``producers_max`` names, and at most :data:`SNAPSHOT_BYTES_MAX` bytes of them (the most recently
updated first): it is written as one cursor position entry, and a clean close puts it in the cursor's
metadata node, whose size the metadata store bounds.

Inactive producers (Pulsar's ``brokerDeduplicationProducerInactivityTimeoutMinutes``). A name with no
producer connected is noted with the time its last producer left (:meth:`DedupState.producer_left`; a name
recovered from storage while none of that name is connected counts from the recovery), and forgotten when a
producer of that name connects again (:meth:`DedupState.producer_joined`). :meth:`DedupState.purge_inactive`
drops the names idle since before a time from both maps - the same sequence id from that name is then stored
again, as a new message - and the topic takes a snapshot, so the stored state forgets them too. The notes
are bounded by the maps: only names they hold are noted, and a name the maps evict loses its note.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

DEDUP_CURSOR = "pulsar.dedup"
"""The durable cursor holding the snapshot (Pulsar's name); no subscription may take it."""


def is_reserved_cursor(name: str) -> bool:
    """Whether cursor ``name`` belongs to the broker, not to a subscription."""
    return name == DEDUP_CURSOR


SNAPSHOT_BYTES_MAX = 512 * 1024
"""Bytes of producer names (UTF-8, plus :data:`SNAPSHOT_ENTRY_OVERHEAD` each) one snapshot holds at most."""
SNAPSHOT_ENTRY_OVERHEAD = 24
"""What one name costs in the stored JSON besides its bytes: quotes, colon, comma and a 19-digit number."""

SEQUENCE_ID_MAX = 2**63 - 1
"""Sequence ids are Java ``long`` values of 0 or more."""


class Verdict(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"


DUPLICATE_UNKNOWN_REASON = "Cannot determine whether the message is a duplicate at this time"
"""Pulsar's reason for :data:`Verdict.UNKNOWN` (the client reconnects and resends)."""


class DedupState:
    """The two maps of one topic (see the module docstring)."""

    __slots__ = (
        "_since_snapshot",
        "entries_interval",
        "inactive",
        "last_position",
        "persisted",
        "producers_max",
        "pushed",
        "snapshot_due",
        "snapshot_position",
    )

    def __init__(self, producers_max: int, entries_interval: int) -> None:
        self.producers_max = max(1, producers_max)
        """Producer names tracked at most (count)."""
        self.entries_interval = max(1, entries_interval)
        """Entries stored between two snapshots (count)."""
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self.last_position: tuple[int, int] | None = None
        """The last entry the persisted map covers: ``(ledger_id, entry_id)``."""
        self.snapshot_position: tuple[int, int] | None = None
        """The position of the last snapshot taken."""
        self._since_snapshot = 0
        self.snapshot_due: Callable[[], None] = _nothing
        """Called when :meth:`on_persisted` says a snapshot is due (the topic takes it)."""
        self.inactive: dict[str, int] = {}
        """Names in the maps with no producer connected -> since when (epoch ms); see the module docstring."""

    # -- publish --------------------------------------------------------------------------------------

    def check(self, name: str, sequence_id: int, highest: int) -> Verdict:
        """The verdict on a message ``sequence_id`` .. ``highest`` of ``name``; a NEW one is pushed."""
        pushed = self.pushed.get(name)
        if pushed is not None and sequence_id <= pushed:
            if sequence_id <= self.persisted.get(name, -1):
                return Verdict.DUPLICATE
            return Verdict.UNKNOWN
        self._put(self.pushed, name, max(sequence_id, highest))
        return Verdict.NEW

    def on_persisted(self, name: str, highest: int, ledger_id: int, entry_id: int) -> bool:
        """A NEW message up to ``highest`` is stored in entry ``(ledger_id, entry_id)``; True when a snapshot
        is due (``entries_interval`` entries stored since the last)."""
        if highest > self.persisted.get(name, -1):
            self._put(self.persisted, name, highest)
        if self.pushed.get(name, -1) < highest:  # evicted meanwhile, or pushed by an earlier owner
            self._put(self.pushed, name, highest)
        position = (ledger_id, entry_id)
        if position != self.last_position:
            self.last_position = position
            self._since_snapshot += 1
        return self._since_snapshot >= self.entries_interval

    def on_failed(self, name: str, still_pending: int) -> None:
        """A message of ``name`` failed (it may not be stored): pushed goes back to what is persisted or still
        in flight (``still_pending``, -1 for nothing), so that the client's resend is not UNKNOWN forever."""
        persisted = self.persisted.get(name, -1)
        value = max(persisted, still_pending)
        if value < 0:
            self.pushed.pop(name, None)
        else:
            self.pushed[name] = value

    def last_sequence_id(self, name: str) -> int:
        """The highest sequence id pushed for ``name``, -1 if none (``last_sequence_id`` of Pulsar's
        PRODUCER_SUCCESS: the client numbers on from there)."""
        return self.pushed.get(name, -1)

    # -- inactive producers ----------------------------------------------------------------------------

    def producer_joined(self, name: str) -> None:
        """A producer of ``name`` connected: its state is no longer a candidate for the purge."""
        self.inactive.pop(name, None)

    def producer_left(self, name: str, now_ms: int) -> None:
        """The producer of ``name`` left at ``now_ms`` (a name the maps do not hold is not noted)."""
        if name in self.pushed or name in self.persisted:
            self.inactive[name] = now_ms

    def purge_inactive(self, before_ms: int) -> list[str]:
        """Forget every name without a producer since before ``before_ms``: the names forgotten."""
        gone = [name for name, since in self.inactive.items() if since < before_ms]
        for name in gone:
            del self.inactive[name]
            self.pushed.pop(name, None)
            self.persisted.pop(name, None)
        return gone

    # -- snapshot and recovery -------------------------------------------------------------------------

    def snapshot(self) -> tuple[tuple[int, int] | None, dict[str, int]]:
        """The snapshot to store now: the last position covered and the persisted map (at most
        ``producers_max`` names)."""
        self._since_snapshot = 0
        self.snapshot_position = self.last_position
        kept: list[tuple[str, int]] = []
        budget = SNAPSHOT_BYTES_MAX
        for name, value in reversed(self.persisted.items()):  # the most recently updated first
            budget -= len(name.encode("utf-8", "surrogatepass")) + SNAPSHOT_ENTRY_OVERHEAD
            if budget < 0:
                break
            kept.append((name, value))
        kept.reverse()
        return self.last_position, dict(kept)

    @property
    def snapshot_behind(self) -> bool:
        """Entries were stored since the last snapshot (a timer snapshot would move the cursor)."""
        return self.last_position != self.snapshot_position

    def restore(self, properties: dict[str, int], position: tuple[int, int] | None) -> None:
        """Start from a stored snapshot (the cursor's properties and mark-delete)."""
        for name, value in properties.items():
            if 0 <= value <= SEQUENCE_ID_MAX:
                self._put(self.persisted, name, value)
                self._put(self.pushed, name, value)
        self.last_position = self.snapshot_position = position

    def replay(self, name: str, highest: int, ledger_id: int, entry_id: int) -> None:
        """A stored message found after the snapshot during recovery."""
        self.on_persisted(name, highest, ledger_id, entry_id)

    def producer_stats(self) -> dict[str, int]:
        """The persisted map (what internal stats show as the cursor's properties, live)."""
        return dict(self.persisted)

    def _put(self, table: dict[str, int], name: str, value: int) -> None:
        table.pop(name, None)
        table[name] = value
        if len(table) > self.producers_max:
            oldest = next(iter(table))
            del table[oldest]
            self.inactive.pop(oldest, None)
            if table is self.persisted:
                self.pushed.pop(oldest, None)
            else:
                self.persisted.pop(oldest, None)


def _nothing() -> None:
    pass
