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
