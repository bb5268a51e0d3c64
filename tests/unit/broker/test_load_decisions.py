"""The load manager's sans-IO decisions: report updates, placement, threshold shedding, split thresholds."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.ownership.load_decisions import (
    MB,
    LongTermRates,
    Placement,
    PlacementSettings,
    ShedderSettings,
    SplitSettings,
    ThresholdShedder,
    bundles_to_split,
    namespace_of,
)
from magnetar.broker.ownership.load_report import (
    BundleStats,
    LoadReport,
    ResourceUsage,
    ResourceWeights,
    percent_change,
    report_update_due,
)
from magnetar.broker.ownership.namespace_bundle import bundle_boundaries, bundles_of, split_in_half

NS = "public/default"
BANDWIDTH_ONLY = ResourceWeights(cpu=0, memory=0, direct_memory=0)


def bundle_name(index: int, namespace: str = NS) -> str:
    return f"{namespace}/0x{index:08x}_0x{index + 1:08x}"


def report(
    broker: str, bundles: dict[str, BundleStats] | None = None, *, cpu: float = 0, kbps_limit: float = 0
) -> LoadReport:
    bundles = bundles or {}
    throughput_in = sum(s.msg_throughput_in for s in bundles.values()) * 8 / 1000
    throughput_out = sum(s.msg_throughput_out for s in bundles.values()) * 8 / 1000
    return LoadReport(
        broker_id=broker,
        http_url=f"http://{broker}",
        last_update_ms=0,
        cpu=ResourceUsage(cpu, 100),
        bandwidth_in=ResourceUsage(throughput_in, kbps_limit),
        bandwidth_out=ResourceUsage(throughput_out, kbps_limit),
        bundles=bundles,
    )


# -- reports ------------------------------------------------------------------------------------------


def test_report_round_trips_through_json() -> None:
    original = report(
        "b:1", {bundle_name(1): BundleStats(1.5, 2.5, 100, 200, 3, 1, 2)}, cpu=42, kbps_limit=1e6
    )
    decoded = LoadReport.decode("b:1", original.encode())
    assert decoded.bundles == original.bundles
    assert decoded.cpu == original.cpu
    assert decoded.bandwidth_in == original.bandwidth_in
    assert decoded.to_json()["numTopics"] == 3
    assert decoded.to_json()["lastStats"][bundle_name(1)]["msgRateIn"] == 1.5


@given(st.floats(0, 1e9), st.floats(0, 1e9))
def test_percent_change_is_symmetric_in_sign_and_infinite_from_zero(old: float, new: float) -> None:
    change = percent_change(old, new)
    assert change >= 0
    if old == 0:
        assert change == (0 if new == 0 else math.inf)


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 100),
    st.integers(0, 3_600_000),
)
def test_a_report_is_due_when_rates_move_past_the_threshold_or_the_interval_passed(
    rate_old: float, rate_new: float, threshold: float, age_ms: int
) -> None:
    last = report("b", {bundle_name(0): BundleStats(msg_rate_in=rate_old)})
    current = report("b", {bundle_name(0): BundleStats(msg_rate_in=rate_new)})
    due = report_update_due(last, current, age_ms, threshold_percentage=threshold, max_interval_min=15)
    if age_ms > 15 * 60_000:
        assert due
    else:
        assert due == (percent_change(rate_old, rate_new) > threshold)


def test_the_first_report_is_always_due_and_a_new_bundle_makes_one_due() -> None:
    one = report("b", {bundle_name(0): BundleStats()})
    two = report("b", {bundle_name(0): BundleStats(), bundle_name(1): BundleStats()})
    assert report_update_due(None, one, 0, threshold_percentage=10, max_interval_min=15)
    assert not report_update_due(one, one, 1000, threshold_percentage=10, max_interval_min=15)
    assert report_update_due(one, two, 1000, threshold_percentage=10, max_interval_min=15)


# -- placement ----------------------------------------------------------------------------------------


@settings(max_examples=50)
@given(st.integers(2, 8), st.integers(1, 64), st.lists(st.floats(0, 1000), min_size=8, max_size=8))
def test_placement_spreads_a_namespace_evenly_whatever_the_rates(
    brokers: int, bundles: int, rates: list[float]
) -> None:
    reports = {
        f"b{i}": report(f"b{i}", {f"other/ns/0x{i:08x}_0x{i + 1:08x}": BundleStats(msg_rate_in=rates[i])})
        for i in range(brokers)
    }
    placement = Placement(PlacementSettings())
    counts = dict.fromkeys(reports, 0)
    for index in range(bundles):
        choice = placement.select(bundle_name(index), reports, now_ms=index)
        assert choice in reports
        counts[choice] += 1
    assert max(counts.values()) - min(counts.values()) <= 1


def test_placement_prefers_the_least_message_rate_and_avoids_overloaded_brokers() -> None:
    busy = report("busy", {bundle_name(100, "x/y"): BundleStats(msg_rate_in=500)})
    idle = report("idle", {bundle_name(101, "x/y"): BundleStats(msg_rate_in=5)})
    hot = report("hot", {bundle_name(102, "x/y"): BundleStats(msg_rate_in=0)}, cpu=99)
    placement = Placement(PlacementSettings(overloaded_threshold_percentage=85))
    assert placement.select(bundle_name(0), {"busy": busy, "idle": idle, "hot": hot}, 0) == "idle"
    assert placement.select(bundle_name(1), {"busy": busy, "hot": hot}, 0) == "busy"


def _at(report_: LoadReport, ms: int) -> LoadReport:
    return dataclasses.replace(report_, last_update_ms=ms)


def test_long_term_rates_count_each_report_once_and_forget_bundles_no_report_lists() -> None:
    rates = LongTermRates(samples_max=1000, ttl_ms=10_000)
    first = _at(report("a", {bundle_name(0): BundleStats(msg_rate_in=100)}), 1)
    rates.observe({"a": first}, 0)
    rates.observe({"a": first}, 1)  # the same report again: no second sample
    rates.observe({"a": _at(report("a", {bundle_name(0): BundleStats(msg_rate_in=400)}), 2)}, 2)
    assert rates.rate(bundle_name(0)) == pytest.approx(250)
    rates.observe({"a": _at(report("a"), 3)}, 10_003)
    assert rates.rate(bundle_name(0)) == 0
    assert len(rates) == 0


def test_long_term_rates_weigh_a_new_sample_at_most_one_in_samples_max() -> None:
    rates = LongTermRates(samples_max=4)
    for ms in range(1, 9):
        rates.observe({"a": _at(report("a", {bundle_name(0): BundleStats(msg_rate_in=80)}), ms)}, ms)
    rates.observe({"a": _at(report("a", {bundle_name(0): BundleStats(msg_rate_in=0)}), 9)}, 9)
    assert rates.rate(bundle_name(0)) == pytest.approx(60)  # 80 + (0 - 80) / 4


def test_placement_ranks_brokers_by_long_term_rates_not_the_last_report() -> None:
    placement = Placement(PlacementSettings())
    bursty, steady = bundle_name(100, "x/y"), bundle_name(101, "x/y")
    for ms in range(1, 10):
        reports = {
            "a": _at(report("a", {bursty: BundleStats(msg_rate_in=1000)}), ms),
            "b": _at(report("b", {steady: BundleStats(msg_rate_in=100)}), ms),
        }
        placement.rates.observe(reports, ms)
    quiet_now = {
        "a": _at(report("a", {bursty: BundleStats(msg_rate_in=0)}), 10),
        "b": _at(report("b", {steady: BundleStats(msg_rate_in=100)}), 10),
    }
    # a's latest report says 0 msgs/s, but it usually carries 900 more than b
    assert placement.select(bundle_name(0), quiet_now, 10) == "b"


def test_a_moved_bundle_brings_its_long_term_rate_to_the_broker_it_is_assigned_to() -> None:
    placement = Placement(PlacementSettings())
    heavy, light = bundle_name(100, "x/y"), bundle_name(101, "x/y")
    placement.rates.observe({"a": _at(report("a", {heavy: BundleStats(msg_rate_in=1000)}), 1)}, 1)
    # heavy was unloaded; b is assigned it (not yet in b's report) while a now carries only a light bundle
    reports = {
        "a": _at(report("a", {light: BundleStats(msg_rate_in=10)}), 2),
        "b": _at(report("b"), 2),
    }
    placement.assigned[heavy] = ("b", 2)
    assert placement.select(bundle_name(0, "other/ns"), reports, 3) == "a"


def test_placement_forgets_assignments_a_report_shows_and_gone_brokers() -> None:
    placement = Placement(PlacementSettings(assignment_expiry_ms=1000))
    reports = {"a": report("a"), "b": report("b")}
    first = placement.select(bundle_name(0), reports, 0)
    assert first is not None
    second = placement.select(bundle_name(1), reports, 1)
    assert {first, second} == {"a", "b"}
    shown = {**reports, first: report(first, {bundle_name(0): BundleStats()})}
    placement.forget_seen(shown, 2)
    assert bundle_name(0) not in placement.assigned
    placement.forget_seen(shown, 5000)
    assert placement.assigned == {}
    assert placement.select(bundle_name(2), {}, 0) is None


# -- shedding -----------------------------------------------------------------------------------------


def loaded_broker(name: str, bundles: int, throughput_each: float, first: int) -> LoadReport:
    stats = {bundle_name(first + i): BundleStats(msg_throughput_in=throughput_each) for i in range(bundles)}
    return report(name, stats, kbps_limit=1000)


def shedder(grace_min: float = 30, history: float = 0.0) -> ThresholdShedder:
    return ThresholdShedder(
        ShedderSettings(
            threshold_percentage=10,
            history_resource_percentage=history,
            min_throughput_threshold_mb=0,
            grace_period_min=grace_min,
            weights=BANDWIDTH_ONLY,
        )
    )


def test_an_added_empty_broker_makes_the_loaded_ones_shed() -> None:
    reports = {f"b{i}": loaded_broker(f"b{i}", 5, 20_000, i * 10) for i in range(3)}
    reports["new"] = report("new", kbps_limit=1000)
    plan = shedder().find_bundles_for_unloading(reports, 0)
    assert {broker for broker, _ in plan} == {"b0", "b1", "b2"}
    for broker, bundle in plan:
        assert bundle in reports[broker].bundles


def test_balanced_brokers_shed_nothing_and_a_single_bundle_is_kept() -> None:
    balanced = {f"b{i}": loaded_broker(f"b{i}", 4, 20_000, i * 10) for i in range(3)}
    assert shedder().find_bundles_for_unloading(balanced, 0) == []
    lonely = {"one": loaded_broker("one", 1, 90_000, 0), "idle": report("idle", kbps_limit=1000)}
    assert shedder().find_bundles_for_unloading(lonely, 0) == []


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.floats(0, 50_000)), min_size=2, max_size=6),
    st.integers(1, 5),
)
def test_a_shed_bundle_is_not_shed_again_within_the_grace_period(
    brokers: list[tuple[int, float]], rounds: int
) -> None:
    reports = {
        f"b{i}": loaded_broker(f"b{i}", count, throughput, i * 100)
        for i, (count, throughput) in enumerate(brokers)
    }
    decider = shedder(grace_min=1)
    unloaded: dict[str, int] = {}
    for round_index in range(rounds):
        now_ms = round_index * 10_000  # every 10 s, well within the 1 min grace period
        for broker, bundle in decider.find_bundles_for_unloading(reports, now_ms):
            assert bundle in reports[broker].bundles
            assert len(reports[broker].bundles) > 1
            assert bundle not in unloaded, "a bundle was shed twice within its grace period"
            unloaded[bundle] = now_ms
            decider.record_unload(bundle, now_ms)
    later = decider.find_bundles_for_unloading(reports, 10 * 60_000)
    assert all(len(reports[b].bundles) > 1 for b, _ in later)


def test_smoothing_needs_rounds_before_a_new_imbalance_counts() -> None:
    reports = {f"b{i}": loaded_broker(f"b{i}", 5, 20_000, i * 10) for i in range(3)}
    reports["new"] = report("new", kbps_limit=1000)
    smooth = shedder(history=0.9)
    names = ["b0", "b1", "b2", "new"]
    balanced = {name: loaded_broker(name, 4, 15_000, i * 10) for i, name in enumerate(names)}
    for round_index in range(30):
        smooth.find_bundles_for_unloading(balanced, round_index)
    assert smooth.find_bundles_for_unloading(reports, 100) == []  # one round of imbalance is smoothed away
    rounds = 1
    while not smooth.find_bundles_for_unloading(reports, 100 + rounds):
        rounds += 1
        assert rounds < 50
    assert rounds > 1


# -- splits -------------------------------------------------------------------------------------------


@given(
    st.integers(0, 3000),
    st.integers(0, 3000),
    st.floats(0, 60_000),
    st.floats(0, 300 * MB),
    st.integers(1, 200),
)
def test_a_bundle_is_split_exactly_when_it_exceeds_a_threshold_below_the_namespace_maximum(
    topics: int, sessions: int, rate: float, throughput: float, bundles_now: int
) -> None:
    stats = BundleStats(
        msg_rate_in=rate, msg_throughput_in=throughput, topics=topics, producer_count=sessions
    )
    limits = SplitSettings()
    planned = bundles_to_split([report("b", {bundle_name(0): stats})], {NS: bundles_now}, limits)
    exceeds = (
        topics > limits.max_topics
        or sessions > limits.max_sessions
        or rate > limits.max_msg_rate_per_s
        or throughput > limits.max_bandwidth_mbytes * MB
    )
    expected = exceeds and topics > 1 and bundles_now < limits.maximum_bundles
    assert bool(planned) == expected
    if planned:
        assert planned[0][:2] == ("b", bundle_name(0))
        assert namespace_of(planned[0][1]) == NS


def test_splits_stop_at_the_namespace_maximum() -> None:
    hot = BundleStats(topics=5, msg_rate_in=1e6)
    reports = [report("b", {bundle_name(i): hot for i in range(10)})]
    planned = bundles_to_split(reports, {NS: 125}, SplitSettings(maximum_bundles=128))
    assert len(planned) == 3


def test_least_resource_usage_placement_ranks_by_weighted_usage_not_rate() -> None:
    busy_rate = report("rate", {bundle_name(100, "x/y"): BundleStats(msg_rate_in=500)}, cpu=10)
    busy_cpu = report("cpu", {bundle_name(101, "x/y"): BundleStats(msg_rate_in=5)}, cpu=60)
    by_usage = Placement(PlacementSettings(strategy="LeastResourceUsageWithWeight"))
    assert by_usage.select(bundle_name(0), {"rate": busy_rate, "cpu": busy_cpu}, 0) == "rate"
    by_rate = Placement(PlacementSettings())
    assert by_rate.select(bundle_name(0), {"rate": busy_rate, "cpu": busy_cpu}, 0) == "cpu"


def test_the_overload_shedder_sheds_only_above_the_overload_threshold() -> None:
    settings = ShedderSettings(
        strategy="OverloadShedder", overloaded_threshold_percentage=85, min_throughput_threshold_mb=0
    )
    hot = {bundle_name(i): BundleStats(msg_throughput_in=1000.0 * (i + 1)) for i in range(3)}
    reports = {
        "hot": report("hot", hot, cpu=95),
        "warm": report("warm", {bundle_name(9): BundleStats()}, cpu=80),
    }
    plan = ThresholdShedder(settings).find_bundles_for_unloading(reports, 0)
    assert plan == [("hot", bundle_name(2))]  # the largest first; 95 - 85 + 5 = 15 % of the throughput
    cool = {"hot": report("hot", hot, cpu=80)}
    assert ThresholdShedder(settings).find_bundles_for_unloading(cool, 0) == []


@given(st.integers(1, 64), st.data())
def test_splitting_a_bundle_in_half_keeps_every_other_bundle(count: int, data: st.DataObject) -> None:
    bounds = bundle_boundaries(count)
    index = data.draw(st.integers(0, count - 1))
    bundle = bundles_of(bounds)[index]
    split = split_in_half(bundle, bounds)
    halves = bundles_of(split)
    assert len(halves) == count + 1
    assert halves[index].lower == bundle.lower
    assert halves[index + 1].upper == bundle.upper
    assert halves[index].upper == halves[index + 1].lower
    assert [b for b in halves if b not in (halves[index], halves[index + 1])] == [
        b for b in bundles_of(bounds) if b != bundle
    ]
    with pytest.raises(ValueError, match="not a bundle"):
        split_in_half(bundle, split)  # already split
