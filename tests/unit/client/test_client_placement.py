"""Striping/quorum arithmetic and ensemble placement."""

from __future__ import annotations

import random

import pytest

from magnetar.bookkeeper.client.distribution import is_covered, negative_answers_needed, write_set
from magnetar.bookkeeper.client.errors import NotEnoughBookiesError
from magnetar.bookkeeper.client.placement import EnsemblePlacement, writable_bookies
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
