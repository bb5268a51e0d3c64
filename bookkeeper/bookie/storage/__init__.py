"""The bookie's storage engine (BookKeeper's ``bookie/storage/ldb``): what makes an add durable and a read
find it.

:mod:`.ledger_store` is the contract the bookie's request logic calls; :mod:`.engine` implements it on disk
(``DbLedgerStorage``: :mod:`.journal` with :mod:`.journal_files` and :mod:`.journal_format`, the entry logs of
:mod:`.entry_log` and :mod:`.entry_log_format`, the RocksDB index of :mod:`.entry_index` with the ledger
records of :mod:`.ledger_registry`, the :mod:`.write_cache` with its :mod:`.add_throttle` and the
:mod:`.read_cache`, the :mod:`.checkpoint` that moves the write cache into the logs and the index, the
journal :mod:`.replay` at start, the durable :mod:`.log_mark`), and :mod:`.memory_store` in memory for
in-process bookies and the simulation. :mod:`.settings` holds every limit of the engine. Garbage collection
(``magnetar.gc``) reaches the engine only through :mod:`.gc_seam`, whose primitives are
:mod:`.gc_primitives` and whose compaction files are :mod:`.compaction_files`. Nothing here imports the
server side of the bookie; the engine's exceptions (:mod:`.errors`) carry the status codes a storage failure
becomes on the wire, and the server answers them.
"""
