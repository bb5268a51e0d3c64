"""The bookie's index in RocksDB: entry locations and ledger records (DbLedgerStorage, docs/upstream.md,
BookKeeper §5.3).

Two column families of one RocksDB (through rocksdict, always ``raw_mode``), so that one write batch updates
both atomically:

* ``locations``: key ``[ledgerId:i64][entryId:i64]`` big-endian (16 bytes, so keys sort by ledger then entry),
  value ``[location:u64]`` (BookKeeper ``EntryLocationIndex``). The last entry of a ledger is a floor seek
  from ``(ledgerId, 2**63-1)``; deleting a ledger is one ``delete_range`` over its keys.
* ``ledgers``: key ``[ledgerId:i64]``, value a :class:`LedgerRecord` (BookKeeper ``LedgerMetadataIndex``:
  exists, fenced, masterKey, explicitLac), plus what *this* engine adds: the first and last entry id and the
  number of entries indexed for the ledger. With them a read of an entry the index lacks can tell "never
  written here" (NoEntry) from "lost" (an I/O error): invariant 8 of docs/architecture.md §3 forbids answering
  NoEntry for data a bookie should have.

Writes reach RocksDB at checkpoints (its WAL synced before the journal mark is persisted) and on ledger
deletion (unsynced: a deleted ledger that comes back after a crash is deleted again by garbage collection,
as in BookKeeper). rocksdict keeps the GIL during calls, so the engine issues them in bounded batches.
Iterators are deleted before the database is closed, and every handle is dropped on close.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, ColumnFamily, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState

LOCATIONS_CF = "locations"
LEDGERS_CF = "ledgers"
ENTRY_KEY = struct.Struct(">qq")
LOCATION = struct.Struct(">Q")
LEDGER_KEY = struct.Struct(">q")
ENTRY_ID_MAX = 2**63 - 1
_RECORD_HEAD = struct.Struct(">BBB")
_RECORD_TAIL = struct.Struct(">qqqI")
_RECORD_VERSION = 1
_FENCED = 0x1


class IndexFormatError(ValueError):
    """A ledger record in the index cannot be decoded."""


@dataclass(frozen=True, slots=True)
class EntryRange:
    """The entries of a ledger that the index holds: ids ``first..last``, ``count`` of them."""

    first: int
    last: int
    count: int

    @property
    def contiguous(self) -> bool:
        return self.count == self.last - self.first + 1

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, int) and self.first <= entry_id <= self.last


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    state: LedgerState
    entries: EntryRange | None = None


def encode_ledger_record(record: LedgerRecord) -> bytes:
    state, entries = record.state, record.entries
    lac = state.explicit_lac_body
    first, last, count = (entries.first, entries.last, entries.count) if entries else (-1, -1, 0)
    return b"".join(
        (
            _RECORD_HEAD.pack(_RECORD_VERSION, _FENCED if state.fenced else 0, len(state.master_key)),
            state.master_key,
            _RECORD_TAIL.pack(first, last, count, 0xFFFFFFFF if lac is None else len(lac)),
            lac or b"",
        )
    )


def decode_ledger_record(data: bytes) -> LedgerRecord:
    try:
        version, flags, key_len = _RECORD_HEAD.unpack_from(data)
        if version != _RECORD_VERSION:
            raise IndexFormatError(f"ledger record version {version}")
        pos = _RECORD_HEAD.size
        key = data[pos : pos + key_len]
        pos += key_len
        first, last, count, lac_len = _RECORD_TAIL.unpack_from(data, pos)
        pos += _RECORD_TAIL.size
    except struct.error as exc:
        raise IndexFormatError(f"ledger record is cut short: {exc}") from exc
    lac = None if lac_len == 0xFFFFFFFF else data[pos : pos + lac_len]
    if lac is not None and len(lac) != lac_len:
        raise IndexFormatError("ledger record's explicit LAC is cut short")
    entries = EntryRange(first, last, count) if count > 0 else None
    return LedgerRecord(LedgerState(bytes(key), bool(flags & _FENCED), lac), entries)


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return ENTRY_KEY.pack(ledger_id, entry_id)


class IndexClosedError(Exception):
    """The index was used after :meth:`EntryIndex.close`."""


@dataclass(slots=True)
class _Handles:
    """Everything that refers to the open database. One that stays alive keeps it open (and locked)."""

    db: Rdict
    locations: Rdict
    ledgers: Rdict
    locations_cf: ColumnFamily
    ledgers_cf: ColumnFamily


class IndexBatch:
    """Updates written together by :meth:`EntryIndex.write` (one RocksDB write batch, written once)."""

    def __init__(self, index: EntryIndex) -> None:
        self._batch: WriteBatch | None = WriteBatch(raw_mode=True)
        self._index = index
        self.size = 0

    def _parts(self) -> tuple[WriteBatch, _Handles]:
        if self._batch is None:
            raise ValueError("an index batch can be written only once")
        return self._batch, self._index.handles()

    def put_location(self, ledger_id: int, entry_id: int, loc: int) -> None:
        batch, h = self._parts()
        batch.put(ENTRY_KEY.pack(ledger_id, entry_id), LOCATION.pack(loc), h.locations_cf)
        self.size += 1

    def put_locations(self, items: list[tuple[bytes, int]]) -> None:
        """Many ``(entry_key, location)`` pairs (the checkpoint's hot path)."""
        batch, h = self._parts()
        put, cf, pack = batch.put, h.locations_cf, LOCATION.pack
        for key, loc in items:
            put(key, pack(loc), cf)
        self.size += len(items)

    def put_ledger(self, ledger_id: int, record: LedgerRecord) -> None:
        batch, h = self._parts()
        batch.put(LEDGER_KEY.pack(ledger_id), encode_ledger_record(record), h.ledgers_cf)
        self.size += 1

    def delete_ledger(self, ledger_id: int) -> None:
        batch, h = self._parts()
        first, last = ENTRY_KEY.pack(ledger_id, 0), ENTRY_KEY.pack(ledger_id, ENTRY_ID_MAX)
        batch.delete_range(first, last, h.locations_cf)
        batch.delete(last, h.locations_cf)
        batch.delete(LEDGER_KEY.pack(ledger_id), h.ledgers_cf)
        self.size += 1

    def delete_location(self, ledger_id: int, entry_id: int) -> None:
        batch, h = self._parts()
        batch.delete(ENTRY_KEY.pack(ledger_id, entry_id), h.locations_cf)
        self.size += 1

    def take(self) -> WriteBatch:
        batch, _ = self._parts()
        self._batch = None
        return batch


def index_is_empty(path: Path) -> bool:
    """The index at ``path`` holds no entry location and no ledger record (or does not exist). Opens it
    read-only: for a caller that checks a bookie's directories before the engine opens them. Anything
    that is not a readable index (a file, a damaged database) is not known to be empty: False."""
    if not path.exists():
        return True
    if not path.is_dir():
        return False
    if not (path / "CURRENT").exists():
        return not any(path.iterdir())
    families = {LOCATIONS_CF: Options(raw_mode=True), LEDGERS_CF: Options(raw_mode=True)}
    read_only = AccessType.read_only()
    try:
        db = Rdict(str(path), Options(raw_mode=True), column_families=families, access_type=read_only)
    except Exception:  # rocksdict raises plain Exceptions
        return False
    try:
        for family in (LOCATIONS_CF, LEDGERS_CF):
            keys = db.get_column_family(family).keys()
            if next(iter(keys), None) is not None:
                return False
            del keys
        return True
    finally:
        db.close()


class EntryIndex:
    """Blocking RocksDB access; every method may be called from the trio thread or a worker thread."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        families = {LOCATIONS_CF: Options(raw_mode=True), LEDGERS_CF: Options(raw_mode=True)}
        db = Rdict(str(path), options, column_families=families)
        self._h: _Handles | None = _Handles(
            db,
            db.get_column_family(LOCATIONS_CF),
            db.get_column_family(LEDGERS_CF),
            db.get_column_family_handle(LOCATIONS_CF),
            db.get_column_family_handle(LEDGERS_CF),
        )
        self._sync = WriteOptions()
        self._sync.sync = True
        self._nosync = WriteOptions()
        self._nosync.sync = False

    def handles(self) -> _Handles:
        if self._h is None:
            raise IndexClosedError("the index is closed")
        return self._h

    def batch(self) -> IndexBatch:
        return IndexBatch(self)

    def write(self, batch: IndexBatch, *, sync: bool) -> None:
        """Apply the batch atomically (once). ``sync`` also syncs RocksDB's WAL, which covers every
        earlier unsynced write too."""
        self.handles().db.write(batch.take(), self._sync if sync else self._nosync)

    def write_sync(self, batch: IndexBatch) -> None:
        self.write(batch, sync=True)

    def write_nosync(self, batch: IndexBatch) -> None:
        self.write(batch, sync=False)

    def sync_wal(self) -> None:
        """Make every write so far durable: sync RocksDB's write-ahead log."""
        self.handles().db.flush_wal(True)

    def get_location(self, ledger_id: int, entry_id: int) -> int | None:
        value = self.handles().locations.get(ENTRY_KEY.pack(ledger_id, entry_id))
        return None if value is None else int(LOCATION.unpack(value)[0])

    def get_ledger_record(self, ledger_id: int) -> LedgerRecord | None:
        value = self.handles().ledgers.get(LEDGER_KEY.pack(ledger_id))
        return None if value is None else decode_ledger_record(bytes(value))

    def last_entry_id(self, ledger_id: int) -> int | None:
        """The highest entry id indexed for the ledger (floor seek), or None."""
        it = self.handles().locations.iter(ReadOptions())
        try:
            it.seek_for_prev(ENTRY_KEY.pack(ledger_id, ENTRY_ID_MAX))
            if not it.valid():
                return None
            found_ledger, entry_id = ENTRY_KEY.unpack(it.key())
            return int(entry_id) if found_ledger == ledger_id else None
        finally:
            del it

    def count_entries(self, ledger_id: int, first: int, last: int) -> int:
        """How many entry ids in ``first..last`` the index holds for the ledger (a range scan)."""
        it = self.handles().locations.iter(ReadOptions())
        count = 0
        try:
            end = ENTRY_KEY.pack(ledger_id, last)
            it.seek(ENTRY_KEY.pack(ledger_id, first))
            while it.valid() and it.key() <= end:
                count += 1
                it.next()
        finally:
            del it
        return count

    def entries_of(self, ledger_id: int) -> Iterator[tuple[int, int]]:
        """``(entryId, location)`` of every indexed entry of the ledger, ascending (tools and GC)."""
        it = self.handles().locations.iter(ReadOptions())
        try:
            it.seek(ENTRY_KEY.pack(ledger_id, 0))
            while it.valid():
                found_ledger, entry_id = ENTRY_KEY.unpack(it.key())
                if found_ledger != ledger_id:
                    break
                yield int(entry_id), int(LOCATION.unpack(it.value())[0])
                it.next()
        finally:
            del it

    def log_references(self) -> dict[int, int]:
        """``logId -> highest offset`` the locations point at, for every entry log they point into.

        A full scan of the locations (blocking; seconds for millions of entries): the garbage collector's
        proof that no index entry points into a log before it deletes a log it could not fully read.
        """
        it = self.handles().locations.iter(ReadOptions())
        refs: dict[int, int] = {}
        unpack = LOCATION.unpack
        try:
            it.seek_to_first()
            while it.valid():
                loc = unpack(it.value())[0]
                log_id, offset = loc >> 32, loc & 0xFFFFFFFF
                if refs.get(log_id, -1) < offset:
                    refs[log_id] = offset
                it.next()
        finally:
            del it
        return refs

    def load_ledgers(self) -> Iterator[tuple[int, bytes]]:
        """``(ledgerId, encoded record)`` of every ledger, ascending."""
        it = self.handles().ledgers.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                yield int(LEDGER_KEY.unpack(it.key())[0]), bytes(it.value())
                it.next()
        finally:
            del it

    def close(self) -> None:
        """Close RocksDB and drop every handle (iterators are deleted where they are used)."""
        h, self._h = self._h, None
        if h is not None:
            h.locations.close()
            h.ledgers.close()
            h.db.close()
