"""The managed-ledger layer's exceptions (Pulsar's ``ManagedLedgerException`` family)."""

from __future__ import annotations


class ManagedLedgerError(Exception):
    """Base of the layer."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner took the managed ledger over (bookie fencing or a metadata version conflict).

    Nothing more can be written through this instance; the topic must be reloaded by its new owner.
    """


class ManagedLedgerClosedError(ManagedLedgerError):
    pass


class ManagedLedgerTerminatedError(ManagedLedgerError):
    """The topic was terminated: no more writes (readers see the end of the topic)."""


class ManagedLedgerWriteError(ManagedLedgerError):
    """An add failed; its outcome is unknown (it may or may not be in the ledger)."""


class RolloverDeferredError(ManagedLedgerError):
    """The current ledger reached ``max_entries_per_ledger + rollover_deferred_entries_max`` entries while no
    new ledger could be created (the metadata store is unavailable): the add was refused, nothing was
    written. Publishing backs off until the rollover happens."""


class ManagedLedgerNotFoundError(ManagedLedgerError):
    pass


class CursorNotFoundError(ManagedLedgerError):
    pass


class CursorAlreadyExistsError(ManagedLedgerError):
    pass


class InvalidCursorPositionError(ManagedLedgerError, ValueError):
    pass


class MetadataConflictError(ManagedLedgerError):
    """A metadata write lost a compare-and-set race."""


class MetadataUnavailableError(ManagedLedgerError):
    """The metadata store failed or could not be reached (ZooKeeper down, session lost); the operation may or
    may not have happened. Callers treat it like a failed bookie write: retry later, never crash."""
