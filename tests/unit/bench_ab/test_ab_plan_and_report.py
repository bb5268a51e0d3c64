"""The A/B guard's plan of rounds, its reading of ``perf stat`` and its report
(``tests/bench/ab_standalone.py``, ``tests/bench/ab_report.py``): pure parts, no process, no timing."""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path

import pytest
from bench.ab_report import Measure, Report, measure_fields, pairs_from_runs, report_from_saved
from bench.ab_standalone import Build, parse_perf_csv, schedule, tool_command
from bench.ab_stats import Pair, summarize

OLD = Build("old", "`288a165`", "`288a165` (owner proxy)", Path("/old/.venv/bin/python"), {}, Path("/old"))
NEW = Build("new", "the working tree", "the working tree, its `.venv`", Path("/new/python"), {}, Path("/new"))


def test_rounds_alternate_a_b_and_a_a_with_both_orders_and_both_builds_as_often() -> None:
    rounds = schedule(OLD, NEW, 8)
    assert len(rounds) == 16
    assert [plan.kind for plan in rounds] == ["A/B", "A/A"] * 8
    ab = [plan for plan in rounds if plan.kind == "A/B"]
    aa = [plan for plan in rounds if plan.kind == "A/A"]
    # A/B: old first in half the pairs, new first in the other half; old always in the old place
    assert Counter(plan.first.label for plan in ab) == {"old": 4, "new": 4}
    for plan in ab:
        in_old_place = plan.first if plan.old_slot == 0 else plan.second
        assert in_old_place.label == "old"
    # A/A: old against old and new against new, each in both order patterns
    assert all(plan.first is plan.second for plan in aa)
    assert Counter((plan.first.label, plan.old_slot) for plan in aa) == {
        ("old", 0): 2,
        ("old", 1): 2,
        ("new", 0): 2,
        ("new", 1): 2,
    }
    # the A/A pairs take the old place in the same pattern as the A/B pairs next to them
    assert [plan.old_slot for plan in aa] == [plan.old_slot for plan in ab]


def test_perf_stat_csv_gives_its_count_or_nothing() -> None:
    counted = "# started on Mon Dec  7 12:00:00 2026\n\n1234567890,,instructions:u,2000000000,100.00,,\n"
    assert parse_perf_csv(counted) == 1_234_567_890
    assert parse_perf_csv("<not supported>,,instructions,0,100.00,,\n") is None
    assert parse_perf_csv("<not counted>,,instructions,0,0.00,,\n") is None
    assert parse_perf_csv("") is None


def test_the_command_shown_leaves_out_the_makefile_s_own_argument() -> None:
    argv = ["--old", "288a165", "--make-command", "make bench-ab OLD=288a165 PAIRS=12", "--pairs", "12"]
    assert tool_command(argv).endswith("tests/bench/ab_standalone.py --old 288a165 --pairs 12")
    assert tool_command(["--make-command=make bench-ab OLD=x", "--old", "x"]).endswith(
        "ab_standalone.py --old x"
    )
    assert tool_command(["--old", "HEAD~1"]).endswith("ab_standalone.py --old 'HEAD~1'")


def report() -> Report:
    noise = [Pair(11.07, 11.12), Pair(9.45, 10.21), Pair(11.10, 11.12), Pair(10.95, 10.52), Pair(12.0, 11.7)]
    measured = [Pair(14.77, 14.03), Pair(14.17, 14.37), Pair(13.70, 14.20)]
    produce = summarize("produce json", measured, noise, 3.0)
    quiet = [Pair(2.00, 2.01), Pair(2.02, 2.00), Pair(2.01, 2.01), Pair(1.99, 2.00)]
    binary = summarize("produce binary", [Pair(2.00, 2.40), Pair(2.02, 2.43), Pair(2.01, 2.42)], quiet, 3.0)
    started = datetime.datetime(2026, 12, 7, 13, 5, tzinfo=datetime.UTC)
    return Report(
        command="make bench-ab OLD=288a165",
        tool=".venv/bin/python tests/bench/ab_standalone.py --old 288a165 --pairs 3",
        started=started,
        ended=started + datetime.timedelta(minutes=25),
        load_start="13:05:00 up 10:02, load average: 2.10, 1.90, 1.50",
        load_end="13:30:00 up 10:27, load average: 3.00, 2.50, 1.80",
        old="`288a165`",
        new="the working tree at `fb633f6`",
        old_detail="`288a165` (owner proxy)",
        new_detail="the working tree at `fb633f6`, its `.venv`",
        measure=Measure("CPU time", "µs", "the standalone's CPU time per message", 2),
        pairs=3,
        messages={"json": 100_000, "binary": 300_000},
        tolerance=3.0,
        summaries=(produce, binary),
    )


def test_the_markdown_entry_has_its_title_facts_and_one_row_per_phase() -> None:
    entry = report().markdown().splitlines()
    assert entry[0] == (
        "## bench-ab: CPU time per message, the working tree at `fb633f6` against `288a165` "
        "(2026-12-07 13:05-13:30 UTC)"
    )
    facts = entry[2]
    assert facts.startswith(
        "Command: `make bench-ab OLD=288a165` (runs `.venv/bin/python tests/bench/ab_standalone.py --old "
        "288a165 --pairs 3`). Old: `288a165` (owner proxy). New: the working tree at `fb633f6`, its `.venv`."
    )
    for fact in ("load average: 2.10", "load average: 3.00", "100,000 json and 300,000 binary messages"):
        assert fact in facts
    assert entry[4] == "| phase | old median | new median | change | A/A change | detectable | verdict |"
    assert entry[6] == "| produce json | 14.17 | 14.20 | +1.4 % | +0.2 % | ±8.4 % | inside the noise |"
    # binary: every pair about +20 %, the control within 1 %: beyond the noise
    row = entry[7].split(" | ")
    assert row[0] == "| produce binary"
    assert row[3] == "+20.3 %"  # the middle pair: 2.43 / 2.02
    assert row[-1] == "worse |"
    # the phase that could not reach 3 % says so, with the pairs it would take
    notes = [line for line in entry if line.startswith("- ")]
    assert len(notes) == 1
    assert notes[0].startswith("- produce json: cannot detect 3 % (A/A spread ±4.1 % per pair; about ")


def test_the_text_report_aligns_its_columns() -> None:
    lines = report().text().splitlines()
    header = next(line for line in lines if line.startswith("phase"))
    row = next(line for line in lines if line.startswith("produce binary"))
    cells = ["produce binary", "2.01", "2.42", "+20.3 %", "+0.2 %", "±0.9 %", "worse"]
    columns = ["phase", "old median", "new median", "change", "A/A change", "detectable", "verdict"]
    for cell, column in zip(cells, columns, strict=True):
        assert row.index(cell) == header.index(column), (cell, column)


def run(round_: int, kind: str, phase: str, slot: str, per_message: float) -> dict[str, object]:
    return {
        "round": round_,
        "kind": kind,
        "phase": phase,
        "build": "old",
        "slot": slot,
        "per_message": per_message,
    }


def test_pairs_are_rebuilt_from_the_saved_runs_and_a_half_pair_is_left_out() -> None:
    runs = [
        run(0, "A/B", "consume json", "old", 11.36),
        run(0, "A/B", "consume json", "new", 11.55),
        run(1, "A/A", "consume json", "new", 11.41),  # the order a round ran in does not matter
        run(1, "A/A", "consume json", "old", 11.06),
        run(2, "A/B", "consume json", "old", 13.28),  # interrupted before its new run
    ]
    ab, aa = pairs_from_runs(runs)
    assert ab == {"consume json": [Pair(11.36, 11.55)]}
    assert aa == {"consume json": [Pair(11.06, 11.41)]}


def test_a_saved_run_gives_the_same_report_again() -> None:
    original = report()
    runs = []
    for index, (old, new) in enumerate([(14.77, 14.03), (14.17, 14.37), (13.70, 14.20)]):
        runs += [
            run(2 * index, "A/B", "produce json", "old", old),
            run(2 * index, "A/B", "produce json", "new", new),
        ]
    noise = [(11.07, 11.12), (9.45, 10.21), (11.10, 11.12), (10.95, 10.52), (12.0, 11.7)]
    for index, (old, new) in enumerate(noise):
        runs += [
            run(2 * index + 1, "A/A", "produce json", "old", old),
            run(2 * index + 1, "A/A", "produce json", "new", new),
        ]
    saved = {
        "command": original.command,
        "tool": original.tool,
        "started": original.started.isoformat(),
        "ended": original.ended.isoformat(),
        "load_start": original.load_start,
        "load_end": original.load_end,
        "old": original.old,
        "new": original.new,
        "old_detail": original.old_detail,
        "new_detail": original.new_detail,
        "measure": measure_fields(original.measure),
        "pairs": 3,
        "messages": original.messages,
        "tolerance": 3.0,
        "runs": runs,
    }
    again = report_from_saved(saved)
    assert again.summaries == original.summaries[:1]
    assert again.markdown().splitlines()[:7] == original.markdown().splitlines()[:7]
    interrupted = {**saved, "ended": None, "load_end": None, "runs": runs[:1]}
    with pytest.raises(ValueError, match="no complete A/B pair"):
        report_from_saved(interrupted)
