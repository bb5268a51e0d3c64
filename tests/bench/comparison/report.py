"""The comparison's report: one Markdown table per scenario, every figure next to its system's durability and
as ratios against the Magnetar variants measured in the same run (pure functions, no I/O but the final
append to RESULTS.md).

Ratio = Magnetar's figure / the system's figure. For throughputs above 1 means Magnetar is faster; for
latencies above 1 means Magnetar is slower. A figure that is missing, zero or not a number gives no ratio.
"send lag" is how late the harness itself handed messages to the client (its own scheduling, or a full
window): a large one means the client side, not the server, set the pace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.comparison.figures import Failure, Figure, Latency, Throughput, is_number

MISSING = "n/a"


@dataclass(frozen=True)
class SystemInfo:
    name: str
    durability: str
    durability_detail: str = ""
    consume_mode: str = ""
    note: str = ""


@dataclass(frozen=True)
class Scenario:
    key: str
    """``publish``, ``consume``, ``rate-<msgs/s>`` or ``e2e``."""
    title: str
    size: int


@dataclass
class Results:
    systems: list[SystemInfo]
    figures: dict[tuple[str, int, str], Figure] = field(default_factory=dict)
    """(scenario key, size, system name) -> figure."""
    steal: dict[tuple[str, int, str], float] = field(default_factory=dict)
    """(scenario key, size, system name) -> share of the machine's CPU time stolen during the phase."""

    def put(self, scenario: Scenario, system: str, figure: Figure, steal: float = 0.0) -> None:
        self.figures[(scenario.key, scenario.size, system)] = figure
        self.steal[(scenario.key, scenario.size, system)] = steal

    def get(self, scenario: Scenario, system: str) -> Figure | None:
        return self.figures.get((scenario.key, scenario.size, system))

    def stolen(self, scenario: Scenario, system: str) -> float:
        return self.steal.get((scenario.key, scenario.size, system), 0.0)


def _rank(figure: Throughput | Latency) -> tuple[float, ...]:
    """Order of a scenario's rounds, worst first: lowest throughput, or saturated and then highest p99."""
    if isinstance(figure, Throughput):
        return (figure.rate,)
    return (0.0 if figure.saturated else 1.0, -figure.p99_ms)


def median_figure(figures: Sequence[Figure]) -> Figure:
    """The median round's figure (the lower median of an even count: the worse of the two middle ones); a
    failure only when no round measured anything."""
    measured = sorted((f for f in figures if not isinstance(f, Failure)), key=_rank)
    if not measured:
        return figures[0]
    return measured[(len(measured) - 1) // 2]


def median_results(rounds: Sequence[Results]) -> Results:
    """One figure per scenario and system: the median of the rounds (see :func:`median_figure`)."""
    merged = Results(rounds[0].systems)
    for key in dict.fromkeys(k for r in rounds for k in r.figures):
        merged.figures[key] = median_figure([r.figures[key] for r in rounds if key in r.figures])
    return merged


def _round_value(figure: Figure | None) -> str:
    if isinstance(figure, Throughput):
        return format_rate(figure.rate) + ("" if figure.complete else " (incomplete)")
    if isinstance(figure, Latency):
        return format_ms(figure.p99_ms) + (" (saturated)" if figure.saturated else "")
    return MISSING


STEAL_SHOWN_FROM = 0.01
"""A round's cell names the CPU time the hypervisor stole during its phase from this share on."""


def _round_cell(results: Results, scenario: Scenario, system: str) -> str:
    value = _round_value(results.get(scenario, system))
    steal = results.stolen(scenario, system)
    return value + (f" ({steal:.0%} stolen)" if steal >= STEAL_SHOWN_FROM else "")


def rounds_table(rounds: Sequence[Results], all_scenarios: Sequence[Scenario]) -> str:
    """Every round's figure (msgs/s for throughputs, p99 ms for latencies): how much the machine moved, and
    how much CPU time other guests of the host took meanwhile (steal), where it was 1 % or more."""
    header = ["scenario", "system", *(f"round {index + 1}" for index in range(len(rounds)))]
    rows = [
        [scenario.title, system.name, *(_round_cell(r, scenario, system.name) for r in rounds)]
        for scenario in all_scenarios
        for system in rounds[0].systems
    ]
    return _markdown(header, rows)


def scenarios(sizes: Sequence[int], rates: Sequence[float], e2e_rate: float) -> list[Scenario]:
    result = []
    for size in sizes:
        result += [
            Scenario("publish", f"Publish throughput, all acknowledged, {size}-byte messages (msgs/s)", size),
            Scenario("consume", f"Consume throughput, {size}-byte messages (msgs/s)", size),
        ]
        result += [
            Scenario(
                f"rate-{rate:g}", f"Publish latency at {rate:,.0f} msgs/s, {size}-byte messages (ms)", size
            )
            for rate in rates
        ]
        result.append(
            Scenario("e2e", f"End-to-end latency at {e2e_rate:,.0f} msgs/s, {size}-byte messages (ms)", size)
        )
    return result


def ratio(magnetar: float | None, other: float | None) -> float | None:
    if magnetar is None or other is None or not is_number(magnetar) or not is_number(other):
        return None
    return magnetar / other if magnetar and other else None


def format_ratio(value: float | None) -> str:
    if value is None:
        return MISSING
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def format_rate(value: float) -> str:
    return f"{value:,.0f}"


def format_ms(value: float) -> str:
    if not is_number(value):
        return MISSING
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _magnetars(results: Results) -> list[str]:
    return [s.name for s in results.systems if s.name.startswith("magnetar")]


def _throughput_value(figure: Figure | None) -> float | None:
    return figure.rate if isinstance(figure, Throughput) and figure.count else None


def _throughput_cell(figure: Figure | None) -> str:
    if figure is None:
        return MISSING
    if isinstance(figure, Failure):
        return f"{MISSING} ({_escape(figure.reason)})"
    assert isinstance(figure, Throughput)
    cell = format_rate(figure.rate)
    notes = []
    if not figure.complete:
        notes.append(f"only {figure.count:,} in {figure.elapsed_s:.0f} s")
    if figure.errors:
        notes.append(f"{figure.errors:,} failed")
    if figure.skipped:
        notes.append(f"{figure.skipped:,} skipped")
    if figure.duplicates:
        notes.append(f"{figure.duplicates:,} redelivered")
    return f"{cell} ({', '.join(notes)})" if notes else cell


def throughput_table(results: Results, scenario: Scenario) -> str:
    magnetars = _magnetars(results)
    header = ["system", "durability", "msgs/s", *(f"{m} ÷ this" for m in magnetars)]
    rows = []
    for system in results.systems:
        figure = results.get(scenario, system.name)
        value = _throughput_value(figure)
        ratios = [format_ratio(ratio(_throughput_value(results.get(scenario, m)), value)) for m in magnetars]
        rows.append([system.name, system.durability, _throughput_cell(figure), *ratios])
    return _markdown(header, rows)


def _latency_values(figure: Figure | None) -> tuple[float, float, float] | None:
    return figure.percentiles() if isinstance(figure, Latency) and figure.count else None


def _latency_cells(figure: Figure | None) -> list[str]:
    if figure is None:
        return [MISSING] * 5
    if isinstance(figure, Failure):
        return [f"{MISSING} ({_escape(figure.reason)})", *[MISSING] * 4]
    assert isinstance(figure, Latency)
    notes = []
    if figure.saturated:
        notes.append(
            f"saturated: {figure.count:,} of {figure.expected:,} acked"
            if figure.count < figure.expected
            else "saturated"
        )
    if figure.errors:
        notes.append(f"{figure.errors:,} failed")
    if figure.duplicates:
        notes.append(f"{figure.duplicates:,} redelivered")
    achieved = format_rate(figure.achieved_rate) + (f" ({', '.join(notes)})" if notes else "")
    return [achieved, *(format_ms(v) for v in figure.percentiles()), format_ms(figure.send_lag_p99_ms)]


def _latency_ratios(magnetar: Figure | None, other: Figure | None) -> str:
    mine, theirs = _latency_values(magnetar), _latency_values(other)
    if mine is None or theirs is None:
        return MISSING
    return " / ".join(format_ratio(ratio(a, b)) for a, b in zip(mine, theirs, strict=True))


def latency_table(results: Results, scenario: Scenario) -> str:
    magnetars = _magnetars(results)
    header = [
        "system", "durability", "achieved msgs/s", "p50", "p99", "p99.9", "send lag p99",
        *(f"{m} ÷ this (p50 / p99 / p99.9)" for m in magnetars),
    ]  # fmt: skip
    rows = []
    for system in results.systems:
        figure = results.get(scenario, system.name)
        ratios = [_latency_ratios(results.get(scenario, m), figure) for m in magnetars]
        rows.append([system.name, system.durability, *_latency_cells(figure), *ratios])
    return _markdown(header, rows)


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_tables(results: Results, all_scenarios: Sequence[Scenario]) -> str:
    parts = []
    for scenario in all_scenarios:
        table = (
            throughput_table(results, scenario)
            if scenario.key in ("publish", "consume")
            else latency_table(results, scenario)
        )
        parts.append(f"#### {scenario.title}\n\n{table}\n")
    return "\n".join(parts)


def render_systems(results: Results, how: dict[str, str]) -> str:
    header = ["system", "what an ack means", "consumer", "started as"]
    rows = [
        [
            s.name,
            _escape(s.durability_detail or s.durability),
            _escape(s.consume_mode),
            _escape(how.get(s.name, "")),
        ]
        for s in results.systems
    ]
    return _markdown(header, rows)


def append_section(path: Path, text: str) -> None:
    existing = path.read_text() if path.exists() else "# Benchmark results\n"
    path.write_text(existing.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n")
