"""AutoRecovery settings (BookKeeper's ``autoRecovery*`` / ``auditor*`` / ``rereplication*`` server settings).

One model, nested in the bookie's settings as ``autorecovery`` (``MAGNETAR_AUTORECOVERY__<NAME>``, a
``[autorecovery]`` table) and used as is by ``magnetar autorecovery``. BookKeeper's names and defaults where
it has them:

=============================================== ============================================ ==========
here                                            BookKeeper                                   default
=============================================== ============================================ ==========
``enabled``                                     ``autoRecoveryDaemonEnabled``                true (BK false)
``lost_bookie_recovery_delay_s``                ``lostBookieRecoveryDelay``                  0
``auditor_periodic_check_interval_s``           ``auditorPeriodicCheckInterval``             604800
``auditor_periodic_bookie_check_interval_s``    ``auditorPeriodicBookieCheckInterval``       86400
``auditor_periodic_placement_policy_check_...`` ``auditorPeriodicPlacementPolicyCheck...``   86400 (BK 0)
``auditor_ledger_verification_percentage``      ``auditorLedgerVerificationPercentage``      0
``open_ledger_rereplication_grace_period_ms``   ``openLedgerRereplicationGracePeriod``       30000
``rereplication_entry_batch_size``              ``rereplicationEntryBatchSize``              10
``rereplicate_backoff_ms``                      ``rwRereplicateBackoffMs``                   5000
``lock_release_of_failed_ledger_grace_...``     ``lockReleaseOfFailedLedgerGracePeriod``     300000
=============================================== ============================================ ==========

``lost_bookie_recovery_delay_s`` is only the initial value: the live one is the metadata node
``/ledgers/underreplication/lostBookieRecoveryDelay``, which any daemon writes when it is absent and
operators change with the bookie REST API; the auditor follows changes at once. Magnetar's own:
``rereplication_rate_bytes_per_s`` / ``rereplication_rate_entries_per_s`` (0 = unlimited) cap what one
process copies, so producers keep their latency while a lost bookie is healed; ``underreplicated_poll_ms``
bounds how long an idle worker waits before it looks for marks again when no change notification came;
``lost_bookie_grace_after_outage_s`` holds off declaring bookies lost right after a metadata-store outage
(the auditor and the workers pause while the store is unhealthy; see the auditor's docstring).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from magnetar.bookkeeper.client import (
    BookieClientSecurity,
    ClientSettings,
    RackPlacementSettings,
    RequestTimeouts,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
IntervalS = Annotated[int, Field(ge=0, le=366 * 86_400)]
"""A periodic check's interval in seconds (0 = never; at most a year)."""


AUTORECOVERY_REQUEST_TIMEOUTS_MS: dict[str, int] = {"add_timeout_ms": 10_000, "read_timeout_ms": 10_000}
"""AutoRecovery's defaults of the client's request timeouts (a broker's are 5,000 ms): a copy runs in the
background, so it waits longer for a slow bookie before it gives the fragment up and tries again."""


class AutoRecoverySettings(BookieClientSecurity, RequestTimeouts, RackPlacementSettings):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Run the AutoRecovery daemon (auditor election + a replication worker) inside the bookie."""
    lost_bookie_recovery_delay_s: Annotated[int, Field(ge=0, le=86_400)] = 0
    """How long a bookie may be gone before its ledgers are marked under-replicated (initial value)."""
    lost_bookie_grace_after_outage_s: Annotated[int, Field(ge=0, le=3_600)] = 60
    """After an outage of the metadata store, a bookie found missing counts as missing only from this long
    after the store is back: its registration may have vanished with its session and be on its way back."""
    auditor_periodic_check_interval_s: IntervalS = 604_800
    """Full check of every ledger's ensembles against the live bookies, plus the read check; 0 = never."""
    auditor_periodic_bookie_check_interval_s: IntervalS = 86_400
    """Re-audit of the lost bookies' ledgers even without a change of bookies; 0 = never."""
    auditor_periodic_placement_policy_check_interval_s: IntervalS = 86_400
    """Mark closed ledgers whose write sets span fewer racks than the placement policy asks; 0 = never."""
    auditor_ledger_verification_percentage: Annotated[int, Field(ge=0, le=100)] = 0
    """Share of each fragment's entries the periodic check reads from every replica (first and last
    entries of each fragment are always read when above 0)."""
    open_ledger_rereplication_grace_period_ms: Annotated[int, Field(ge=0, le=DAY_MS)] = 30_000
    """An open ledger's last fragment on a lost bookie is left to its writer this long, then the ledger is
    recovered (fenced and closed) so that it can be replicated."""
    rereplication_entry_batch_size: Annotated[int, Field(ge=1, le=10_000)] = 10
    """Entries one fragment copy keeps in flight (read from a survivor, written to the new bookie)."""
    rereplication_rate_bytes_per_s: Annotated[int, Field(ge=0, le=10 * 2**30)] = 0
    """Bytes per second one process copies at most (0 = unlimited)."""
    rereplication_rate_entries_per_s: Annotated[int, Field(ge=0, le=10_000_000)] = 0
    """Entries per second one process copies at most (0 = unlimited)."""
    rereplicate_backoff_ms: Annotated[int, Field(ge=0, le=HOUR_MS)] = 5_000
    """Pause of a worker after a ledger it could not replicate."""
    lock_release_of_failed_ledger_grace_period_ms: Annotated[int, Field(ge=0, le=DAY_MS)] = 300_000
    """A ledger whose replication failed stays locked this long, so workers do not spin on it."""
    underreplicated_poll_ms: Annotated[int, Field(gt=0, le=HOUR_MS)] = 5_000
    """An idle worker looks for marks at least this often (changes are normally notified at once)."""
    metadata_walk_in_flight_max: Annotated[int, Field(ge=1, le=1024)] = 32
    """Ledger metadata reads the auditor keeps in flight while it scans every ledger."""

    # min_num_racks_per_write_quorum / enforce_min_num_racks_per_write_quorum (where a new bookie goes):
    # RackPlacementSettings'; add_timeout_ms / read_timeout_ms (a copy written to a new bookie, a read from a
    # survivor): RequestTimeouts', defaulting to AUTORECOVERY_REQUEST_TIMEOUTS_MS here; bookkeeper_auth_token
    # and bookkeeper_tls_* (the token and TLS files): BookieClientSecurity's

    @model_validator(mode="before")
    @classmethod
    def _autorecovery_timeouts(cls, data: Any) -> Any:
        """AutoRecovery's defaults of the request timeouts, under whatever was given for them."""
        if not isinstance(data, dict):
            return data
        return {**AUTORECOVERY_REQUEST_TIMEOUTS_MS, **data}

    @property
    def grace_period_s(self) -> float:
        return self.open_ledger_rereplication_grace_period_ms / 1000

    def client_settings(self) -> ClientSettings:
        """The replication client's settings: the client's defaults with AutoRecovery's request timeouts and
        placement (quorums do not matter: it never creates ledgers)."""
        shared = {*RequestTimeouts.model_fields, *RackPlacementSettings.model_fields}
        own = {name: getattr(self, name) for name in sorted(shared)}
        return ClientSettings.model_validate({**own, "ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1})
