"""AutoRecovery: an auditor that finds under-replicated ledgers and replication workers that heal them."""
