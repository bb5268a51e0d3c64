"""Retention trimming (broker side) and all of garbage collection and entry-log compaction (bookie side).

Broker side: :mod:`.retention` (with :mod:`.policies`, :mod:`.expiry`, :mod:`.backlog_quota`). Bookie side:
:mod:`.collector` (the pass: deleted ledgers, dead logs, compaction), :mod:`.ledger_gc`, :mod:`.log_usage`,
:mod:`.compactor` (which logs, how fast) and :mod:`.compaction_job` / :mod:`.compaction_log` (the
transactional copy, its commit and rollback). The storage engine is reached only through its face for GC,
:mod:`magnetar.bookkeeper.bookie.storage.gc_seam` (Protocols, value types, on-disk format pieces); the
engine keeps the compaction manifest's format and the recovery it runs at open (docs/architecture.md §2.4).
Attaching a collector to a bookie process, and its HTTP endpoints on the bookie's HTTP server, are the
composition root's (``magnetar.admin.processes``).
"""

from magnetar.gc.backlog_quota import BacklogQuotaMonitor
from magnetar.gc.collector import BookieGarbageCollector, DiskPressure
from magnetar.gc.expiry import backlog_bytes, expire_cursor
from magnetar.gc.gc_metrics import GcMetrics
from magnetar.gc.policies import BacklogPolicy, BacklogQuotaLimit, TopicRetentionPolicies
from magnetar.gc.retention import RetentionService, RetentionStats
from magnetar.gc.settings import GcSettings, RetentionSettings

__all__ = [
    "BacklogPolicy",
    "BacklogQuotaLimit",
    "BacklogQuotaMonitor",
    "BookieGarbageCollector",
    "DiskPressure",
    "GcMetrics",
    "GcSettings",
    "RetentionService",
    "RetentionSettings",
    "RetentionStats",
    "TopicRetentionPolicies",
    "backlog_bytes",
    "expire_cursor",
]
