"""Striping/quorum arithmetic and ensemble placement (random, quarantine, rack-aware)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.client.distribution import is_covered, negative_answers_needed, write_set
from magnetar.bookkeeper.client.errors import NotEnoughBookiesError
from magnetar.bookkeeper.client.placement import (
    DEFAULT_RACK,
    EnsemblePlacement,
    RackPolicy,
    best_replacement,
    placement_adheres,
    spread_across_racks,
    windows_through,
    writable_bookies,
    write_set_racks,
)
from magnetar.bookkeeper.metadata.bookies import BookieServiceInfo
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time_ms(self) -> int:
        return int(self.now * 1000)


def test_write_sets_follow_the_protocol_document() -> None:
    # E=4, WQ=3: e0 -> B1,B2,B3; e1 -> B2,B3,B4; e2 -> B3,B4,B1; e3 -> B4,B1,B2 (0-based indices here)
    assert [write_set(e, 4, 3) for e in range(5)] == [[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1], [0, 1, 2]]


def test_coverage_rule() -> None:
    # E = WQ = 3, AQ = 2: E - AQ + 1 = 2 answers cover.
    assert not is_covered(3, 3, 2, {0})
    assert is_covered(3, 3, 2, {0, 2})
    # E = 4, WQ = 3, AQ = 2: every window of three needs two covered bookies.
    assert not is_covered(4, 3, 2, {0, 2})  # window (3, 0, 1) has only 0
    assert is_covered(4, 3, 2, {0, 1, 2})
    assert not is_covered(4, 3, 2, {0, 1})  # window (2, 3, 0)
    # AQ = WQ: one answer per write set is enough.
    assert is_covered(3, 3, 3, {1})
    assert negative_answers_needed(3, 2) == 2
    assert negative_answers_needed(3, 3) == 1


async def registered(*names: str, readonly: tuple[str, ...] = ()) -> MemoryMetadataStore:
    store = MemoryMetadataStore()
    for name in names:
        await store.put(f"/ledgers/available/{name}", b"", None)
    for name in readonly:
        await store.put(f"/ledgers/available/readonly/{name}", b"", None)
    return store


async def test_discovery_skips_readonly_bookies() -> None:
    store = await registered("b:1", "a:1", readonly=("c:1",))
    assert await writable_bookies(store) == ["a:1", "b:1"]


async def test_new_ensembles_are_distinct_random_and_reproducible() -> None:
    store = await registered(*(f"b{i}:1" for i in range(6)))
    picks = []
    for _ in range(2):
        placement = EnsemblePlacement(store, "/ledgers", random.Random(42), FakeClock(), 60.0)
        picks.append([await placement.new_ensemble(3) for _ in range(5)])
    assert picks[0] == picks[1]
    assert all(len(set(ensemble)) == 3 for ensemble in picks[0])
    assert len({tuple(e) for e in picks[0]}) > 1


async def test_not_enough_bookies() -> None:
    placement = EnsemblePlacement(
        await registered("a:1", "b:1"), "/ledgers", random.Random(1), FakeClock(), 60
    )
    with pytest.raises(NotEnoughBookiesError):
        await placement.new_ensemble(3)


async def test_quarantined_bookies_are_avoided_then_used_when_needed() -> None:
    clock = FakeClock()
    placement = EnsemblePlacement(
        await registered("a:1", "b:1", "c:1"), "/ledgers", random.Random(1), clock, 10
    )
    placement.quarantine("c:1")
    for _ in range(10):
        assert "c:1" not in await placement.new_ensemble(2)
    assert sorted(await placement.new_ensemble(3)) == ["a:1", "b:1", "c:1"]  # fallback
    clock.now = 11.0
    picked = [await placement.new_ensemble(2) for _ in range(20)]
    assert any("c:1" in ensemble for ensemble in picked)


def test_replacement_keeps_healthy_bookies_and_accepts_partial() -> None:
    placement = EnsemblePlacement(MemoryMetadataStore(), "/ledgers", random.Random(3), FakeClock(), 0)
    available = ["a:1", "b:1", "c:1", "d:1"]
    new = placement.replace(["a:1", "b:1", "c:1"], {1: "b:1"}, available)
    assert new == ["a:1", "d:1", "c:1"]
    partial = placement.replace(["a:1", "b:1", "c:1"], {0: "a:1", 1: "b:1"}, available)
    assert partial.count("d:1") == 1
    assert sorted(partial) != sorted(["a:1", "b:1", "c:1"])
    with pytest.raises(NotEnoughBookiesError):
        placement.replace(["a:1", "b:1", "c:1"], {1: "b:1"}, ["a:1", "b:1", "c:1"])


# -- rack-aware placement ------------------------------------------------------------------------------

RACKED = [f"b{i}:1" for i in range(12)]
racks_strategy = st.lists(st.sampled_from(["za", "zb", "zc", "zd"]), min_size=12, max_size=12)


@given(racks_strategy, st.integers(1, 8), st.integers(0, 2**32))
def test_spread_picks_distinct_bookies_on_as_many_racks_as_possible(
    racks: list[str], size: int, seed: int
) -> None:
    pool = dict(zip(RACKED, racks, strict=True))
    picks = spread_across_racks(pool, size, random.Random(seed))
    assert len(picks) == len(set(picks)) == size
    assert len({pool[b] for b in picks}) == min(size, len(set(racks)))
    used = {r: sum(1 for b in picks if pool[b] == r) for r in set(racks)}
    for rack, count in used.items():  # a rack used less than another by two or more ran out of bookies
        if count < max(used.values()) - 1:
            assert count == racks.count(rack)


@given(st.integers(1, 4), st.data())
def test_with_enough_racks_every_write_set_spans_write_quorum_racks(
    racks_count: int, data: st.DataObject
) -> None:
    """E a multiple of the racks, each rack with E bookies: round-robin order keeps every window distinct."""
    ensemble = racks_count * data.draw(st.integers(1, 2))
    write_quorum = data.draw(st.integers(1, min(ensemble, racks_count)))
    pool = {f"r{r}-{i}:1": f"r{r}" for r in range(racks_count) for i in range(ensemble)}
    placement = EnsemblePlacement(
        MemoryMetadataStore(), "/ledgers", random.Random(data.draw(st.integers())), FakeClock(), 0
    )
    picks = placement.choose(pool, ensemble, (), write_quorum)
    assert min(write_set_racks([pool[b] for b in picks], write_quorum)) == write_quorum


@given(racks_strategy, st.integers(2, 5), st.data())
def test_a_replacement_leaves_its_write_sets_on_the_most_racks(
    racks: list[str], ensemble: int, data: st.DataObject
) -> None:
    pool = dict(zip(RACKED, racks, strict=True))
    write_quorum = data.draw(st.integers(1, ensemble))
    members = data.draw(st.permutations(RACKED))[:ensemble]
    index = data.draw(st.integers(0, ensemble - 1))
    candidates = {b: r for b, r in pool.items() if b not in members}
    pick, low = best_replacement(members, index, candidates, pool, write_quorum, random.Random(0))
    assert pick in candidates
    windows = windows_through(index, ensemble, write_quorum)

    def score(candidate: str) -> tuple[int, int]:
        placed = [pool[candidate] if i == index else pool[b] for i, b in enumerate(members)]
        counts = [len({placed[i] for i in w}) for w in windows]
        return min(counts), sum(counts)

    assert score(pick) == max(score(c) for c in candidates)
    assert low == score(pick)[0]


def test_enforced_minimum_refuses_an_ensemble_on_one_rack() -> None:
    pool = {f"b{i}:1": "only" for i in range(5)}
    strict = EnsemblePlacement(
        MemoryMetadataStore(), "/ledgers", random.Random(1), FakeClock(), 0,
        RackPolicy(min_num_racks_per_write_quorum=2, enforce_min_num_racks_per_write_quorum=True),
    )  # fmt: skip
    with pytest.raises(NotEnoughBookiesError, match="min_num_racks_per_write_quorum"):
        strict.choose(pool, 3, (), 3)
    lenient = EnsemblePlacement(MemoryMetadataStore(), "/ledgers", random.Random(1), FakeClock(), 0)
    assert len(lenient.choose(pool, 3, (), 3)) == 3  # best effort


def test_placement_adherence() -> None:
    assert placement_adheres(["a", "b", "a", "b"], 2, 2, 2)
    assert not placement_adheres(["a", "a", "b", "b"], 2, 2, 2)  # window (a, a)
    assert placement_adheres(["a", "a", "a"], 3, 2, 1)  # one rack exists: nothing better is possible


async def test_candidates_carry_racks_and_skip_decommissioning_bookies() -> None:
    store = MemoryMetadataStore()
    await store.put("/ledgers/available/a:1", BookieServiceInfo("a:1", "a", 1, rack="z1").to_json(), None)
    await store.put("/ledgers/available/b:1", b"", None)  # no rack: the default rack
    await store.put("/ledgers/available/c:1", BookieServiceInfo("c:1", "c", 1, rack="z2").to_json(), None)
    await store.put("/ledgers/underreplication/decommissioning/c:1", b"{}", None)
    placement = EnsemblePlacement(store, "/ledgers", random.Random(1), FakeClock(), 0)
    assert await placement.candidates() == {"a:1": "z1", "b:1": DEFAULT_RACK}
