"""Bookie discovery and ensemble placement (BookKeeper's ``DefaultEnsemblePlacementPolicy``).

Writable bookies are the children of ``<root>/available`` except the child ``readonly`` (under which
read-only bookies register). A new ensemble is E distinct writable bookies drawn at random (the injected
``random.Random``, so simulations are reproducible). Bookies that failed recently are *quarantined* for
``bookie_quarantine_ms`` and avoided - but, as BookKeeper does, used again when there are not enough
others. Bookies passed in ``exclude`` (the ones being replaced) are never chosen.

Replacement (``replaceBookiesInEnsemble``): each failed index gets a new bookie not already in the ensemble;
if *no* index could be replaced the change fails with :class:`NotEnoughBookiesError`; a partial replacement
is accepted (the unreplaced bookie stays and may fail again).

Discovery reads the store directly; ``magnetar.bookkeeper.metadata.bookies.list_bookies`` (written
separately) is the shared helper for the same layout.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

from magnetar.bookkeeper.client.errors import MetaStoreError, NotEnoughBookiesError
from magnetar.bookkeeper.client.transport import BookieId
from magnetar.bookkeeper.metadata.api import MetadataStore, MetadataStoreError
from magnetar.bookkeeper.runtime.clock import Clock

READONLY_CHILD = "readonly"


async def writable_bookies(store: MetadataStore, root: str = "/ledgers") -> list[BookieId]:
    """Registered writable bookies, sorted."""
    try:
        children = await store.get_children(f"{root}/available")
    except MetadataStoreError as exc:
        raise MetaStoreError(f"listing bookies failed: {exc}") from exc
    return sorted(c for c in children if c != READONLY_CHILD)


class EnsemblePlacement:
    def __init__(
        self, store: MetadataStore, root: str, rng: random.Random, clock: Clock, quarantine_s: float
    ) -> None:
        self._store = store
        self._root = root
        self._rng = rng
        self._clock = clock
        self._quarantine_s = quarantine_s
        self._quarantined: dict[BookieId, float] = {}  # bookie -> release time (monotonic)

    def quarantine(self, bookie: BookieId) -> None:
        if self._quarantine_s > 0:
            self._quarantined[bookie] = self._clock.monotonic() + self._quarantine_s

    def _is_quarantined(self, bookie: BookieId) -> bool:
        release = self._quarantined.get(bookie)
        if release is None:
            return False
        if release <= self._clock.monotonic():
            del self._quarantined[bookie]
            return False
        return True

    async def candidates(self) -> list[BookieId]:
        return await writable_bookies(self._store, self._root)

    async def new_ensemble(self, size: int, exclude: Collection[BookieId] = ()) -> list[BookieId]:
        return self.choose(await self.candidates(), size, exclude)

    def choose(
        self, available: Sequence[BookieId], size: int, exclude: Collection[BookieId]
    ) -> list[BookieId]:
        """``size`` distinct bookies from ``available`` minus ``exclude``, healthy ones preferred."""
        usable = [b for b in available if b not in exclude]
        healthy = [b for b in usable if not self._is_quarantined(b)]
        pool = healthy if len(healthy) >= size else usable
        if len(pool) < size:
            raise NotEnoughBookiesError(
                f"need {size} bookies, {len(usable)} writable (excluding {sorted(exclude)})"
            )
        return self._rng.sample(pool, size)

    def replace(
        self,
        ensemble: Sequence[BookieId],
        failed: Mapping[int, BookieId],
        available: Sequence[BookieId],
        exclude: Collection[BookieId] = (),
    ) -> list[BookieId]:
        """A copy of ``ensemble`` with as many failed indices replaced as possible (at least one)."""
        new = list(ensemble)
        banned = set(exclude) | set(failed.values())
        replaced = 0
        for index in sorted(failed):
            if new[index] != failed[index]:
                continue
            try:
                (pick,) = self.choose(available, 1, banned | set(new))
            except NotEnoughBookiesError:
                continue
            new[index] = pick
            replaced += 1
        if replaced == 0:
            raise NotEnoughBookiesError(
                f"no replacement for {sorted(failed.values())}: {len(available)} bookies available"
            )
        return new
