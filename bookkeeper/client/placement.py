"""Bookie discovery and ensemble placement (BookKeeper's ``RackawareEnsemblePlacementPolicy``, which
degenerates to its ``DefaultEnsemblePlacementPolicy`` when no bookie carries a rack).

Candidates. Writable bookies are the children of ``<root>/available`` except the child ``readonly`` (under
which read-only bookies register), minus the bookies being decommissioned
(``<root>/underreplication/decommissioning``). Each bookie's rack (or zone) comes from its registration
(``properties.rack``); a bookie without one is in :data:`DEFAULT_RACK`. Racks are cached per bookie for
``rack_cache_s`` (a registration's value does not change while the bookie runs).

Choosing an ensemble of E bookies with write quorum W. Every entry is stored on the W consecutive ensemble
members of its write set ``[(e + i) mod E]``, so the goal is that every such window spans as many racks as
possible: candidates are grouped by rack (members and racks shuffled with the injected ``random.Random``, so
simulations are reproducible) and picked round-robin across the racks - the picks take as many distinct racks
as there are, as evenly as possible, and consecutive picks come from different racks, which is the order the
ensemble keeps. With one rack this is a uniform random sample. ``min_num_racks_per_write_quorum`` is the
floor a write set should reach (capped at W and at the racks that exist); with
``enforce_min_num_racks_per_write_quorum`` an ensemble or replacement below it is refused
(:class:`NotEnoughBookiesError`) instead of accepted as the best available.

Replacement (``replaceBookiesInEnsemble``): each failed index gets a new bookie not already in the ensemble,
the one that leaves the write sets through that index spanning the most racks (ties at random); if *no*
index could be replaced the change fails with :class:`NotEnoughBookiesError`; a partial replacement is
accepted (the unreplaced bookie stays and may fail again). Re-replication uses the same replacement.

Bookies that failed recently are *quarantined* for ``bookie_quarantine_ms`` and avoided - but, as BookKeeper
does, used again when there are not enough others. Bookies passed in ``exclude`` are never chosen; two
replicas of an entry never share a bookie because an ensemble never holds a bookie twice.

:func:`placement_adheres` is the check the auditor's placement pass applies to existing ensembles.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from magnetar.bookkeeper.client.errors import MetaStoreError, NotEnoughBookiesError
from magnetar.bookkeeper.client.transport import BookieId
from magnetar.bookkeeper.metadata import MetadataStore, MetadataStoreError, decommissioning_path
from magnetar.bookkeeper.runtime import Clock

READONLY_CHILD = "readonly"
DEFAULT_RACK = "/default-rack"
"""BookKeeper's name for the rack of a bookie whose rack is unknown."""

Racks = Mapping[BookieId, str]
"""Bookie -> rack of the bookies that may be chosen."""


@dataclass(frozen=True, slots=True)
class RackPolicy:
    min_num_racks_per_write_quorum: int = 2
    enforce_min_num_racks_per_write_quorum: bool = False
    rack_cache_s: float = 60.0


async def writable_bookies(store: MetadataStore, root: str = "/ledgers") -> list[BookieId]:
    """Registered writable bookies, sorted."""
    try:
        children = await store.get_children(f"{root}/available")
    except MetadataStoreError as exc:
        raise MetaStoreError(f"listing bookies failed: {exc}") from exc
    return sorted(c for c in children if c != READONLY_CHILD)


def rack_of_registration(value: bytes) -> str:
    """The rack named by a registration value (:data:`DEFAULT_RACK` when it names none)."""
    try:
        document = json.loads(value)
        rack = document["properties"]["rack"]
    except (ValueError, KeyError, TypeError):
        return DEFAULT_RACK
    return rack if isinstance(rack, str) and rack else DEFAULT_RACK


# -- the pure part: racks of write sets -------------------------------------------------------------------


def windows_through(index: int, ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The write sets (lists of ensemble indices) that contain ``index``."""
    starts = sorted({(index - offset) % ensemble_size for offset in range(write_quorum)})
    return [[(start + i) % ensemble_size for i in range(write_quorum)] for start in starts]


def write_set_racks(ensemble_racks: Sequence[str], write_quorum: int) -> list[int]:
    """Distinct racks of each of the E write sets of an ensemble whose members are in ``ensemble_racks``."""
    size = len(ensemble_racks)
    return [len({ensemble_racks[(start + i) % size] for i in range(write_quorum)}) for start in range(size)]


def racks_needed(min_racks: int, write_quorum: int, racks_available: int) -> int:
    """Racks every write set should span: the configured floor, capped by W and by the racks that exist."""
    return max(1, min(min_racks, write_quorum, racks_available))


def placement_adheres(
    ensemble_racks: Sequence[str], write_quorum: int, min_racks: int, racks_available: int
) -> bool:
    """True when every write set spans :func:`racks_needed` racks."""
    need = racks_needed(min_racks, write_quorum, racks_available)
    return all(count >= need for count in write_set_racks(ensemble_racks, write_quorum))


def spread_across_racks(
    pool: Racks, size: int, rng: random.Random, exclude: Collection[BookieId] = ()
) -> list[BookieId]:
    """``size`` bookies of ``pool`` picked round-robin over its racks (see the module docstring)."""
    by_rack: dict[str, list[BookieId]] = {}
    for bookie in sorted(pool):
        if bookie not in exclude:
            by_rack.setdefault(pool[bookie], []).append(bookie)
    racks = sorted(by_rack)
    rng.shuffle(racks)
    for rack in racks:
        rng.shuffle(by_rack[rack])
    picks: list[BookieId] = []
    while len(picks) < size and any(by_rack.values()):
        for rack in racks:
            if by_rack[rack] and len(picks) < size:
                picks.append(by_rack[rack].pop())
    if len(picks) < size:
        raise NotEnoughBookiesError(f"need {size} bookies, {len(picks)} usable (excluding {sorted(exclude)})")
    return picks


def best_replacement(
    ensemble: Sequence[BookieId],
    index: int,
    candidates: Racks,
    racks: Racks,
    write_quorum: int,
    rng: random.Random,
) -> tuple[BookieId, int]:
    """The candidate for ``ensemble[index]`` that leaves the write sets through ``index`` on the most racks,
    with the fewest racks of such a write set (ties broken at random). Raises when there is no candidate."""
    if not candidates:
        raise NotEnoughBookiesError(f"no bookie can replace index {index} of {list(ensemble)}")
    windows = windows_through(index, len(ensemble), write_quorum)
    scored: list[tuple[int, int, BookieId]] = []
    for candidate in sorted(candidates):
        placed = [
            candidates[candidate] if i == index else racks.get(b, DEFAULT_RACK)
            for i, b in enumerate(ensemble)
        ]
        counts = [len({placed[i] for i in window}) for window in windows]
        scored.append((min(counts), sum(counts), candidate))
    best = max((low, total) for low, total, _ in scored)
    pick = rng.choice([bookie for low, total, bookie in scored if (low, total) == best])
    return pick, best[0]


class EnsemblePlacement:
    def __init__(
        self,
        store: MetadataStore,
        root: str,
        rng: random.Random,
        clock: Clock,
        quarantine_s: float,
        policy: RackPolicy | None = None,
    ) -> None:
        self._store = store
        self._root = root
        self._rng = rng
        self._clock = clock
        self._quarantine_s = quarantine_s
        self.policy = policy or RackPolicy()
        self._quarantined: dict[BookieId, float] = {}  # bookie -> release time (monotonic)
        self._racks: dict[BookieId, tuple[str, float]] = {}  # bookie -> (rack, cached until)

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

    # -- discovery --------------------------------------------------------------------------------------

    async def candidates(self) -> dict[BookieId, str]:
        """Writable bookies that are not being decommissioned, with their racks."""
        bookies = await writable_bookies(self._store, self._root)
        try:
            leaving = set(await self._store.get_children(decommissioning_path(self._root)))
        except MetadataStoreError as exc:
            raise MetaStoreError(f"listing decommissioning bookies failed: {exc}") from exc
        return await self.racks_of([b for b in bookies if b not in leaving])

    async def racks_of(self, bookies: Sequence[BookieId]) -> dict[BookieId, str]:
        """The racks of registered bookies (cached; a bookie not registered is in the default rack)."""
        now = self._clock.monotonic()
        out: dict[BookieId, str] = {}
        for bookie in bookies:
            cached = self._racks.get(bookie)
            if cached is None or cached[1] <= now:
                cached = (await self._read_rack(bookie), now + self.policy.rack_cache_s)
                self._racks[bookie] = cached
            out[bookie] = cached[0]
        return out

    async def _read_rack(self, bookie: BookieId) -> str:
        for path in (f"{self._root}/available/{bookie}", f"{self._root}/available/{READONLY_CHILD}/{bookie}"):
            try:
                got = await self._store.get(path)
            except MetadataStoreError as exc:
                raise MetaStoreError(f"reading the registration of {bookie} failed: {exc}") from exc
            if got is not None:
                return rack_of_registration(got.value)
        return DEFAULT_RACK

    # -- choosing -----------------------------------------------------------------------------------------

    async def new_ensemble(
        self, size: int, exclude: Collection[BookieId] = (), write_quorum: int | None = None
    ) -> list[BookieId]:
        return self.choose(await self.candidates(), size, exclude, write_quorum)

    def choose(
        self,
        available: Sequence[BookieId] | Racks,
        size: int,
        exclude: Collection[BookieId],
        write_quorum: int | None = None,
    ) -> list[BookieId]:
        """``size`` distinct bookies from ``available`` minus ``exclude``, healthy ones preferred, spread over
        racks so that every write set of ``write_quorum`` (default: the whole ensemble) spans the most."""
        pool = _as_racks(available)
        usable = {b: r for b, r in pool.items() if b not in exclude}
        healthy = {b: r for b, r in usable.items() if not self._is_quarantined(b)}
        chosen_pool = healthy if len(healthy) >= size else usable
        if len(chosen_pool) < size:
            raise NotEnoughBookiesError(
                f"need {size} bookies, {len(usable)} writable (excluding {sorted(exclude)})"
            )
        picks = spread_across_racks(chosen_pool, size, self._rng)
        quorum = write_quorum or size
        if self.policy.enforce_min_num_racks_per_write_quorum:
            racks = [chosen_pool[b] for b in picks]
            need = min(self.policy.min_num_racks_per_write_quorum, quorum)
            if min(write_set_racks(racks, quorum)) < need:
                raise NotEnoughBookiesError(
                    f"cannot place {size} bookies with every write set of {quorum} on "
                    f"min_num_racks_per_write_quorum={need} racks: {len(set(usable.values()))} racks there"
                )
        return picks

    def replace(
        self,
        ensemble: Sequence[BookieId],
        failed: Mapping[int, BookieId],
        available: Sequence[BookieId] | Racks,
        exclude: Collection[BookieId] = (),
        write_quorum: int | None = None,
        member_racks: Racks | None = None,
    ) -> list[BookieId]:
        """A copy of ``ensemble`` with as many failed indices replaced as possible (at least one).
        ``member_racks`` tells the racks of members that are not in ``available`` (read-only ones)."""
        pool = _as_racks(available)
        known = {**(member_racks or {}), **pool}
        quorum = write_quorum or len(ensemble)
        new = list(ensemble)
        banned = set(exclude) | set(failed.values())
        replaced = 0
        for index in sorted(failed):
            if new[index] != failed[index]:
                continue
            usable = {b: r for b, r in pool.items() if b not in banned and b not in new}
            healthy = {b: r for b, r in usable.items() if not self._is_quarantined(b)}
            candidates = healthy or usable
            if not candidates:
                continue
            pick, low = best_replacement(new, index, candidates, known, quorum, self._rng)
            if self.policy.enforce_min_num_racks_per_write_quorum and low < min(
                self.policy.min_num_racks_per_write_quorum, quorum
            ):
                continue
            new[index] = pick
            replaced += 1
        if replaced == 0:
            raise NotEnoughBookiesError(
                f"no replacement for {sorted(failed.values())}: {len(pool)} bookies available"
            )
        return new


def _as_racks(available: Sequence[BookieId] | Racks) -> Racks:
    if isinstance(available, Mapping):
        return available
    return dict.fromkeys(available, DEFAULT_RACK)
