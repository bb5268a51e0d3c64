"""The delayed-delivery tracker: its rules by example, and a Hypothesis model test against a sorted list."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from magnetar.broker.core.delayed_tracker import BYTES_PER_BUCKET, BYTES_PER_ENTRY, DelayedTracker, quantise


def test_an_entry_is_released_at_its_tick_never_before() -> None:
    tracker = DelayedTracker(tick_ms=1000, capacity=10)
    tracker.add(10_500, 3, 7)
    assert tracker.next_due_ms() == 11_000
    assert tracker.pop_due(10_999, 100) == []
    assert tracker.pop_due(11_000, 100) == [(3, 7)]
    assert len(tracker) == 0
    assert tracker.next_due_ms() is None


def test_released_by_due_time_and_returned_by_position() -> None:
    tracker = DelayedTracker(tick_ms=10, capacity=10)
    for deliver_at, entry in ((300, 1), (100, 2), (200, 3), (105, 4)):
        tracker.add(deliver_at, 0, entry)
    assert tracker.pop_due(110, 100) == [(0, 2), (0, 4)]
    assert tracker.pop_due(1000, 1) == [(0, 3)]  # the limit: earliest due first
    assert tracker.pop_all() == [(0, 1)]


def test_full_at_capacity_and_cleared() -> None:
    tracker = DelayedTracker(tick_ms=1, capacity=2)
    tracker.add(5, 0, 0)
    assert not tracker.full
    tracker.add(6, 0, 1)
    assert tracker.full
    tracker.clear()
    assert len(tracker) == 0
    assert not tracker.full


@pytest.mark.parametrize(("tick", "expected"), [(0, 1), (-5, 1), (2**40, 2**31 - 1)])
def test_a_tick_out_of_range_is_bounded(tick: int, expected: int) -> None:
    assert DelayedTracker(tick, 1).tick_ms == expected


def test_quantise_rounds_up() -> None:
    assert [quantise(t, 1000) for t in (1, 999, 1000, 1001)] == [1000, 1000, 1000, 2000]


def test_the_end_of_64_bits_is_tracked_not_overflowed() -> None:
    tracker = DelayedTracker(tick_ms=1000, capacity=10)
    tracker.add(2**63 - 1, 1, 2)
    assert tracker.next_due_ms() == 2**63 - 1
    assert tracker.pop_due(2**62, 10) == []
    assert tracker.pop_all() == [(1, 2)]


def test_memory_per_entry_is_the_documented_figure() -> None:
    shared = DelayedTracker(tick_ms=1000, capacity=200_000)
    for i in range(100_000):  # 100 s of delays: 100 ticks
        shared.add(1_700_000_000_000 + i, 12345, i)
    # two 64-bit integers an entry (an array grows by at most 1/8 beyond its length), plus each tick's own
    assert (
        100_000 * BYTES_PER_ENTRY <= shared.nbytes <= 100_000 * BYTES_PER_ENTRY * 1.2 + 101 * BYTES_PER_BUCKET
    )
    scattered = DelayedTracker(tick_ms=1, capacity=200_000)
    for i in range(10_000):  # a tick each: the worst case
        scattered.add(1_700_000_000_000 + 7 * i, 12345, i)
    assert scattered.nbytes <= 10_000 * (4 * BYTES_PER_ENTRY + BYTES_PER_BUCKET)


def test_adding_in_any_order_costs_the_same() -> None:
    """Times in random order are appended to their tick's bucket: nothing is moved (the sorted arrays of the
    first version moved their tail on every add). Counted, not timed: the buckets hold every entry once."""
    rng = random.Random(7)
    tracker = DelayedTracker(tick_ms=1000, capacity=100_000)
    times = [1_700_000_000_000 + rng.randrange(3_600_000) for _ in range(50_000)]
    for i, at in enumerate(times):
        tracker.add(at, 1, i)
    assert len(tracker) == 50_000
    released = tracker.pop_due(2**62, 100_000)
    assert len(released) == 50_000
    assert released == sorted(released)


class TrackerModel(RuleBasedStateMachine):
    """The tracker against a sorted list of (due, ledger, entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.tick = 7
        self.tracker = DelayedTracker(self.tick, capacity=1000)
        self.model: list[tuple[int, int, int]] = []
        self.now = 0

    @rule(delay=st.integers(0, 200), ledger=st.integers(0, 3), entry=st.integers(0, 50))
    def add(self, delay: int, ledger: int, entry: int) -> None:
        deliver_at = self.now + delay
        self.tracker.add(deliver_at, ledger, entry)
        self.model.append((quantise(deliver_at, self.tick), ledger, entry))
        self.model.sort(key=lambda item: item[0])  # stable: equal times keep their order

    @rule(step=st.integers(0, 60), limit=st.integers(0, 20))
    def pop(self, step: int, limit: int) -> None:
        self.now += step
        due = [item for item in self.model if item[0] <= self.now][:limit]
        got = self.tracker.pop_due(self.now, limit)
        assert got == sorted((ledger, entry) for _, ledger, entry in due)
        for item in due:
            self.model.remove(item)
        assert all(item[0] > self.now for item in self.model) or len(due) == limit

    @rule()
    def pop_all(self) -> None:
        assert self.tracker.pop_all() == sorted((ledger, entry) for _, ledger, entry in self.model)
        self.model.clear()

    @invariant()
    def agrees(self) -> None:
        assert len(self.tracker) == len(self.model)
        expected = min((item[0] for item in self.model), default=None)
        assert self.tracker.next_due_ms() == expected
        assert self.tracker.has_due(self.now) == (expected is not None and expected <= self.now)


TrackerModel.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_tracker_matches_a_sorted_list = TrackerModel.TestCase
