"""The failure suite's checker on hand-made histories: what it must catch, and what it must let pass."""

from __future__ import annotations

import pytest
from chaos.checker import Checker, payload_for, summary_table


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(subscriptions: tuple[str, ...] = ("a", "b")) -> tuple[Checker, Clock]:
    clock = Clock()
    return Checker(list(subscriptions), clock), clock


def publish(checker: Checker, producer: str, seqs: range, clock: Clock, *, ack: bool = True) -> None:
    for seq in seqs:
        checker.sent(producer, seq)
        clock.now += 0.01
        if ack:
            checker.acked(producer, seq, f"0:{seq}", "broker-0")


def deliver(checker: Checker, subscription: str, producer: str, seqs: list[int]) -> None:
    for seq in seqs:
        checker.delivered(subscription, payload_for(producer, seq), f"0:{seq}")


def test_a_clean_history_passes_and_counts_duplicates() -> None:
    checker, clock = make()
    publish(checker, "p", range(10), clock)
    deliver(checker, "a", "p", [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9])  # a redelivery after a failover
    deliver(checker, "b", "p", list(range(10)))
    verdict = checker.verdict()
    assert verdict.ok
    assert [s.duplicates for s in verdict.subscriptions] == [3, 0]
    assert checker.missing_total() == 0
    assert "verdict: OK" in summary_table("clean", verdict)


def test_an_acknowledged_message_missing_from_one_subscription_is_lost() -> None:
    checker, clock = make()
    clock.now = 1.0
    checker.set_phase("kill broker-0")
    publish(checker, "p", range(5), clock)
    deliver(checker, "a", "p", [0, 1, 2, 3, 4])
    deliver(checker, "b", "p", [0, 1, 3, 4])
    verdict = checker.verdict()
    assert not verdict.ok
    assert verdict.subscriptions[1].lost == [("p", 2)]
    assert checker.missing("b") == 1
    lost = [line for line in verdict.details if "LOST" in line]
    assert len(lost) == 1
    assert "(kill broker-0)" in lost[0]
    assert "0:2" in lost[0]


def test_first_deliveries_out_of_order_are_a_violation_but_redeliveries_are_not() -> None:
    checker, clock = make(("a",))
    publish(checker, "p", range(4), clock)
    publish(checker, "q", range(2), clock)
    deliver(checker, "a", "p", [0, 2, 1, 3])
    deliver(checker, "a", "q", [0, 1])  # another producer's order is its own
    verdict = checker.verdict()
    assert verdict.subscriptions[0].order_violations == ["p #1 first delivered as 0:1 after #2 (phase start)"]
    assert not verdict.ok


def test_unknown_outcomes_may_or_may_not_be_delivered() -> None:
    checker, clock = make(("a",))
    publish(checker, "p", range(3), clock)
    publish(checker, "p", range(3, 6), clock, ack=False)  # sent, then the session died
    for seq in range(3, 6):
        checker.failed("p", seq, "session ended before its ack")
    publish(checker, "p", range(6, 8), clock)
    deliver(checker, "a", "p", [0, 1, 2, 4, 6, 7])  # 4 was stored after all; 3 and 5 were not
    verdict = checker.verdict()
    assert verdict.ok
    assert verdict.unknown == 3
    assert verdict.subscriptions[0].unknown_delivered == 1


def test_a_delivery_that_arrives_before_its_ack_counts_once_acked() -> None:
    checker, _ = make(("a",))
    checker.sent("p", 0)
    deliver(checker, "a", "p", [0])
    assert checker.missing("a") == 0
    checker.acked("p", 0, "0:0", "broker-0")
    assert checker.missing("a") == 0
    assert checker.verdict().subscriptions[0].delivered_acked == 1


def test_phantoms_are_messages_nobody_sent() -> None:
    checker, clock = make(("a",))
    publish(checker, "p", range(2), clock)
    checker.delivered("a", b"not json", "0:9")
    deliver(checker, "a", "p", [0, 1, 7])  # 7 was never sent
    verdict = checker.verdict()
    assert len(verdict.subscriptions[0].phantoms) == 2
    assert not verdict.ok


def test_unavailability_is_the_sum_of_ack_gaps_longer_than_a_second() -> None:
    checker, clock = make(("a",))
    for seq, at in enumerate([0.0, 0.5, 1.0, 4.0, 4.5, 7.5]):
        clock.now = at
        checker.sent("p", seq)
        checker.acked("p", seq, f"0:{seq}", "broker-0")
    clock.now = 8.0
    checker.sent("p", 6)  # never acknowledged: the producers stopped at 8.0
    verdict = checker.verdict()
    assert verdict.unavailable_s == 6.0  # 1.0 -> 4.0 and 4.5 -> 7.5
    assert verdict.longest_gap_s == 3.0


def test_messages_sent_in_a_phase_and_delivered_are_found() -> None:
    checker, clock = make(("a",))
    publish(checker, "p", range(2), clock)
    checker.set_phase("paused broker-0")
    publish(checker, "p", range(2, 4), clock, ack=False)
    deliver(checker, "a", "p", [0, 1, 3])
    assert checker.delivered_sent_in("paused", "p") == [("p", 3)]
    assert checker.delivered_sent_in("paused", "other") == []


def test_the_longest_gap_within_a_window_counts_from_its_edges() -> None:
    checker, clock = make()
    for seq, at in enumerate([1.0, 1.5, 4.0, 4.2, 9.0]):
        clock.now = at
        checker.sent("p", seq)
        checker.acked("p", seq, f"0:{seq}", "broker-0")
    assert checker.longest_gap_between(1.2, 5.0) == 2.5  # 1.5 -> 4.0
    assert checker.longest_gap_between(4.1, 6.0) == pytest.approx(1.8)  # 4.2 -> the window's end
    assert checker.longest_gap_between(2.0, 3.0) == 1.0  # no ack inside: the whole window
