"""Fragments of a ledger and which of them need re-replication: pure functions over ledger metadata.

A ledger's *fragment* is the range of entries one ensemble stores: from the ensemble's first entry to the
entry before the next ensemble's first, or, for the last ensemble, to the closed ledger's last entry. The
last fragment of a ledger that is not CLOSED is *open*: its end is unknown and its writer may still add to it
or replace its bookies, so re-replication never touches it (BookKeeper's ``LedgerFragment.isClosed``). Every
other fragment is immutable apart from re-replication replacing its bookies.

Within a fragment, entry ``e`` is stored by the ensemble indices ``[(e + i) mod E for i < WQ]``, so the
entries a bookie at index ``k`` holds are those with ``(k - e) mod E < WQ``
(``getEntriesStripedToTheBookie``): all of them when E == WQ, a subset otherwise.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from magnetar.bookkeeper.client import BookieId, Ensemble, LedgerMetadata


@dataclass(frozen=True, slots=True)
class Fragment:
    position: int
    """Index of its ensemble in the ledger's ensembles."""
    first_entry_id: int
    last_entry_id: int | None
    """None when the fragment is open."""
    ensemble: Ensemble

    @property
    def is_closed(self) -> bool:
        return self.last_entry_id is not None

    def entry_count(self) -> int:
        if self.last_entry_id is None:
            return 0
        return max(0, self.last_entry_id - self.first_entry_id + 1)


def fragments_of(metadata: LedgerMetadata) -> list[Fragment]:
    return [
        Fragment(position, first, metadata.fragment_end(position), members)
        for position, (first, members) in enumerate(metadata.ensembles)
    ]


def entries_on_index(
    first_entry_id: int, last_entry_id: int, index: int, ensemble_size: int, write_quorum: int
) -> Iterator[int]:
    """The entries of ``first..last`` that the bookie at ensemble ``index`` stores, ascending."""
    for entry_id in range(first_entry_id, last_entry_id + 1):
        if (index - entry_id) % ensemble_size < write_quorum:
            yield entry_id


def count_on_index(
    first_entry_id: int, last_entry_id: int, index: int, ensemble_size: int, write_quorum: int
) -> int:
    """How many entries of ``first..last`` the bookie at ensemble ``index`` stores (without listing them)."""
    total = max(0, last_entry_id - first_entry_id + 1)
    if total == 0 or write_quorum >= ensemble_size:
        return total
    full, rest = divmod(total, ensemble_size)
    tail = sum(
        1 for e in range(first_entry_id, first_entry_id + rest) if (index - e) % ensemble_size < write_quorum
    )
    return full * write_quorum + tail


@dataclass(frozen=True, slots=True)
class Repair:
    """A fragment and the bookies (ensemble index -> bookie) to replace in it."""

    fragment: Fragment
    bad: Mapping[int, BookieId]


def repairs_for(metadata: LedgerMetadata, bad_bookies: Collection[BookieId]) -> list[Repair]:
    """Every fragment that names one of ``bad_bookies``, with the indices to replace (open ones included;
    the caller decides what to do with them)."""
    bad = set(bad_bookies)
    repairs = []
    for fragment in fragments_of(metadata):
        indices = {i: b for i, b in enumerate(fragment.ensemble) if b in bad}
        if indices:
            repairs.append(Repair(fragment, indices))
    return repairs


def bookies_of(metadata: LedgerMetadata) -> set[BookieId]:
    return {bookie for _, members in metadata.ensembles for bookie in members}


def open_fragment_bookies(metadata: LedgerMetadata) -> set[BookieId]:
    """The bookies of the open last fragment (empty for a closed ledger)."""
    if metadata.is_closed:
        return set()
    return set(metadata.last_ensemble[1])
