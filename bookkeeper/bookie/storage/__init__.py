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

from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_index import index_is_empty
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.errors import (
    BookieError,
    LedgerFencedError,
    NoLedgerError,
    StorageBusyError,
    StorageInUseError,
)
from magnetar.bookkeeper.bookie.storage.gc_seam import (
    GIL_YIELD_EVERY,
    OFFSET_BITS,
    CollectableStore,
    CompactionManifest,
    CompactionResult,
    LogRecordReader,
    LogUsage,
    StepHook,
    StorageIOError,
    StoragePrimitives,
    compacting_name,
    encode_header,
    encode_ledgers_map,
    remove_file,
    run_io,
)
from magnetar.bookkeeper.bookie.storage.journal import JournalStats
from magnetar.bookkeeper.bookie.storage.journal_format import HEADER_BYTES as JOURNAL_HEADER_BYTES
from magnetar.bookkeeper.bookie.storage.journal_format import RECORD_HEADER_BYTES
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage, LedgerStore
from magnetar.bookkeeper.bookie.storage.log_mark import fsync_dir
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.bookie.storage.opening import check_not_in_use
from magnetar.bookkeeper.bookie.storage.settings import BookieDirectories, BookieStorageSettings

# Garbage collection reaches the engine through its own seam, imported by its own name: the architecture
# test lets ``magnetar.gc`` import that module and nothing else of the bookie.
_OWN_FACES = ("gc_seam",)

__all__ = [
    "GIL_YIELD_EVERY",
    "JOURNAL_HEADER_BYTES",
    "OFFSET_BITS",
    "RECORD_HEADER_BYTES",
    "BookieDirectories",
    "BookieError",
    "BookieStorageSettings",
    "CollectableStore",
    "CompactionManifest",
    "CompactionResult",
    "DbLedgerStorage",
    "DiskUsage",
    "JournalStats",
    "LedgerFencedError",
    "LedgerStore",
    "LogRecordReader",
    "LogUsage",
    "MemoryLedgerStore",
    "NoLedgerError",
    "StepHook",
    "StorageBusyError",
    "StorageIOError",
    "StorageInUseError",
    "StoragePrimitives",
    "check_not_in_use",
    "compacting_name",
    "encode_header",
    "encode_ledgers_map",
    "fsync_dir",
    "index_is_empty",
    "log_file_name",
    "open_ledger_store",
    "remove_file",
    "run_io",
]
