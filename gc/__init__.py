"""Retention trimming (broker side) and all of garbage collection and entry-log compaction (bookie side).

Broker side: :mod:`.retention` (with :mod:`.policies`, :mod:`.expiry`, :mod:`.backlog_quota`). Bookie side:
:mod:`.collector` (the pass: deleted ledgers, dead logs, compaction), :mod:`.ledger_gc`, :mod:`.log_usage`,
:mod:`.compactor` (which logs, how fast) and :mod:`.compaction_job` / :mod:`.compaction_log` (the
transactional copy, its commit and rollback). The storage engine is reached only through the Protocols of
:mod:`.storage_seam`; the engine keeps the compaction manifest's format and the recovery it runs at open
(docs/architecture.md §2.4).
"""
