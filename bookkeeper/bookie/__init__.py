"""The bookie: a storage node serving the BookKeeper protocol.

The server side lives here: :mod:`.server` (connections, the wire protocol, TLS and authentication,
registration), :mod:`.core` (the request logic without I/O), :mod:`.auth`, :mod:`.identity` and
:mod:`.cookie` (who the bookie is and which directories are its), :mod:`.registration` (the ephemeral node
in the metadata store), :mod:`.disk_monitor` (read-only mode), :mod:`.http_api`, :mod:`.metrics`,
:mod:`.settings` and :mod:`.errors`. The storage engine (journal, entry logs, RocksDB index, caches,
checkpoint, replay, and the seam garbage collection reaches it through) is :mod:`.storage`; the server
reaches it only through the :class:`~.storage.ledger_store.LedgerStore` contract.
"""
