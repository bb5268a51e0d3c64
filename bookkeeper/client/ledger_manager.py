"""Where ledger metadata lives in the metadata store, and how ledger ids are allocated.

The layout (docs/upstream.md, BookKeeper §1.4, BookKeeper's ``HierarchicalLedgerManager``) is defined in
:mod:`magnetar.bookkeeper.metadata.ledger_paths`, which the bookie's garbage collector reads too.

Ledger ids come from the store as in ``ZkLedgerIdGenerator``: create a sequential node under
``/ledgers/idgen/ID-``, read the sequence number from its name, delete the node. Every writer of metadata
goes through :class:`LedgerManager`, which turns store failures into client exceptions; the conditional
writes themselves are driven by :mod:`.update_loop`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from magnetar.bookkeeper.client.errors import (
    LedgerExistsError,
    MetadataVersionError,
    MetaStoreError,
    NoSuchLedgerError,
)
from magnetar.bookkeeper.client.metadata import LedgerMetadata, MetadataFormatError, Versioned
from magnetar.bookkeeper.metadata import (
    SHORT_ID_LIMIT,
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    ledger_id_of,
    ledger_path,
)

__all__ = ["SHORT_ID_LIMIT", "LedgerManager", "ledger_id_of", "ledger_path"]

IDGEN_NODE = "idgen"
IDGEN_PREFIX = "ID-"


class LedgerManager:
    def __init__(self, store: MetadataStore, root: str = "/ledgers") -> None:
        self.store = store
        self.root = root

    def path(self, ledger_id: int) -> str:
        return ledger_path(self.root, ledger_id)

    async def generate_id(self) -> int:
        """A new unique ledger id from a sequential node (created, parsed, deleted)."""
        try:
            stat = await self.store.put(
                f"{self.root}/{IDGEN_NODE}/{IDGEN_PREFIX}", b"", -1, ephemeral=True, sequential=True
            )
            name = stat.path.rsplit("/", 1)[1]
            ledger_id = int(name.removeprefix(IDGEN_PREFIX))
            await self.store.delete(stat.path)
        except MetadataStoreError as exc:
            raise MetaStoreError(f"ledger id generation failed: {exc}") from exc
        return ledger_id

    async def create(self, ledger_id: int, metadata: LedgerMetadata) -> Versioned:
        """Create the ledger's node; :class:`LedgerExistsError` if it exists (caller compares cToken)."""
        try:
            stat = await self.store.put(self.path(ledger_id), metadata.to_bytes(), -1)
        except BadVersionError:
            raise LedgerExistsError(f"ledger {ledger_id} already exists") from None
        except MetadataStoreError as exc:
            raise MetaStoreError(f"creating ledger {ledger_id} failed: {exc}") from exc
        return Versioned(metadata, stat.version)

    async def read(self, ledger_id: int) -> Versioned:
        try:
            got = await self.store.get(self.path(ledger_id))
        except MetadataStoreError as exc:
            raise MetaStoreError(f"reading ledger {ledger_id} failed: {exc}") from exc
        if got is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        try:
            return Versioned(LedgerMetadata.from_bytes(got.value), got.stat.version)
        except MetadataFormatError as exc:
            raise MetaStoreError(f"ledger {ledger_id} has unreadable metadata: {exc}") from exc

    async def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> Versioned:
        """Conditional write; :class:`MetadataVersionError` when the version moved (or the node vanished)."""
        try:
            stat = await self.store.put(self.path(ledger_id), metadata.to_bytes(), expected_version)
        except BadVersionError as exc:
            raise MetadataVersionError(f"ledger {ledger_id}: {exc}") from None
        except MetadataStoreError as exc:
            raise MetaStoreError(f"writing ledger {ledger_id} failed: {exc}") from exc
        return Versioned(metadata, stat.version)

    async def remove(self, ledger_id: int, expected_version: int | None = None) -> None:
        try:
            await self.store.delete(self.path(ledger_id), expected_version)
        except NotFoundError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        except BadVersionError as exc:
            raise MetadataVersionError(f"ledger {ledger_id}: {exc}") from None
        except MetadataStoreError as exc:
            raise MetaStoreError(f"deleting ledger {ledger_id} failed: {exc}") from exc

    async def ledger_ids(self) -> AsyncIterator[int]:
        """Every ledger id under the root, ascending (walks both hierarchies)."""
        try:
            tops = await self.store.get_children(self.root)
        except MetadataStoreError as exc:
            raise MetaStoreError(f"listing ledgers failed: {exc}") from exc
        short = sorted(t for t in tops if len(t) == 2 and t.isdigit())
        long = sorted(t for t in tops if len(t) == 3 and t.isdigit())
        for top, depth in [(t, 3) for t in short] + [(t, 5) for t in long]:
            async for ledger_id in self._walk([top], depth):
                yield ledger_id

    async def _walk(self, parts: list[str], depth: int) -> AsyncIterator[int]:
        path = "/".join([self.root, *parts])
        try:
            children = await self.store.get_children(path)
        except MetadataStoreError as exc:
            raise MetaStoreError(f"listing {path} failed: {exc}") from exc
        for child in sorted(children):
            below = [*parts, child]
            if len(below) == depth:
                ledger_id = ledger_id_of(below)
                if ledger_id is not None:
                    yield ledger_id
            elif child.isdigit():
                async for ledger_id in self._walk(below, depth):
                    yield ledger_id
