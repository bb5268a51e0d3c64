"""The comparison harness's pure parts: figures, ratios, tables, the report file, the command line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bench.compare import parse_args, settings_of
from bench.comparison.figures import Failure, Latency, Throughput
from bench.comparison.report import (
    Results,
    Scenario,
    SystemInfo,
    append_section,
    format_ratio,
    latency_table,
    median_figure,
    median_results,
    ratio,
    render_tables,
    rounds_table,
    scenarios,
    throughput_table,
)

STANDALONE = SystemInfo("magnetar-standalone", "fsync (1 bookie)")
CLUSTER = SystemInfo("magnetar-cluster", "fsync on 2 of 3 bookies")
REDIS = SystemInfo("redis-always", "fsync (AOF always)")
NATS = SystemInfo("nats", "page cache")


def latency(p50: float, p99: float, p999: float, achieved: float = 1000.0, count: int = 10_000) -> Latency:
    return Latency(
        1000.0, achieved, p50, p99, p999, p999 * 2, count=count, expected=10_000, send_lag_p99_ms=0.5
    )


def rows(table: str) -> dict[str, list[str]]:
    """system name -> its cells, from a Markdown table."""
    result = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        result[cells[0]] = cells[1:]
    return result


def test_ratio_divides_magnetar_by_the_other_system() -> None:
    assert ratio(5000.0, 20000.0) == 0.25
    assert ratio(3.0, 1.5) == 2.0


@pytest.mark.parametrize(
    ("magnetar", "other"), [(None, 1.0), (1.0, None), (0.0, 1.0), (1.0, 0.0), (math.nan, 1.0)]
)
def test_no_ratio_without_two_numbers(magnetar: float | None, other: float | None) -> None:
    assert ratio(magnetar, other) is None


def test_ratio_format_keeps_two_or_three_significant_digits() -> None:
    assert format_ratio(None) == "n/a"
    assert format_ratio(0.2512) == "0.25"
    assert format_ratio(3.456) == "3.46"
    assert format_ratio(12.34) == "12.3"
    assert format_ratio(1234.5) == "1,234"


def test_throughput_rate_counts_intervals_when_timed_from_the_first_delivery() -> None:
    assert Throughput(count=1001, elapsed_s=2.0).rate == 500.5
    assert Throughput(count=1001, elapsed_s=2.0, intervals=1000).rate == 500.0
    assert Throughput(count=0, elapsed_s=0.0).rate == 0.0


def test_a_fixed_rate_run_is_saturated_below_its_target_or_with_messages_missing() -> None:
    assert not latency(1, 2, 3, achieved=990.0).saturated
    assert latency(1, 2, 3, achieved=900.0).saturated
    assert latency(1, 2, 3, count=9_000).saturated


def test_throughput_table_puts_durability_next_to_each_figure_and_ratios_per_magnetar() -> None:
    results = Results([STANDALONE, CLUSTER, REDIS, NATS])
    scenario = Scenario("publish", "Publish", 100)
    results.put(scenario, "magnetar-standalone", Throughput(count=10_000, elapsed_s=1.0))
    results.put(scenario, "magnetar-cluster", Throughput(count=5_000, elapsed_s=1.0))
    results.put(scenario, "redis-always", Throughput(count=40_000, elapsed_s=1.0))
    results.put(scenario, "nats", Failure("not measured: nats-server is not installed"))
    table = throughput_table(results, scenario)
    assert table.splitlines()[0] == (
        "| system | durability | msgs/s | magnetar-standalone ÷ this | magnetar-cluster ÷ this |"
    )
    cells = rows(table)
    assert cells["redis-always"] == ["fsync (AOF always)", "40,000", "0.25", "0.12"]
    assert cells["magnetar-standalone"] == ["fsync (1 bookie)", "10,000", "1.00", "0.50"]
    assert cells["nats"] == ["page cache", "n/a (not measured: nats-server is not installed)", "n/a", "n/a"]


def test_an_incomplete_throughput_run_says_how_far_it_got() -> None:
    results = Results([STANDALONE])
    scenario = Scenario("publish", "Publish", 100)
    results.put(
        scenario, "magnetar-standalone", Throughput(count=600, elapsed_s=60.0, complete=False, errors=3)
    )
    assert (
        rows(throughput_table(results, scenario))["magnetar-standalone"][1]
        == "10 (only 600 in 60 s, 3 failed)"
    )


def test_latency_table_gives_percentiles_send_lag_and_ratios() -> None:
    results = Results([STANDALONE, REDIS, NATS])
    scenario = Scenario("rate-1000", "Publish latency", 100)
    results.put(scenario, "magnetar-standalone", latency(4.0, 40.0, 400.0, achieved=700.0, count=7_000))
    results.put(scenario, "redis-always", latency(2.0, 10.0, 100.0))
    results.put(scenario, "nats", latency(2.0, 10.0, 100.0, achieved=500.0))
    table = latency_table(results, scenario)
    assert table.splitlines()[0] == (
        "| system | durability | achieved msgs/s | p50 | p99 | p99.9 | send lag p99 "
        "| magnetar-standalone ÷ this (p50 / p99 / p99.9) |"
    )
    cells = rows(table)
    assert cells["magnetar-standalone"] == [
        "fsync (1 bookie)", "700 (saturated: 7,000 of 10,000 acked)",
        "4.00", "40.0", "400", "0.50", "1.00 / 1.00 / 1.00",
    ]  # fmt: skip
    assert cells["redis-always"] == [
        "fsync (AOF always)", "1,000", "2.00", "10.0", "100", "0.50", "2.00 / 4.00 / 4.00",
    ]  # fmt: skip
    assert cells["nats"][1] == "500 (saturated)"


def test_a_consumer_that_skips_or_repeats_messages_is_flagged() -> None:
    results = Results([REDIS])
    scenario = Scenario("consume", "Consume", 100)
    results.put(scenario, "redis-always", Throughput(count=900, elapsed_s=1.0, skipped=100, duplicates=7))
    assert rows(throughput_table(results, scenario))["redis-always"][1] == "900 (100 skipped, 7 redelivered)"


def test_every_scenario_of_every_size_gets_a_table() -> None:
    all_scenarios = scenarios([100, 1000], [1000.0, 5000.0, 20000.0], 1000.0)
    assert [(s.key, s.size) for s in all_scenarios[:6]] == [
        ("publish", 100), ("consume", 100), ("rate-1000", 100), ("rate-5000", 100), ("rate-20000", 100),
        ("e2e", 100),
    ]  # fmt: skip
    assert len(all_scenarios) == 12
    text = render_tables(Results([STANDALONE]), all_scenarios)
    assert text.count("#### ") == 12
    assert "#### Publish latency at 20,000 msgs/s, 1000-byte messages (ms)" in text


def test_sections_are_appended_to_the_results_file(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    append_section(path, "## first\n\nfigures")
    append_section(path, "## second\n")
    assert path.read_text() == "# Benchmark results\n\n## first\n\nfigures\n\n## second\n"


def test_quick_sets_short_defaults_that_explicit_flags_override() -> None:
    quick = settings_of(parse_args(["--quick", "--rates", "2000"]))
    assert quick.sizes == [100]
    assert quick.rates == [2000.0]
    assert quick.duration_s == 2.0
    full = settings_of(parse_args([]))
    assert full.sizes == [100, 1000]
    assert full.rates == [1000.0, 5000.0, 20000.0]
    assert full.messages == 100_000


def test_rounds_default_to_one_and_must_be_positive() -> None:
    assert parse_args([]).rounds == 1
    assert parse_args(["--rounds", "3"]).rounds == 3
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_the_median_round_is_reported_and_every_round_is_listed() -> None:
    publish = Scenario("publish", "Publish throughput", 100)
    rate = Scenario("rate-1000", "Publish latency at 1,000 msgs/s", 100)
    rounds = []
    for elapsed_s, p99, fails, steal in (
        (2.0, 9.0, False, 0.0),
        (1.0, 3.0, False, 0.004),
        (4.0, 5.0, True, 0.27),
    ):
        results = Results([STANDALONE, REDIS])
        results.put(publish, STANDALONE.name, Throughput(100_000, elapsed_s), steal)
        results.put(publish, REDIS.name, Failure("redis died") if fails else Throughput(100_000, 1.0))
        results.put(rate, STANDALONE.name, latency(1.0, p99, p99 * 2))
        rounds.append(results)
    merged = median_results(rounds)
    assert merged.get(publish, STANDALONE.name) == Throughput(100_000, 2.0)  # 50k of 25k, 50k, 100k
    assert merged.get(publish, REDIS.name) == Throughput(100_000, 1.0)  # failed rounds do not count
    assert merged.get(rate, STANDALONE.name) == latency(1.0, 5.0, 10.0)  # p99 3, 5, 9
    # An even count reports the worse middle round; a scenario no round measured stays a failure.
    assert median_figure([Throughput(10, 1.0), Throughput(30, 1.0)]) == Throughput(10, 1.0)
    assert median_figure([latency(1.0, 3.0, 4.0), latency(1.0, 2.0, 4.0)]) == latency(1.0, 3.0, 4.0)
    saturated = latency(1.0, 1.0, 1.0, achieved=500.0)
    assert median_figure([latency(1.0, 9.0, 9.0), saturated]) == saturated
    assert median_figure([Failure("a"), Failure("b")]) == Failure("a")
    table = rows_by_scenario(rounds_table(rounds, [publish, rate]))
    # the CPU time the hypervisor stole during a phase is named from 1 % on
    assert table[("Publish throughput", STANDALONE.name)] == ["50,000", "100,000", "25,000 (27% stolen)"]
    assert table[("Publish throughput", REDIS.name)] == ["100,000", "100,000", "n/a"]
    assert table[("Publish latency at 1,000 msgs/s", STANDALONE.name)] == ["9.00", "3.00", "5.00"]


def rows_by_scenario(table: str) -> dict[tuple[str, str], list[str]]:
    result = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        result[(cells[0], cells[1])] = cells[2:]
    return result
