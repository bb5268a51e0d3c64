"""The Key_Shared selector (broker/core/key_shared.py): sticky hash ranges beside the auto-split ring."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.core import ConsumerAssignError, KeySharedPolicy
from magnetar.broker.core.errors import ConsumerBusyError
from magnetar.broker.core.key_hash import STICKY_KEY_SLOTS, sticky_key_slot
from magnetar.broker.core.key_shared import STICKY_RANGES_MAX, KeySharedSelector, StickyRanges

slots = st.integers(0, STICKY_KEY_SLOTS - 1)
ranges = st.tuples(slots, slots).map(lambda r: (min(r), max(r)))


@given(
    st.lists(st.lists(ranges, min_size=1, max_size=5), min_size=1, max_size=6), st.lists(slots, max_size=50)
)
def test_sticky_selection_matches_a_linear_scan(
    asked: list[list[tuple[int, int]]], probes: list[int]
) -> None:
    """Each consumer is taken iff its ranges are disjoint from each other and from those taken before; a slot
    then goes to the consumer whose taken range holds it (found by a linear scan), else to nobody."""
    selector = StickyRanges()
    taken: list[tuple[int, int, int]] = []
    for member, wanted in enumerate(asked):
        own = any(_meet(a, b) for i, a in enumerate(wanted) for b in wanted[i + 1 :])
        other = any(_meet(a, (start, end)) for a in wanted for start, end, _ in taken)
        if own or other:
            with pytest.raises(ConsumerAssignError):
                selector.add(member, f"c{member}", tuple(wanted), member)
            continue
        selector.add(member, f"c{member}", tuple(wanted), member)
        taken.extend((start, end, member) for start, end in wanted)
    bounds = [slot for start, end, _ in taken for slot in (start - 1, start, end, end + 1)]
    for slot in [*probes, *bounds, 0, STICKY_KEY_SLOTS - 1]:
        expected = next((m for start, end, m in taken if start <= slot <= end), None)
        assert selector.select(slot) == expected


def _meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@given(st.lists(slots, min_size=1, max_size=20))
def test_a_consumer_leaving_frees_its_ranges(cut_points: list[int]) -> None:
    selector = StickyRanges()
    cut = cut_points[0]
    selector.add(1, "low", ((0, cut),), "low")
    if cut < STICKY_KEY_SLOTS - 1:
        selector.add(2, "high", ((cut + 1, STICKY_KEY_SLOTS - 1),), "high")
    selector.remove(1)
    assert selector.select(cut) is None
    selector.add(3, "again", ((0, cut),), "again")
    assert selector.select(cut) == "again"


def test_the_split_of_real_keys() -> None:
    selector = StickyRanges()
    selector.add(1, "a", ((0, 32767),), "a")
    selector.add(2, "b", ((32768, 65535),), "b")
    for key in ("k0", "k1", "order-17", "NONE_KEY", "ключ"):
        expected = "a" if sticky_key_slot(key) <= 32767 else "b"
        assert selector.select(sticky_key_slot(key)) == expected


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ((), "must not be empty"),
        (((5, 4),), "start > end"),
        (((-1, 10),), "is outside"),
        (((0, 65536),), "is outside"),
        (((0, 2**31),), "is outside"),
        (((-(2**63), 2**63 - 1),), "is outside"),
        (((0, 10), (10, 20)), "overlap"),
        (tuple((i, i) for i in range(STICKY_RANGES_MAX + 1)), "Too many hash ranges"),
        (tuple((i, i) for i in range(10_000)), "Too many hash ranges"),
    ],
)
def test_invalid_ranges_are_refused_and_change_nothing(
    ranges: tuple[tuple[int, int], ...], message: str
) -> None:
    selector = StickyRanges()
    selector.add(1, "first", ((100, 200),), "first")
    with pytest.raises(ConsumerAssignError, match=message):
        selector.add(2, "second", ranges, "second")
    assert len(selector) == 1
    assert selector.select(0) is None
    assert selector.select(150) == "first"


def test_a_conflict_names_the_consumer_holding_the_range() -> None:
    selector = StickyRanges()
    selector.add(1, "holder", ((0, 100), (300, 400)), "holder")
    with pytest.raises(ConsumerAssignError, match="Range conflict with consumer holder"):
        selector.add(2, "late", ((200, 250), (350, 360)), "late")
    assert selector.select(220) is None  # nothing of the refused consumer stayed


def test_a_subscription_keeps_the_mode_of_its_consumers() -> None:
    selector = KeySharedSelector()
    selector.add(1, "sticky", KeySharedPolicy(((0, 65535),)), "sticky")
    with pytest.raises(ConsumerBusyError, match="STICKY key shared mode"):
        selector.add(2, "auto", None, "auto")
    selector.remove(1)
    selector.add(2, "auto", None, "auto")  # no consumers left: the next one sets the mode
    assert selector.select(12345) == "auto"
    with pytest.raises(ConsumerBusyError, match="AUTO_SPLIT key shared mode"):
        selector.add(3, "sticky", KeySharedPolicy(((0, 10),)), "sticky")
