"""Which local ledgers the metadata store no longer knows: BookKeeper's ``ScanAndCompareGarbageCollector``.

Theory of operation (docs/upstream.md, BookKeeper §6, invariant 12 of docs/architecture.md §3). A ledger's
metadata is written before any bookie sees the ledger, and deleting a ledger
removes its metadata only. So the collector takes the snapshot of the local ledgers *first*, then asks the
metadata store about them: a local ledger that the store does not list was deleted (one created after the
snapshot is not in it). To keep metadata reads few, the collector lists only the parent nodes that hold its
ledgers (``/ledgers/00/0000`` holds up to 10,000 of them) instead of walking the whole tree, and it re-reads
each candidate's own node before reporting it (BookKeeper's ``verifyMetadataOnGc``, always on here): only a
ledger that is absent on both reads is deleted. Every read goes through a rate limiter
(``gcMetadataOpRateLimit``; PR #4645). Any metadata error ends the comparison with nothing to delete - never
guess - and the collector does not even start one while the store reports itself unhealthy, nor acts on one
during which an outage began (``store.health``). As a guard against a bookie pointed at the wrong store or
chroot, a store without the ledgers root deletes nothing.

Over-replicated ledgers (local ledgers whose metadata no longer names this bookie) are left alone: deleting
them needs the under-replication lock of AutoRecovery, which Magnetar does not have.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from magnetar.bookkeeper.metadata import LEDGERS_ROOT, MetadataStore, ledger_path, split_ledger_path
from magnetar.gc.rate_limiter import RateLimiter

log = logging.getLogger(__name__)


class LedgersRootMissingError(Exception):
    """The metadata store has no ledgers root: probably the wrong store; nothing is deleted."""


async def find_deleted_ledgers(
    local_ledgers: Iterable[int],
    metadata: MetadataStore,
    limiter: RateLimiter,
    *,
    root: str = LEDGERS_ROOT,
) -> list[int]:
    """The ledgers of ``local_ledgers`` (a snapshot taken *before* this call) whose metadata is gone.

    Raises :class:`~magnetar.bookkeeper.metadata.MetadataStoreError` or :class:`LedgersRootMissingError`.
    """
    by_parent: dict[str, list[tuple[int, str]]] = {}
    for ledger_id in sorted(local_ledgers):
        parent, name = split_ledger_path(root, ledger_id)
        by_parent.setdefault(parent, []).append((ledger_id, name))
    if not by_parent:
        return []
    await limiter.acquire()
    if not await metadata.exists(root):
        raise LedgersRootMissingError(f"the metadata store has no {root}; refusing to delete ledgers")
    candidates: list[int] = []
    for parent, ledgers in by_parent.items():
        await limiter.acquire()
        present = set(await metadata.get_children(parent))
        candidates.extend(ledger_id for ledger_id, name in ledgers if name not in present)
    deleted: list[int] = []
    for ledger_id in candidates:
        await limiter.acquire()
        if await metadata.exists(ledger_path(root, ledger_id)):
            log.info("ledger %d reappeared in the metadata store on re-check; keeping it", ledger_id)
        else:
            deleted.append(ledger_id)
    return deleted
