"""The auditor's decisions as pure functions (no store, no network): tested exhaustively with hypothesis.

* :func:`lost_bookies` - which bookies are lost: named by some ledger's ensembles, not registered (writable
  or read-only), and gone for at least the lost-bookie recovery delay (or being decommissioned).
* :func:`under_replicated` - given every ledger's metadata and the bookies that count as alive, which ledgers
  are under-replicated and which of their bookies are missing (BookKeeper's ``BookieLedgerIndexer`` followed
  by ``publishSuspectedLedgers``). A ledger is under-replicated when any of its ensembles - closed fragments
  and the open last one alike - names a bookie that is not alive: the open last fragment is the writer's to
  fix first, and the worker gives it a grace period before it recovers the ledger.
* :func:`placement_repairs` - closed fragments whose write sets span fewer racks than the placement policy
  asks although more racks are available, with the member to move (the one whose rack is most repeated).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from magnetar.bookkeeper.autorecovery.fragments import bookies_of, fragments_of
from magnetar.bookkeeper.client import DEFAULT_RACK, BookieId, LedgerMetadata, racks_needed, write_set_racks


def bookie_ledger_index(ledgers: Mapping[int, LedgerMetadata]) -> dict[BookieId, set[int]]:
    """Bookie -> the ledgers whose ensembles name it."""
    index: dict[BookieId, set[int]] = {}
    for ledger_id, metadata in ledgers.items():
        for bookie in bookies_of(metadata):
            index.setdefault(bookie, set()).add(ledger_id)
    return index


def lost_bookies(
    known: Collection[BookieId],
    registered: Collection[BookieId],
    missing_since: Mapping[BookieId, float],
    now: float,
    delay_s: float,
    decommissioning: Collection[BookieId] = (),
) -> set[BookieId]:
    """Bookies of ``known`` that are lost at ``now``: decommissioning ones, and unregistered ones missing for
    ``delay_s`` or more (a bookie with no ``missing_since`` is taken as missing since ``now``)."""
    alive = set(registered)
    lost = {b for b in known if b in set(decommissioning)}
    for bookie in known:
        # ``since + delay <= now`` is the very expression the auditor's wake-up deadline is: a bookie is lost
        # when that deadline comes (``now - since >= delay`` can round to just below it and spin forever)
        if bookie not in alive and missing_since.get(bookie, now) + delay_s <= now:
            lost.add(bookie)
    return lost


def under_replicated(
    ledgers: Mapping[int, LedgerMetadata], alive: Collection[BookieId]
) -> dict[int, frozenset[BookieId]]:
    """Ledger -> its bookies that are not ``alive``, for every ledger that has any."""
    live = set(alive)
    out: dict[int, frozenset[BookieId]] = {}
    for ledger_id, metadata in ledgers.items():
        missing = frozenset(b for b in bookies_of(metadata) if b not in live)
        if missing:
            out[ledger_id] = missing
    return out


def placement_repairs(
    metadata: LedgerMetadata, racks: Mapping[BookieId, str], min_racks: int, racks_available: int
) -> dict[int, tuple[int, BookieId]]:
    """Closed fragment position -> (index, bookie) to move so that its write sets can span more racks.
    Fragments whose bookies' racks are not all known are left alone (a bookie that is not alive is the
    lost-bookie check's business)."""
    need = racks_needed(min_racks, metadata.write_quorum, racks_available)
    out: dict[int, tuple[int, BookieId]] = {}
    for fragment in fragments_of(metadata):
        if not fragment.is_closed or fragment.entry_count() == 0:
            continue
        if any(b not in racks for b in fragment.ensemble):
            continue
        placed = [racks.get(b, DEFAULT_RACK) for b in fragment.ensemble]
        if min(write_set_racks(placed, metadata.write_quorum)) >= need:
            continue
        counts = {rack: placed.count(rack) for rack in placed}
        index = max(range(len(placed)), key=lambda i: (counts[placed[i]], i))
        out[fragment.position] = (index, fragment.ensemble[index])
    return out
