"""Where an entry's replicas are according to ledger metadata (used by checks in tests and tools)."""

from __future__ import annotations

from magnetar.bookkeeper.client import BookieId, LedgerMetadata, write_set


def replicas_of(metadata: LedgerMetadata, entry_id: int) -> list[BookieId]:
    """The bookies the metadata says store ``entry_id`` (its write set in the ensemble that holds it)."""
    ensemble = metadata.ensemble_for(entry_id)
    return [ensemble[i] for i in write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)]
