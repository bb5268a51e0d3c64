"""Managed-ledger settings, named as Pulsar's ``managedLedger*`` options with units last.

Ledger passwords (Pulsar's ``managedLedgerPassword`` and ``managedLedgerDigestType``): the ledgers and cursor
ledgers a managed ledger creates get ``password`` and ``digest_type``. The password yields each ledger's
master key, which the bookies require on every add and fencing read of that ledger, so a client that may talk
to the bookies but does not know the password can neither write to nor fence a topic's ledgers. A ledger
records its password and digest type in its metadata (as BookKeeper's does), and the managed ledger opens an
existing ledger with the recorded ones: changing the password applies to new ledgers, and ledgers written
before (the empty password of earlier versions included) stay readable and recoverable.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from magnetar.bookkeeper.client import LedgerDigestSettings, QuorumSettings
from magnetar.managed_ledger.rollover import RolloverLimits


class ManagedLedgerOptions(BaseModel):
    """Every limit of the managed ledger that a process exposes (what the broker composes as its
    ``managed_ledger``); :class:`ManagedLedgerSettings` adds what the process sets itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_entries_per_ledger: int = Field(50_000, ge=1)
    max_size_per_ledger_mb: int = Field(2048, ge=1)
    max_ledger_rollover_time_min: float = Field(240, ge=0)
    min_ledger_rollover_time_min: float = Field(10, ge=0)
    rollover_jitter_fraction: float = Field(0.05, ge=0, le=1)
    rollover_check_interval_s: float = Field(60, gt=0)
    """How often idle topics are checked for a due rollover (so retention works on quiet topics)."""

    rollover_deferred_entries_max: int = Field(50_000, ge=0, le=10_000_000)
    """How far past ``max_entries_per_ledger`` the current ledger may take entries while the next ledger
    cannot be created (the metadata store is unavailable); beyond it adds fail at once with the producer's
    error result until the rollover happens (0: none past the cap)."""
    rollover_create_wait_ms: int = Field(500, ge=0, le=60_000)
    """How long adds wait at the entry cap for the next ledger to be created before the current ledger takes
    them past the cap (so a slow metadata store does not stall publishing, and a healthy one keeps ledgers
    at exactly ``max_entries_per_ledger``)."""
    rollover_retry_interval_ms: int = Field(1_000, ge=10, le=600_000)
    """Pause between attempts to create the next ledger while a rollover is deferred (after the metadata store
    reports itself healthy again, if it was not)."""

    pending_adds_max: int = Field(10_000, ge=1)
    """Adds waiting for a ledger (during rollover) or in flight; more adds wait (back-pressure)."""

    cursor_max_entries_per_ledger: int = Field(50_000, ge=1)
    mark_delete_rate_per_s: float = Field(1.0, gt=0)
    """Cursor positions are persisted at most this often per cursor (Pulsar's markDeleteRateLimit)."""
    unacked_ranges_persist_max: int = Field(10_000, ge=0)
    unacked_ranges_persist_in_metadata_max: int = Field(1000, ge=0)

    entry_cache_bytes_max: int = Field(64 * 1024 * 1024, ge=0)
    read_batch_entries_max: int = Field(1000, ge=1)
    read_handles_cached_max: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _check_relations(self) -> Self:
        if self.max_ledger_rollover_time_min and (
            self.min_ledger_rollover_time_min > self.max_ledger_rollover_time_min
        ):
            raise ValueError("min_ledger_rollover_time_min must not exceed max_ledger_rollover_time_min")
        return self

    def rollover_limits(self) -> RolloverLimits:
        return RolloverLimits(
            max_entries=self.max_entries_per_ledger,
            max_size_bytes=self.max_size_per_ledger_mb * 1024 * 1024,
            max_time_ms=int(self.max_ledger_rollover_time_min * 60_000),
            min_time_ms=int(self.min_ledger_rollover_time_min * 60_000),
        )


class ManagedLedgerSettings(QuorumSettings, ManagedLedgerOptions, LedgerDigestSettings):
    """The managed ledger's settings: its options, the quorum, and the identity of its new ledgers (their
    password, and the client's ``digest_type``)."""

    password: bytes = Field(b"", repr=False)
    """Password of new ledgers (the brokers set a secret one; see the module's docstring)."""
    metadata_operation_timeout_s: float = Field(60, gt=0)
    """How long one metadata-store operation may take (the broker's ``metadata_operation_timeout_ms``)."""
