"""The bookie: a storage node serving the BookKeeper protocol (journal, entry logs, RocksDB index)."""
