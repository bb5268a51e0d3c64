"""The replication client: the BookKeeper ledger API (create, add, read, close, fencing and recovery)."""
