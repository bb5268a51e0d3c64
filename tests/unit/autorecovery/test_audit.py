"""The auditor's pure decisions and the fragment arithmetic, checked with hypothesis."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.autorecovery.audit import (
    bookie_ledger_index,
    lost_bookies,
    placement_repairs,
    under_replicated,
)
from magnetar.bookkeeper.autorecovery.fragments import (
    count_on_index,
    entries_on_index,
    fragments_of,
    repairs_for,
)
from magnetar.bookkeeper.client.distribution import write_set
from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState
from magnetar.bookkeeper.client.placement import write_set_racks

BOOKIES = [f"b{i}:3181" for i in range(8)]


@st.composite
def ledgers(draw: st.DrawFn) -> LedgerMetadata:
    """Valid ledger metadata: quorums, 1-4 ensembles of distinct bookies, open or closed."""
    ensemble = draw(st.integers(1, 5))
    write_quorum = draw(st.integers(1, ensemble))
    ack_quorum = draw(st.integers(1, write_quorum))
    count = draw(st.integers(1, 4))
    firsts = sorted(draw(st.sets(st.integers(1, 200), min_size=count - 1, max_size=count - 1)))
    ensembles = tuple((first, tuple(draw(st.permutations(BOOKIES))[:ensemble])) for first in [0, *firsts])
    closed = draw(st.booleans())
    last = draw(st.integers(ensembles[-1][0] - 1, ensembles[-1][0] + 50)) if closed else -1
    return LedgerMetadata(
        ensemble_size=ensemble,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        ensembles=ensembles,
        state=LedgerState.CLOSED if closed else LedgerState.OPEN,
        last_entry_id=last,
        length=max(0, last + 1) * 10 if closed else 0,
    )


ledger_maps = st.dictionaries(st.integers(0, 50), ledgers(), max_size=8)


@given(ledger_maps, st.sets(st.sampled_from(BOOKIES)))
def test_exactly_the_ledgers_naming_a_dead_bookie_are_under_replicated(
    ledgers: dict[int, LedgerMetadata], alive: set[str]
) -> None:
    found = under_replicated(ledgers, alive)
    for ledger_id, metadata in ledgers.items():
        named = {b for _, members in metadata.ensembles for b in members}
        dead = named - alive
        if dead:
            assert found[ledger_id] == dead
        else:
            assert ledger_id not in found


@given(ledger_maps)
def test_the_bookie_index_names_each_ledger_under_each_of_its_bookies(
    ledgers: dict[int, LedgerMetadata],
) -> None:
    index = bookie_ledger_index(ledgers)
    for ledger_id, metadata in ledgers.items():
        for _, members in metadata.ensembles:
            for bookie in members:
                assert ledger_id in index[bookie]
    assert all(ledger_id in ledgers for ids in index.values() for ledger_id in ids)


@given(
    st.sets(st.sampled_from(BOOKIES)),
    st.sets(st.sampled_from(BOOKIES)),
    st.dictionaries(st.sampled_from(BOOKIES), st.floats(0, 100)),
    st.floats(0, 200),
    st.floats(0, 50),
)
def test_a_bookie_is_lost_only_once_gone_for_the_delay(
    known: set[str], registered: set[str], since: dict[str, float], now: float, delay: float
) -> None:
    lost = lost_bookies(known, registered, since, now, delay)
    for bookie in known:
        gone_long = bookie not in registered and since.get(bookie, now) + delay <= now
        assert (bookie in lost) == gone_long
    assert lost <= known


def test_a_bookie_is_lost_exactly_at_its_deadline_despite_rounding() -> None:
    """Found by the simulation: gone at 3.3 with a 0.3 s delay, the auditor wakes at 3.3 + 0.3 and
    ``(3.3 + 0.3) - 3.3`` is 0.2999999999999998 - the bookie must be lost then, or the auditor spins."""
    since, delay = 3.3, 0.3
    assert (since + delay) - since < delay  # the rounding that made the old comparison spin
    assert lost_bookies({"a:1"}, set(), {"a:1": since}, since + delay, delay) == {"a:1"}


def test_a_decommissioning_bookie_is_lost_even_while_registered() -> None:
    assert lost_bookies({"a:1", "b:1"}, {"a:1", "b:1"}, {}, 0.0, 60.0, decommissioning={"a:1"}) == {"a:1"}


@given(st.integers(0, 300), st.integers(0, 300), st.integers(1, 6), st.data())
def test_entries_striped_to_an_index_match_the_write_sets(
    first: int, span: int, ensemble: int, data: st.DataObject
) -> None:
    write_quorum = data.draw(st.integers(1, ensemble))
    index = data.draw(st.integers(0, ensemble - 1))
    last = first + span - 1
    listed = list(entries_on_index(first, last, index, ensemble, write_quorum))
    assert listed == [e for e in range(first, last + 1) if index in write_set(e, ensemble, write_quorum)]
    assert count_on_index(first, last, index, ensemble, write_quorum) == len(listed)


@given(ledgers(), st.sets(st.sampled_from(BOOKIES)))
def test_repairs_cover_every_fragment_naming_a_bad_bookie(metadata: LedgerMetadata, bad: set[str]) -> None:
    repairs = {r.fragment.position: r for r in repairs_for(metadata, bad)}
    for fragment in fragments_of(metadata):
        named = {i: b for i, b in enumerate(fragment.ensemble) if b in bad}
        assert (fragment.position in repairs) == bool(named)
        if named:
            assert dict(repairs[fragment.position].bad) == named
    # only the last fragment of a ledger that is not closed is open
    assert [f.is_closed for f in fragments_of(metadata)][:-1] == [True] * (len(metadata.ensembles) - 1)
    assert fragments_of(metadata)[-1].is_closed == metadata.is_closed


@given(ledgers(), st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=8, max_size=8), st.integers(1, 3))
def test_placement_repairs_only_name_closed_fragments_below_the_floor(
    metadata: LedgerMetadata, rack_list: list[str], min_racks: int
) -> None:
    racks = dict(zip(BOOKIES, rack_list, strict=True))
    available = len(set(rack_list))
    moves = placement_repairs(metadata, racks, min_racks, available)
    need = max(1, min(min_racks, metadata.write_quorum, available))
    for fragment in fragments_of(metadata):
        placed = [racks[b] for b in fragment.ensemble]
        below = min(write_set_racks(placed, metadata.write_quorum)) < need
        expected = below and fragment.is_closed and fragment.entry_count() > 0
        assert (fragment.position in moves) == expected
        if expected:
            index, bookie = moves[fragment.position]
            assert fragment.ensemble[index] == bookie
            assert placed.count(placed[index]) > 1, "the member to move shares its rack"
