"""AckSet against a plain-set model, plus the rendering Pulsar tools parse."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.ack_set import AckSet
from magnetar.managed_ledger.position import Position

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 3), st.integers(0, 40), st.integers(0, 5)),
        st.tuples(st.just("trim"), st.integers(1, 3), st.integers(-1, 40), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_matches_a_set_model(operations: list[tuple[str, int, int, int]]) -> None:
    acks = AckSet()
    model: set[tuple[int, int]] = set()
    for op, ledger, entry, width in operations:
        if op == "add":
            new = {(ledger, e) for e in range(entry, entry + width + 1)} - model
            assert acks.add_range(ledger, entry, entry + width) == len(new)
            model |= new
        else:
            acks.remove_up_to(Position(ledger, entry))
            model = {p for p in model if p > (ledger, entry)}
        assert len(acks) == len(model)
        flattened = {(lid, e) for lid, first, last in acks.ranges() for e in range(first, last + 1)}
        assert flattened == model
        ranges = list(acks.ranges())
        assert acks.range_count == len(ranges)
        for (l1, _, e1), (l2, s2, _) in itertools.pairwise(ranges):
            assert (l1, e1 + 1) < (l2, s2), "ranges must be disjoint and not adjacent"
        for ledger_id in (1, 2, 3):
            for e in range(0, 47, 7):
                assert (Position(ledger_id, e) in acks) == ((ledger_id, e) in model)
                expected = len({(ledger_id, x) for x in range(e, e + 10)} & model)
                assert acks.count_in(ledger_id, e, e + 9) == expected


def test_render_and_first_range() -> None:
    acks = AckSet()
    acks.add(Position(5, 3))
    acks.add(Position(5, 4))
    acks.add(Position(6, 0))
    assert acks.render() == "[(5:2..5:4], (6:-1..6:0]]"
    assert acks.first_range_after(Position(5, 3)) == (5, 3, 4)
    assert acks.first_range_after(Position(5, 4)) is None
    assert not acks.add(Position(5, 4))
