"""What ``tests/bench/ab_standalone.py`` prints: one table per run, a row per phase, as text or as the
RESULTS.md entry (``--markdown``). Pure: it formats the summaries of ``tests/bench/ab_stats.py``."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.ab_stats import Pair, PhaseSummary, pairs_needed, percent, summarize

HEADER = ("phase", "old median", "new median", "change", "A/A change", "detectable", "verdict")


@dataclass(frozen=True)
class Measure:
    quantity: str  # "CPU time" / "instructions"
    unit: str  # "µs" / "instructions"
    description: str
    digits: int  # decimals of a figure per message
    per: str = " per message"  # what a figure is of: "" for a latency percentile


@dataclass(frozen=True)
class Report:
    command: str
    tool: str | None  # the tool's own command when ``command`` is the make command that ran it
    started: datetime.datetime
    ended: datetime.datetime
    load_start: str
    load_end: str
    old: str  # short names, as the title gives them: "`288a165`"
    new: str
    old_detail: str  # what each build is: "`288a165`: owner proxy: ..."
    new_detail: str
    measure: Measure
    pairs: int
    messages: dict[str, int]
    tolerance: float
    summaries: tuple[PhaseSummary, ...]

    def rows(self) -> list[list[str]]:
        rows = []
        for summary in self.summaries:
            aa = f"{percent(summary.aa_change):+.1f} %" if summary.aa_change is not None else "-"
            detectable = (
                f"±{percent(summary.detectable):.1f} %" if summary.detectable is not None else "unknown"
            )
            rows.append(
                [
                    summary.phase,
                    f"{summary.old_median:,.{self.measure.digits}f}",
                    f"{summary.new_median:,.{self.measure.digits}f}",
                    f"{percent(summary.change):+.1f} %",
                    aa,
                    detectable,
                    summary.verdict,
                ]
            )
        return rows

    def notes(self) -> list[str]:
        """One line per phase whose verdict is "inside the noise", with what it would take to decide."""
        notes = []
        for summary in self.summaries:
            if summary.verdict != "inside the noise":
                continue
            if summary.detectable is None or summary.spread is None:
                notes.append(f"{summary.phase}: too few A/A pairs to estimate the noise (3 or more needed)")
            elif percent(summary.detectable) > self.tolerance:
                needed = pairs_needed(summary.spread, summary.aa_pairs, self.tolerance)
                spread = f"A/A spread ±{percent(summary.spread):.1f} % per pair"
                if summary.aa_change is not None and percent(abs(summary.aa_change)) > self.tolerance:
                    what = "the A/A control itself moved more than that: a quieter machine"
                elif needed:
                    what = f"about {needed} pairs at this spread"
                else:
                    what = "a quieter machine"
                notes.append(f"{summary.phase}: cannot detect {self.tolerance:g} % ({spread}; {what})")
        return notes

    def dates(self) -> str:
        end = (
            f"{self.ended:%H:%M}"
            if self.ended.date() == self.started.date()
            else f"{self.ended:%Y-%m-%d %H:%M}"
        )
        return f"{self.started:%Y-%m-%d %H:%M}-{end} UTC"

    def message_counts(self) -> str:
        counts = [f"{count:,} {protocol}" for protocol, count in self.messages.items()]
        return " and ".join(counts) + " messages per phase"

    def legend(self) -> str:
        return (
            f"Figures: {self.measure.unit}{self.measure.per}, medians of the A/B pairs' runs. Change: the "
            "median over the A/B pairs of new / old; A/A change: the same over the A/A pairs (a build "
            "against itself). Detectable: the smallest change this run tells from noise (~95 %, from the "
            "A/A pairs' spread and the number of pairs). Verdict: worse / better beyond it; no worse: any "
            "regression is below "
            f"{self.tolerance:g} %; inside the noise: the run cannot rule out one of {self.tolerance:g} %."
        )

    def text(self) -> str:
        table = [list(HEADER), *self.rows()]
        widths = [max(len(row[column]) for row in table) for column in range(len(HEADER))]
        lines = [
            f"command: {self.command}" + (f" (runs {self.tool})" if self.tool else ""),
            f"date: {self.dates()}",
            f"uptime at start: {self.load_start}",
            f"uptime at end:   {self.load_end}",
            f"old: {self.old_detail}",
            f"new: {self.new_detail}",
            f"measure: {self.measure.description}",
            f"pairs: {self.pairs} A/B and {self.pairs} A/A; {self.message_counts()}",
            "",
            *(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                for row in table
            ),
            "",
            self.legend(),
            *self.notes(),
        ]
        return "\n".join(lines)

    def markdown(self) -> str:
        ran = f" (runs `{self.tool}`)" if self.tool else ""
        plural = "pairs" if self.pairs > 1 else "pair"
        lines = [
            f"## bench-ab: {self.measure.quantity}{self.measure.per}, {self.new} against {self.old} "
            f"({self.dates()})",
            "",
            f"Command: `{self.command}`{ran}. Old: {self.old_detail}. New: {self.new_detail}. Measure: "
            f"{self.measure.description}. {self.pairs} A/B and {self.pairs} A/A {plural} (the rounds "
            f"alternate; the A/A control runs old against old and new against new), {self.message_counts()}. "
            f"`uptime` at the start: `{self.load_start}`; at the end: `{self.load_end}`.",
            "",
            "| " + " | ".join(HEADER) + " |",
            "|---|---:|---:|---:|---:|---:|---|",
            *("| " + " | ".join(row) + " |" for row in self.rows()),
            "",
            self.legend(),
        ]
        notes = self.notes()
        if notes:
            lines += ["", *(f"- {note}" for note in notes)]
        return "\n".join(lines)


def pairs_from_runs(runs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[Pair]], dict[str, list[Pair]]]:
    """The A/B and A/A pairs of each phase, from the runs' records (``round``, ``kind``, ``phase``, ``slot``:
    the old or new place, ``per_message``), phases in the order they ran; a pair missing a run (an
    interrupted round) is left out."""
    places: dict[tuple[int, str], dict[str, float]] = {}
    kinds: dict[tuple[int, str], str] = {}
    for run in runs:
        key = (int(run["round"]), str(run["phase"]))
        places.setdefault(key, {})[str(run["slot"])] = float(run["per_message"])
        kinds[key] = str(run["kind"])
    ab: dict[str, list[Pair]] = {}
    aa: dict[str, list[Pair]] = {}
    for key, place in places.items():
        _, phase = key
        ab.setdefault(phase, [])
        aa.setdefault(phase, [])
        if "old" in place and "new" in place:
            (ab if kinds[key] == "A/B" else aa)[phase].append(Pair(old=place["old"], new=place["new"]))
    return ab, aa


def report_from_saved(saved: Mapping[str, Any]) -> Report:
    """The report of a run saved by ``tests/bench/ab_standalone.py`` (``.bench/ab/last-run.json``)."""
    ab, aa = pairs_from_runs(saved["runs"])
    tolerance = float(saved["tolerance"])
    summaries = tuple(summarize(phase, ab[phase], aa[phase], tolerance) for phase in ab if ab[phase])
    if not summaries:
        raise ValueError("the saved run holds no complete A/B pair")
    return Report(
        command=saved["command"],
        tool=saved["tool"],
        started=datetime.datetime.fromisoformat(saved["started"]),
        ended=datetime.datetime.fromisoformat(saved["ended"] or saved["started"]),
        load_start=saved["load_start"],
        load_end=saved["load_end"] or "(interrupted)",
        old=saved["old"],
        new=saved["new"],
        old_detail=saved["old_detail"],
        new_detail=saved["new_detail"],
        measure=Measure(**saved["measure"]),
        pairs=min(len(pairs) for pairs in ab.values() if pairs),
        messages=dict(saved["messages"]),
        tolerance=tolerance,
        summaries=summaries,
    )


def measure_fields(measure: Measure) -> dict[str, Any]:
    return asdict(measure)
