"""Message deduplication's sans-IO core (:mod:`magnetar.broker.core.dedup`) against a reference model, and a
producer on a deduplicated topic (:class:`~magnetar.broker.core.Producer`): duplicates answered at -1:-1 in
send order, a resend of a message in flight held until it is stored, out-of-range sequence ids refused."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from magnetar.bookkeeper.runtime import SystemClock
from magnetar.broker.core import MESSAGES, Capacity, Producer, PublishRequest
from magnetar.broker.core.dedup import (
    DUPLICATE_UNKNOWN_REASON,
    SEQUENCE_ID_MAX,
    SNAPSHOT_BYTES_MAX,
    SNAPSHOT_ENTRY_OVERHEAD,
    DedupState,
    Verdict,
)

NAMES = st.sampled_from(["a", "b", "c", "\u202ename", "x\x01"])
SEQS = st.integers(min_value=0, max_value=12)


@dataclass
class Reference:
    """What deduplication must decide, from the whole history: the sequence ids written (stored or in
    flight) and stored, per name."""

    written: dict[str, set[int]] = field(default_factory=dict)
    stored: dict[str, set[int]] = field(default_factory=dict)

    def verdict(self, name: str, seq: int) -> Verdict:
        written = self.written.get(name, set())
        if written and seq <= max(written):
            stored = self.stored.get(name, set())
            return Verdict.DUPLICATE if stored and seq <= max(stored) else Verdict.UNKNOWN
        return Verdict.NEW


class DedupMachine(RuleBasedStateMachine):
    """Publish, store (in order) and fail messages; the core agrees with the reference, and no sequence id
    of a name is ever written twice while its first copy was stored or in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.state = DedupState(producers_max=100, entries_interval=3)
        self.model = Reference()
        self.in_flight: list[tuple[str, int]] = []
        self.entry = 0

    @rule(name=NAMES, seq=SEQS)
    def publish(self, name: str, seq: int) -> None:
        expected = self.model.verdict(name, seq)
        got = self.state.check(name, seq, seq)
        assert got is expected, (name, seq, got, expected)
        if got is Verdict.NEW:
            # never a second copy of what is stored or in flight
            assert (name, seq) not in self.in_flight
            assert seq not in self.model.stored.get(name, set())
            self.model.written.setdefault(name, set()).add(seq)
            self.in_flight.append((name, seq))

    @precondition(lambda self: self.in_flight)
    @rule()
    def store_oldest(self) -> None:
        name, seq = self.in_flight.pop(0)
        self.entry += 1
        self.state.on_persisted(name, seq, 1, self.entry)
        self.model.stored.setdefault(name, set()).add(seq)

    @precondition(lambda self: self.in_flight)
    @rule()
    def fail_newest(self) -> None:
        """The last write failed (not stored): the client may resend it."""
        name, seq = self.in_flight.pop()
        self.model.written[name].discard(seq)
        still = [s for n, s in self.in_flight if n == name]
        self.state.on_failed(name, max(still, default=-1))

    @precondition(lambda self: not self.in_flight)
    @rule()
    def restart(self) -> None:
        """Snapshot, then recover from it: the same decisions follow."""
        position, properties = self.state.snapshot()
        recovered = DedupState(producers_max=100, entries_interval=3)
        recovered.restore(properties, position)
        self.state = recovered

    @invariant()
    def stored_are_duplicates(self) -> None:
        for name, stored in self.model.stored.items():
            for seq in stored:
                assert self.model.verdict(name, seq) is Verdict.DUPLICATE


TestDedupModel = DedupMachine.TestCase
TestDedupModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@given(st.lists(st.tuples(NAMES, SEQS), max_size=60), st.integers(min_value=0, max_value=60))
def test_snapshot_plus_replay_recovers_the_persisted_state(stored: list[tuple[str, int]], cut: int) -> None:
    """Recovery = the snapshot taken after the first ``cut`` entries + the entries after it replayed."""
    live = DedupState(producers_max=100, entries_interval=1000)
    snapshot: tuple[tuple[int, int] | None, dict[str, int]] = (None, {})
    for entry, (name, seq) in enumerate(stored):
        if live.check(name, seq, seq) is Verdict.NEW:
            live.on_persisted(name, seq, 1, entry)
        if entry + 1 == cut:
            snapshot = live.snapshot()
    recovered = DedupState(producers_max=100, entries_interval=1000)
    recovered.restore(snapshot[1], snapshot[0])
    start = cut if snapshot[0] is not None else 0
    for entry, (name, seq) in enumerate(stored[start:], start):
        recovered.replay(name, seq, 1, entry)
    assert recovered.persisted == live.persisted


def test_entries_interval_says_when_a_snapshot_is_due() -> None:
    state = DedupState(producers_max=10, entries_interval=3)
    due = []
    for entry in range(7):
        state.check("p", entry, entry)
        due.append(state.on_persisted("p", entry, 1, entry))
        if due[-1]:
            state.snapshot()
    assert due == [False, False, True, False, False, True, False]
    # several messages of one entry count once
    state.check("q", 0, 0)
    assert not state.on_persisted("q", 0, 1, 6)


def test_producer_names_are_bounded_least_recently_updated_first() -> None:
    state = DedupState(producers_max=3, entries_interval=1000)
    for entry, name in enumerate(["a", "b", "c", "a", "d"]):
        assert state.check(name, entry, entry) is Verdict.NEW
        state.on_persisted(name, entry, 1, entry)
    assert set(state.persisted) == {"c", "a", "d"}
    assert set(state.pushed) <= {"c", "a", "d"}
    assert len(state.snapshot()[1]) == 3


def test_the_snapshot_is_bounded_in_bytes_keeping_the_most_recent_names() -> None:
    state = DedupState(producers_max=10_000, entries_interval=10)
    long_name = "n" * 1000
    for entry in range(1000):
        name = f"{long_name}{entry}"
        state.check(name, 0, 0)
        state.on_persisted(name, 0, 1, entry)
    _, snapshot = state.snapshot()
    size = sum(len(name) + SNAPSHOT_ENTRY_OVERHEAD for name in snapshot)
    assert 0 < size <= SNAPSHOT_BYTES_MAX
    assert f"{long_name}999" in snapshot
    assert f"{long_name}0" not in snapshot
    assert len(state.persisted) == 1000  # memory keeps them all (bounded by producers_max)


def test_names_without_a_producer_are_purged_after_the_timeout_only() -> None:
    state = DedupState(producers_max=3, entries_interval=1000)
    for entry, name in enumerate(["gone", "back", "here"]):
        state.check(name, 5, 5)
        state.on_persisted(name, 5, 1, entry)
    state.producer_left("gone", 1_000)
    state.producer_left("back", 1_000)
    state.producer_left("never-published", 1_000)  # not in the maps: not noted
    state.producer_joined("back")  # a producer of the name came back: kept
    assert state.purge_inactive(1_000) == []  # not before the time
    assert state.purge_inactive(1_001) == ["gone"]
    assert "gone" not in state.pushed
    assert "gone" not in state.persisted
    assert state.check("gone", 5, 5) is Verdict.NEW  # the same sequence id is stored again
    assert state.check("back", 5, 5) is Verdict.DUPLICATE
    assert "gone" not in state.snapshot()[1]
    assert state.inactive == {}


def test_inactive_notes_are_bounded_by_the_maps() -> None:
    state = DedupState(producers_max=2, entries_interval=1000)
    for entry, name in enumerate(["a", "b"]):
        state.check(name, 0, 0)
        state.on_persisted(name, 0, 1, entry)
        state.producer_left(name, 0)
    state.check("c", 0, 0)
    state.on_persisted("c", 0, 1, 2)  # evicts "a" from both maps, and its note
    assert set(state.inactive) == {"b"}


def test_restore_ignores_values_out_of_range() -> None:
    state = DedupState(producers_max=10, entries_interval=10)
    state.restore({"ok": 5, "neg": -3, "huge": 2**63}, (3, 4))
    assert state.persisted == {"ok": 5}
    assert state.last_sequence_id("ok") == 5
    assert state.last_sequence_id("neg") == -1


# -- a producer on a deduplicated topic -----------------------------------------------------------------


class Answers:
    def __init__(self) -> None:
        self.log: list[tuple[object, str, int, int]] = []

    def stored(self, request: PublishRequest, partition: int, ledger_id: int, entry_id: int,
               first_index: int, batch_size: int) -> None:  # fmt: skip
        self.log.append((request.tag, "stored", ledger_id, entry_id))

    def failed(self, request: PublishRequest, reason: str) -> None:
        self.log.append((request.tag, reason, -2, -2))


class Topic:
    def __init__(self) -> None:
        self.written: list[PublishRequest] = []
        self.entry = 0

    def publish(self, request: PublishRequest) -> None:
        self.written.append(request)

    def store_first(self) -> None:
        request = self.written.pop(0)
        self.entry += 1
        request.producer.on_stored(request, 7, self.entry, -1, 0)

    def fail_first(self) -> None:
        request = self.written.pop(0)
        request.producer.on_failed(request, "write failed")


def producer(topic: Topic, state: DedupState, name: str = "p") -> Producer:
    made = Producer(topic, name, Capacity(100), partition=-1, clock=SystemClock())
    made.attach_dedup(state)
    return made


def send(p: Producer, answers: Answers, tag: object, seq: int | None) -> None:
    p.publish(MESSAGES, object(), 1, 1, answers, tag, 0.0, seq)


def test_a_resend_of_a_stored_message_is_answered_at_minus_one_and_not_written() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "first", 0)
    topic.store_first()
    send(p, answers, "again", 0)
    assert answers.log == [("first", "stored", 7, 1), ("again", "stored", -1, -1)]
    assert topic.written == []
    assert p.capacity.count == 0


def test_a_duplicate_waits_for_the_requests_before_it() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "m0", 0)
    topic.store_first()
    send(p, answers, "m1", 1)
    send(p, answers, "dup0", 0)
    assert answers.log == [("m0", "stored", 7, 1)]
    topic.store_first()
    assert answers.log[1:] == [("m1", "stored", 7, 2), ("dup0", "stored", -1, -1)]
    assert p.capacity.count == 0


def test_a_resend_of_a_message_in_flight_is_answered_once_it_is_stored() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "m0", 0)
    send(p, answers, "m0-again", 0)
    assert len(topic.written) == 1
    topic.store_first()
    assert answers.log == [("m0", "stored", 7, 1), ("m0-again", "stored", -1, -1)]


def test_a_resend_in_flight_of_another_session_is_unknown() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    old = producer(topic, state)
    send(old, answers, "m0", 0)
    new = producer(topic, state)
    send(new, answers, "m0-new", 0)
    assert answers.log == [("m0-new", DUPLICATE_UNKNOWN_REASON, -2, -2)]
    topic.store_first()
    send(new, answers, "m0-later", 0)
    assert answers.log[-1] == ("m0-later", "stored", -1, -1)


def test_a_failed_write_lets_the_resend_through() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "m0", 0)
    topic.fail_first()
    send(p, answers, "m0-resent", 0)
    assert len(topic.written) == 1
    topic.store_first()
    assert answers.log[-1] == ("m0-resent", "stored", 7, 1)


def test_a_failed_request_fails_the_duplicates_held_behind_it() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "m0", 0)
    send(p, answers, "m0-again", 0)
    topic.fail_first()
    assert [a[0] for a in answers.log] == ["m0", "m0-again"]
    assert p.capacity.count == 0


def test_without_a_client_sequence_id_the_producer_numbers_on_from_the_topic() -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    state.check("p", 41, 41)
    state.on_persisted("p", 41, 1, 1)
    p = producer(topic, state)
    send(p, answers, "next", None)
    assert topic.written[0].sequence_id == 42


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=SEQUENCE_ID_MAX + 1)))
def test_sequence_ids_out_of_range_are_refused(seq: int) -> None:
    topic, answers, state = Topic(), Answers(), DedupState(10, 10)
    p = producer(topic, state)
    send(p, answers, "bad", seq)
    assert topic.written == []
    assert answers.log[0][1].startswith(f"sequence id {seq} out of range")
    assert p.capacity.count == 0
    assert not p.pending


def test_without_dedup_the_producer_numbers_as_before() -> None:
    topic, answers = Topic(), Answers()
    p = Producer(topic, "p", Capacity(100), partition=-1, clock=SystemClock())
    send(p, answers, "a", 99)
    send(p, answers, "b", 99)
    assert [r.sequence_id for r in topic.written] == [0, 1]
