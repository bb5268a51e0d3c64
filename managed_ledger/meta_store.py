"""Where and how managed-ledger metadata is stored (Pulsar's ``MetaStoreImpl``).

``/managed-ledgers/<name>`` holds the :class:`ManagedLedgerInfo`; its children are the cursors, each holding a
:class:`CursorInfo`. Every write is a compare-and-set on the version last read: a
:class:`~magnetar.bookkeeper.metadata.BadVersionError` means someone else wrote meanwhile, which the managed
ledger treats as losing ownership (it fences itself), exactly as Pulsar does.

Any other failure of the store (ZooKeeper unreachable, the session lost mid-call) is translated here, at
the layer boundary, into :class:`~.errors.MetadataUnavailableError`, a :class:`~.errors.ManagedLedgerError`:
the managed ledger's background tasks (cursor flushes, rollovers) handle the layer's errors, so an outage of
the store fails an operation instead of escaping a task and taking the broker down. A missing node
(:class:`~magnetar.bookkeeper.metadata.NotFoundError`) is not a failure of the store and passes through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import quote, unquote

from magnetar.bookkeeper.metadata import BadVersionError, MetadataStore, MetadataStoreError, NotFoundError
from magnetar.managed_ledger.errors import MetadataConflictError, MetadataUnavailableError
from magnetar.managed_ledger.info import CursorInfo, ManagedLedgerInfo

ROOT = "/managed-ledgers"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    value: T
    version: int


def ledger_path(name: str) -> str:
    """``tenant/ns/persistent/topic`` -> ``/managed-ledgers/tenant/ns/persistent/topic``."""
    segments = name.split("/")
    if not name or any(not s or s in (".", "..") for s in segments):
        raise ValueError(f"invalid managed ledger name {name!r}")
    return f"{ROOT}/{name}"


def cursor_path(name: str, cursor: str) -> str:
    return f"{ledger_path(name)}/{quote(cursor, safe='')}"


@contextlib.contextmanager
def _store_failures(what: str) -> Iterator[None]:
    """Translate a failure of the store (not a missing node, not a lost CAS) into the layer's error."""
    try:
        yield
    except (NotFoundError, BadVersionError):
        raise
    except MetadataStoreError as exc:
        raise MetadataUnavailableError(f"{what}: metadata store failed: {exc}") from exc


class MetaStore:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def get_ledger_info(self, name: str) -> Versioned[ManagedLedgerInfo] | None:
        with _store_failures(f"get_ledger_info {name}"):
            result = await self.store.get(ledger_path(name))
            if result is None:
                return None
            return Versioned(ManagedLedgerInfo.decode(result.value), result.stat.version)

    async def put_ledger_info(self, name: str, info: ManagedLedgerInfo, version: int) -> int:
        """CAS-write; ``version=-1`` creates. Returns the new version."""
        with _store_failures(f"put_ledger_info {name}"):
            try:
                stat = await self.store.put(ledger_path(name), info.encode(), version)
            except BadVersionError as exc:
                raise MetadataConflictError(f"managed ledger {name}: {exc}") from exc
            return stat.version

    async def list_cursors(self, name: str) -> list[str]:
        with _store_failures(f"list_cursors {name}"):
            return [unquote(child) for child in await self.store.get_children(ledger_path(name))]

    async def get_cursor_info(self, name: str, cursor: str) -> Versioned[CursorInfo] | None:
        with _store_failures(f"get_cursor_info {name}"):
            result = await self.store.get(cursor_path(name, cursor))
            if result is None:
                return None
            return Versioned(CursorInfo.decode(result.value), result.stat.version)

    async def put_cursor_info(self, name: str, cursor: str, info: CursorInfo, version: int) -> int:
        with _store_failures(f"put_cursor_info {name}"):
            try:
                stat = await self.store.put(cursor_path(name, cursor), info.encode(), version)
            except BadVersionError as exc:
                raise MetadataConflictError(f"cursor {name}/{cursor}: {exc}") from exc
            return stat.version

    async def delete_cursor(self, name: str, cursor: str) -> None:
        with _store_failures(f"delete_cursor {name}"), contextlib.suppress(NotFoundError):
            await self.store.delete(cursor_path(name, cursor))

    async def delete_ledger_info(self, name: str) -> None:
        with _store_failures(f"delete_ledger_info {name}"):
            await self.store.delete_recursive(ledger_path(name))

    async def list_managed_ledgers(self, prefix: str) -> list[str]:
        """Names of managed ledgers directly under ``prefix`` (e.g. ``tenant/ns/persistent``)."""
        with _store_failures(f"list_managed_ledgers {prefix}"):
            children = await self.store.get_children(ledger_path(prefix))
            return [f"{prefix}/{child}" for child in children]
