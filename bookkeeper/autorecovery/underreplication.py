"""The under-replication records in the metadata store (BookKeeper's ``LedgerUnderreplicationManager``).

Paths are in :mod:`magnetar.bookkeeper.metadata.underreplication_paths`. A *mark* says that a ledger needs
re-replication and which bookies were found missing; its value is JSON with the field names of BookKeeper's
``UnderreplicatedLedgerFormat``: ``{"replica": ["host:port", ...], "ctime": <ms>}``.

* :meth:`UnderreplicationManager.mark` creates the mark, or adds the new bookies to an existing one with a
  compare-and-set (re-read and retry on a conflict), as ``markLedgerUnderreplicatedAsync``: marking is
  idempotent and never loses a bookie another auditor run added.
* A worker takes a ledger by creating its *lock* (ephemeral, so a crashed worker's locks vanish with its
  session) and, once the ledger is healed, deletes the mark *at the version it read*
  (:meth:`mark_replicated`): if the auditor added a bookie meanwhile, the delete fails and the mark stays for
  another pass.
* :meth:`forget_bookies` removes bookies from every mark (a bookie that came back) and deletes marks left
  empty - the fix for BookKeeper #2766, where ledgers stayed marked although their bookies had returned.
* The switch (``disable`` node), the live ``lostBookieRecoveryDelay`` and the decommissioning list are
  read and written here too.

Store failures surface as :class:`~magnetar.bookkeeper.metadata.api.MetadataStoreError`; callers retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass

from magnetar.bookkeeper.metadata import (
    LEDGERS_ROOT,
    VOTE_PREFIX,
    BadVersionError,
    MetadataStore,
    NotEmptyError,
    NotFoundError,
    auditor_election_path,
    decommissioning_path,
    disable_path,
    ledger_id_of_ur_node,
    lost_bookie_recovery_delay_path,
    ur_ledger_path,
    ur_ledgers_path,
    ur_lock_path,
)
from magnetar.bookkeeper.runtime import Clock, SystemClock

log = logging.getLogger(__name__)

MARK_RETRIES_MAX = 32
"""Compare-and-set attempts to update one mark before giving up (conflicts mean other writers progress)."""


class MarkFormatError(ValueError):
    """A mark's value is not a mark."""


@dataclass(frozen=True, slots=True)
class Mark:
    ledger_id: int
    missing: frozenset[str]
    """The bookies found missing (BookKeeper's ``replica`` list)."""
    ctime_ms: int
    version: int

    def to_bytes(self) -> bytes:
        return encode_mark(self.missing, self.ctime_ms)


def encode_mark(missing: Collection[str], ctime_ms: int) -> bytes:
    return json.dumps({"replica": sorted(missing), "ctime": ctime_ms}).encode()


def decode_mark(ledger_id: int, value: bytes, version: int) -> Mark:
    try:
        document = json.loads(value)
        replicas = document["replica"]
        if not isinstance(replicas, list) or not all(isinstance(r, str) for r in replicas):
            raise TypeError("replica must be a list of bookie ids")
        return Mark(ledger_id, frozenset(replicas), int(document.get("ctime", 0)), version)
    except (ValueError, KeyError, TypeError) as exc:
        raise MarkFormatError(f"mark of ledger {ledger_id} is unreadable: {exc}") from None


class UnderreplicationManager:
    def __init__(self, store: MetadataStore, root: str = LEDGERS_ROOT, clock: Clock | None = None) -> None:
        self.store = store
        self.root = root
        self._clock = clock or SystemClock()

    # -- marks -------------------------------------------------------------------------------------------

    async def mark(self, ledger_id: int, missing: Collection[str]) -> bool:
        """Mark ``ledger_id`` under-replicated with ``missing`` (merged into an existing mark). True when the
        store changed."""
        path = ur_ledger_path(ledger_id, self.root)
        for _ in range(MARK_RETRIES_MAX):
            current = await self.get_mark(ledger_id)
            if current is None:
                try:
                    await self.store.put(path, encode_mark(missing, self._clock.time_ms()), -1)
                    return True
                except BadVersionError:
                    continue
            merged = current.missing | frozenset(missing)
            if merged == current.missing:
                return False
            try:
                await self.store.put(path, encode_mark(merged, self._clock.time_ms()), current.version)
                return True
            except BadVersionError:
                continue
        raise BadVersionError(f"{path}: gave up after {MARK_RETRIES_MAX} conflicting updates")

    async def get_mark(self, ledger_id: int) -> Mark | None:
        got = await self.store.get(ur_ledger_path(ledger_id, self.root))
        if got is None:
            return None
        try:
            return decode_mark(ledger_id, got.value, got.stat.version)
        except MarkFormatError:
            log.error("mark of ledger %d is unreadable; treating it as naming no bookie", ledger_id)
            return Mark(ledger_id, frozenset(), 0, got.stat.version)

    async def marked_ledgers(self) -> AsyncIterator[int]:
        """Every marked ledger id, ascending (walks the four levels of the marks' tree)."""
        async for ledger_id in self._walk(ur_ledgers_path(self.root), 4):
            yield ledger_id

    async def marks(self) -> list[Mark]:
        found: list[Mark] = []
        async for ledger_id in self.marked_ledgers():
            mark = await self.get_mark(ledger_id)
            if mark is not None:
                found.append(mark)
        return found

    async def _walk(self, path: str, levels: int) -> AsyncIterator[int]:
        for child in await self.store.get_children(path):
            below = f"{path}/{child}"
            if levels == 0:
                ledger_id = ledger_id_of_ur_node(child)
                if ledger_id is not None:
                    yield ledger_id
            elif len(child) == 4:
                async for ledger_id in self._walk(below, levels - 1):
                    yield ledger_id

    async def mark_replicated(self, mark: Mark) -> bool:
        """Delete ``mark`` if it is still at the version it was read at; False when it changed or is gone."""
        path = ur_ledger_path(mark.ledger_id, self.root)
        try:
            await self.store.delete(path, mark.version)
        except (BadVersionError, NotFoundError):
            return False
        await self._prune(path)
        return True

    async def delete_mark(self, ledger_id: int) -> None:
        """Drop the mark whatever it says (the ledger no longer exists)."""
        path = ur_ledger_path(ledger_id, self.root)
        with contextlib.suppress(NotFoundError):
            await self.store.delete(path)
        await self._prune(path)

    async def _prune(self, path: str) -> None:
        """Remove the mark's now-empty parent levels (another mark may share them: then they stay)."""
        parent = path
        for _ in range(4):
            parent = parent.rsplit("/", 1)[0]
            try:
                await self.store.delete(parent)
            except (NotEmptyError, NotFoundError, BadVersionError):
                return

    async def forget_bookies(self, bookies: Collection[str]) -> int:
        """Remove ``bookies`` from every mark; a mark left naming no bookie is deleted. Returns the number of
        marks deleted."""
        gone = frozenset(bookies)
        deleted = 0
        for mark in await self.marks():
            if not mark.missing & gone:
                continue
            left = mark.missing - gone
            path = ur_ledger_path(mark.ledger_id, self.root)
            try:
                if left:
                    await self.store.put(path, encode_mark(left, mark.ctime_ms), mark.version)
                elif await self.mark_replicated(mark):
                    deleted += 1
            except BadVersionError:
                continue  # changed meanwhile: the next audit looks again
        return deleted

    # -- locks -------------------------------------------------------------------------------------------

    async def try_lock(self, ledger_id: int, owner: str) -> bool:
        value = json.dumps({"owner": owner}).encode()
        try:
            await self.store.put(ur_lock_path(ledger_id, self.root), value, -1, ephemeral=True)
        except BadVersionError:
            return False
        return True

    async def release(self, ledger_id: int) -> None:
        with contextlib.suppress(NotFoundError):
            await self.store.delete(ur_lock_path(ledger_id, self.root))

    async def is_locked(self, ledger_id: int) -> bool:
        return await self.store.exists(ur_lock_path(ledger_id, self.root))

    # -- the switch, the delay, the decommissioning list, the auditor ----------------------------------

    async def is_enabled(self) -> bool:
        return not await self.store.exists(disable_path(self.root))

    async def set_enabled(self, enabled: bool) -> None:
        path = disable_path(self.root)
        if enabled:
            with contextlib.suppress(NotFoundError):
                await self.store.delete(path)
        else:
            with contextlib.suppress(BadVersionError):
                await self.store.put(path, b"", -1)

    async def initialize_delay_s(self, default_s: int) -> int:
        """The live lost-bookie recovery delay; ``default_s`` is written first if there is none."""
        with contextlib.suppress(BadVersionError):
            await self.store.put(lost_bookie_recovery_delay_path(self.root), str(default_s).encode(), -1)
        return await self.get_delay_s(default_s)

    async def get_delay_s(self, default_s: int = 0) -> int:
        got = await self.store.get(lost_bookie_recovery_delay_path(self.root))
        if got is None:
            return default_s
        try:
            return max(0, int(got.value.decode().strip()))
        except ValueError:
            log.error("lostBookieRecoveryDelay holds %r; using %d s", got.value[:40], default_s)
            return default_s

    async def set_delay_s(self, delay_s: int) -> None:
        """Write the delay - even the same value: the auditor treats a rewrite as "audit now"."""
        await self.store.put(lost_bookie_recovery_delay_path(self.root), str(delay_s).encode(), None)

    async def decommissioning(self) -> list[str]:
        return await self.store.get_children(decommissioning_path(self.root))

    async def set_decommissioning(self, bookie: str, decommissioning: bool) -> None:
        path = f"{decommissioning_path(self.root)}/{bookie}"
        if decommissioning:
            with contextlib.suppress(BadVersionError):
                await self.store.put(path, json.dumps({"since": self._clock.time_ms()}).encode(), -1)
        else:
            with contextlib.suppress(NotFoundError):
                await self.store.delete(path)

    async def current_auditor(self) -> str | None:
        """The id of the daemon whose vote is lowest (the elected auditor), or None."""
        path = auditor_election_path(self.root)
        votes = sorted(c for c in await self.store.get_children(path) if c.startswith(VOTE_PREFIX))
        for vote in votes:
            got = await self.store.get(f"{path}/{vote}")
            if got is None:
                continue  # its owner left meanwhile
            try:
                return str(json.loads(got.value)["bookieId"])
            except (ValueError, KeyError, TypeError):
                log.error("auditor vote %s is unreadable: %r", vote, got.value[:80])
                return None
        return None
