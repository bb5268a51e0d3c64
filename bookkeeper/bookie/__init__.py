"""The bookie: a storage node serving the BookKeeper protocol over TCP (authentication, request throttling)
with its storage engine (journal, entry logs, RocksDB index, write and read caches, checkpoints and replay,
the primitives garbage collection uses), its identity in the metadata store (cookie, registration), disk
monitoring, metrics and a REST API."""
