"""Persisting a durable cursor: a cursor ledger of position entries plus a metadata snapshot.

As Pulsar's ``ManagedCursorImpl``: every persistence (at most ``mark_delete_rate_per_s`` per cursor) appends a
*position entry* - the mark-delete position, up to ``unacked_ranges_persist_max`` individually acknowledged
ranges and the cursor's properties (name -> integer, set with the mark-delete: message deduplication keeps
its snapshot there) - to the cursor's own ledger. The cursor's metadata node (:class:`CursorInfo`) names that
ledger; on a clean close the final state is written to the metadata node itself (``cursorsLedgerId = -1``,
ranges capped at ``unacked_ranges_persist_in_metadata_max``) and the cursor ledger is deleted.

Recovery reads the metadata node; if it names a cursor ledger, that ledger is opened *with recovery* (fencing
a previous owner) and its last entry wins.

While the metadata store is unavailable, position entries go on to the cursor ledger (bookies only): a full
cursor ledger takes entries past ``cursor_max_entries_per_ledger`` until a new one can be created. Only a
cursor without a cursor ledger yet (just opened) waits for the store: its flushes fail and it stays dirty. A
metadata write whose outcome is unknown is settled before the next one (read back: not written, written as
ours, or someone else's - then the cursor was taken over and the managed ledger fences itself).

Whatever was acknowledged but not persisted - acks newer than the last position entry, ranges beyond the caps
- is redelivered after a failover, never skipped: every cap drops the *newest* ranges, so the persisted state
never claims more than was acknowledged.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from magnetar.bookkeeper.client import BKError, BookKeeper, LedgerHandle, NoSuchLedgerError
from magnetar.managed_ledger.errors import (
    ManagedLedgerFencedError,
    MetadataConflictError,
    MetadataUnavailableError,
)
from magnetar.managed_ledger.info import CursorInfo, MetadataFormatError, parse_acked_prefix
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings

log = logging.getLogger(__name__)

Ranges = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class CursorSnapshot:
    mark_delete: Position
    acked_ranges: Ranges
    properties: dict[str, int]
    acked_prefix: tuple[int, int, int] | None = None
    """``(ledger, entry, k)``: the first ``k`` messages of that entry are acknowledged by batch index."""


def encode_position_entry(snapshot: CursorSnapshot) -> bytes:
    body: dict[str, object] = {
        "markDelete": str(snapshot.mark_delete),
        "ranges": [list(r) for r in snapshot.acked_ranges],
    }
    if snapshot.acked_prefix is not None:
        body["batchAckedPrefix"] = list(snapshot.acked_prefix)
    if snapshot.properties:
        body["properties"] = snapshot.properties
    return json.dumps(body, separators=(",", ":")).encode()


def decode_position_entry(raw: bytes, properties: dict[str, int]) -> CursorSnapshot:
    """A position entry; its own properties when it has them (Pulsar's ``PositionInfo.properties``: the
    mark-delete's properties travel with it), else ``properties`` (the metadata node's)."""
    try:
        data = json.loads(raw)
        ranges = tuple((int(a), int(b), int(c)) for a, b, c in data["ranges"])
        acked_prefix = parse_acked_prefix(data.get("batchAckedPrefix"))
        stored = data.get("properties")
        if stored is not None:
            if not isinstance(stored, dict) or not all(
                isinstance(k, str) and type(v) is int for k, v in stored.items()
            ):
                raise ValueError("'properties' must map names to integers")
            properties = dict(stored)
        return CursorSnapshot(Position.parse(data["markDelete"]), ranges, properties, acked_prefix)
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataFormatError(f"bad cursor position entry: {exc}") from exc


class CursorStore:
    """Persistence of one durable cursor; owned by :class:`~.cursor.ManagedCursor`."""

    def __init__(
        self,
        ml_name: str,
        cursor: str,
        bk: BookKeeper,
        meta: MetaStore,
        settings: ManagedLedgerSettings,
        info_version: int,
        now_ms: int,
    ) -> None:
        self._ml_name = ml_name
        self._cursor = cursor
        self._bk = bk
        self._meta = meta
        self._settings = settings
        self._version = info_version
        self._ledger: LedgerHandle | None = None
        self._now_ms = now_ms
        self._unsettled: CursorInfo | None = None
        """A metadata write whose outcome is unknown (the store became unreachable during it)."""

    # -- recovery ---------------------------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        ml_name: str,
        cursor: str,
        bk: BookKeeper,
        meta: MetaStore,
        settings: ManagedLedgerSettings,
        snapshot: CursorSnapshot,
        now_ms: int,
    ) -> CursorStore:
        info = CursorInfo(
            -1,
            snapshot.mark_delete,
            snapshot.acked_ranges,
            snapshot.properties,
            now_ms,
            snapshot.acked_prefix,
        )
        version = await meta.put_cursor_info(ml_name, cursor, info, -1)
        return cls(ml_name, cursor, bk, meta, settings, version, now_ms)

    @classmethod
    async def recover(
        cls,
        ml_name: str,
        cursor: str,
        bk: BookKeeper,
        meta: MetaStore,
        settings: ManagedLedgerSettings,
        now_ms: int,
    ) -> tuple[CursorStore, CursorSnapshot] | None:
        versioned = await meta.get_cursor_info(ml_name, cursor)
        if versioned is None:
            return None
        info = versioned.value
        snapshot = CursorSnapshot(
            info.mark_delete, info.acked_ranges, dict(info.properties), info.acked_prefix
        )
        if info.cursor_ledger_id >= 0:
            from_ledger = await cls._read_cursor_ledger(info.cursor_ledger_id, bk, settings, snapshot)
            snapshot = from_ledger or snapshot
        store = cls(ml_name, cursor, bk, meta, settings, versioned.version, now_ms)
        # Make the recovered state the snapshot and claim the cursor (CAS), then drop the old cursor ledger.
        await store._write_snapshot(snapshot)
        if info.cursor_ledger_id >= 0:
            await store._delete_ledger(info.cursor_ledger_id)
        return store, snapshot

    @staticmethod
    async def _read_cursor_ledger(
        ledger_id: int, bk: BookKeeper, settings: ManagedLedgerSettings, fallback: CursorSnapshot
    ) -> CursorSnapshot | None:
        try:
            handle = await bk.open_ledger(
                ledger_id, password=settings.password, recovery=True, use_stored_password=True
            )
        except NoSuchLedgerError:
            return None
        except BKError as exc:
            log.warning("cursor ledger %d unreadable (%s); using the metadata snapshot", ledger_id, exc)
            return None
        try:
            lac = handle.last_add_confirmed
            if lac < 0:
                return None
            entries = await handle.read_entries(lac, lac)
            return decode_position_entry(entries[-1].payload, fallback.properties)
        except (BKError, MetadataFormatError) as exc:
            log.warning("cursor ledger %d: last entry unreadable (%s); using the snapshot", ledger_id, exc)
            return None
        finally:
            await handle.close()

    # -- persistence ------------------------------------------------------------------------------------

    async def persist(self, snapshot: CursorSnapshot) -> None:
        """Append a position entry (creating or rolling the cursor ledger as needed)."""
        capped = self._cap(snapshot, self._settings.unacked_ranges_persist_max)
        if self._ledger is not None and self._ledger_full():
            try:
                await self._switch_ledger(capped)
            except (BKError, MetadataUnavailableError) as exc:
                log.info(
                    "cursor %s/%s: no new cursor ledger yet (%s); ledger %d takes the entry past its cap",
                    self._ml_name,
                    self._cursor,
                    exc,
                    self._ledger.ledger_id,
                )
        try:
            if self._ledger is None:
                await self._switch_ledger(capped)
            assert self._ledger is not None
            await self._ledger.add_entry(encode_position_entry(capped))
        except BKError as exc:
            log.warning(
                "cursor %s/%s: cursor ledger write failed (%s); writing the snapshot to metadata",
                self._ml_name,
                self._cursor,
                exc,
            )
            self._ledger = None
            await self._write_snapshot(snapshot)

    async def close(self, snapshot: CursorSnapshot) -> None:
        """Clean close: the final state goes to the metadata node; the cursor ledger is deleted."""
        await self._write_snapshot(snapshot)
        if self._ledger is not None:
            ledger, self._ledger = self._ledger, None
            try:
                await ledger.close()
            except BKError as exc:
                log.warning("closing cursor ledger %d failed: %s", ledger.ledger_id, exc)
            await self._delete_ledger(ledger.ledger_id)

    async def delete(self) -> None:
        if self._ledger is not None:
            await self._delete_ledger(self._ledger.ledger_id)
            self._ledger = None
        await self._meta.delete_cursor(self._ml_name, self._cursor)

    # -- internals --------------------------------------------------------------------------------------

    def _ledger_full(self) -> bool:
        assert self._ledger is not None
        return self._ledger.last_add_confirmed + 1 >= self._settings.cursor_max_entries_per_ledger

    async def _switch_ledger(self, snapshot: CursorSnapshot) -> None:
        s = self._settings
        new = await self._bk.create_ledger(
            ensemble_size=s.ensemble_size,
            write_quorum=s.write_quorum,
            ack_quorum=s.ack_quorum,
            digest_type=s.digest_type,
            password=s.password,
            custom_metadata={"pulsar/cursor": f"{self._ml_name}/{self._cursor}".encode()},
        )
        info = CursorInfo(
            new.ledger_id,
            snapshot.mark_delete,
            self._cap(snapshot, s.unacked_ranges_persist_in_metadata_max).acked_ranges,
            snapshot.properties,
            self._now_ms,
            snapshot.acked_prefix,
        )
        try:
            await self._cas(info)
        except MetadataUnavailableError:
            # The metadata may not name ``new``: entries there could be missed by a recovery. Drop it.
            await self._delete_ledger(new.ledger_id)
            raise
        old, self._ledger = self._ledger, new
        if old is not None:
            try:
                await old.close()
            except BKError as exc:
                log.warning("closing cursor ledger %d failed: %s", old.ledger_id, exc)
            await self._delete_ledger(old.ledger_id)

    async def _write_snapshot(self, snapshot: CursorSnapshot) -> None:
        capped = self._cap(snapshot, self._settings.unacked_ranges_persist_in_metadata_max)
        await self._cas(
            CursorInfo(
                -1,
                capped.mark_delete,
                capped.acked_ranges,
                capped.properties,
                self._now_ms,
                capped.acked_prefix,
            )
        )

    async def _cas(self, info: CursorInfo) -> None:
        if self._unsettled is not None:
            await self._settle(self._unsettled)
        try:
            self._version = await self._meta.put_cursor_info(self._ml_name, self._cursor, info, self._version)
        except MetadataConflictError as exc:
            raise ManagedLedgerFencedError(f"cursor {self._ml_name}/{self._cursor}: {exc}") from exc
        except MetadataUnavailableError:
            self._unsettled = info
            raise

    async def _settle(self, tried: CursorInfo) -> None:
        """Find out whether ``tried`` was written (raises while the store is still unavailable)."""
        versioned = await self._meta.get_cursor_info(self._ml_name, self._cursor)
        if versioned is not None and versioned.version == self._version + 1 and versioned.value == tried:
            self._version = versioned.version
        elif versioned is None or versioned.version != self._version:
            raise ManagedLedgerFencedError(
                f"cursor {self._ml_name}/{self._cursor} was written by another owner meanwhile"
            )
        self._unsettled = None

    async def _delete_ledger(self, ledger_id: int) -> None:
        try:
            await self._bk.delete_ledger(ledger_id)
        except BKError as exc:
            log.warning("deleting cursor ledger %d failed: %s", ledger_id, exc)

    @staticmethod
    def _cap(snapshot: CursorSnapshot, ranges_max: int) -> CursorSnapshot:
        if len(snapshot.acked_ranges) <= ranges_max:
            return snapshot
        return CursorSnapshot(
            snapshot.mark_delete,
            snapshot.acked_ranges[:ranges_max],
            snapshot.properties,
            snapshot.acked_prefix,
        )
