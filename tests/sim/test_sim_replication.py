"""The deterministic replication simulation: many seeds, each a full run with faults, checked against
BookKeeper's invariants; determinism of one seed; and proof that the checkers catch injected defects.

Seeds draw AutoRecovery too (``sim_autorecovery``): permanent bookie loss, auditor and workers, a ledger
deleted while marked, a ledger left open by an idle writer; BookKeeper's AutoRecovery bugs (#3316, #2766,
#2755) are injected the same way as the recovery defects.

A failing seed prints the command that reproduces it: ``pytest tests/sim -k <test> --sim-seed=N``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sim.sim_world import report, run_seed, trace_digest

from magnetar.bookkeeper.autorecovery import injected
from magnetar.bookkeeper.client import recovery

HERE = Path(__file__).resolve().parent


SHARDS = 4
"""The seeds are dealt round-robin to this many test cases, so that pytest-xdist's workers share them."""


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"shard{shard}")
def test_simulation_keeps_bookkeeper_invariants(sim_seeds: list[int], shard: int) -> None:
    seeds = sim_seeds[shard::SHARDS]
    if not seeds:
        pytest.skip(f"--sim-seed/--sim-seeds left no seed to shard {shard}")
    failures = [result for result in map(run_seed, seeds) if result.violations]
    assert not failures, report("test_simulation_keeps_bookkeeper_invariants", failures)


def test_a_seed_replays_the_same_trace() -> None:
    first, second = run_seed(11), run_seed(11)
    assert len(first.trace) > 100, "the run should do real work"
    assert first.trace == second.trace


def test_a_seed_replays_the_same_trace_in_a_fresh_process() -> None:
    """What the printed reproduction command relies on: same trace in another process, another hash seed."""
    code = f"import sys; sys.path.insert(0, {str(HERE.parent)!r}); " + (
        "from sim.sim_world import trace_digest; print(trace_digest(5))"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert digests == {trace_digest(5)}


@pytest.mark.parametrize(
    ("defect", "seeds"),
    [
        (recovery.InjectedBugs(negative_answers=1), 100),
        (recovery.InjectedBugs(no_lac_floor=True), 400),
    ],
    ids=["absent-after-one-no-entry", "no-lac-floor-2615"],
)
def test_checkers_catch_an_injected_protocol_defect(
    monkeypatch: pytest.MonkeyPatch, defect: recovery.InjectedBugs, seeds: int
) -> None:
    monkeypatch.setattr(recovery, "INJECTED_BUGS", defect)
    for seed in range(seeds):
        if run_seed(seed).violations:
            return
    pytest.fail(f"{defect} went unnoticed for {seeds} seeds")


@pytest.mark.parametrize(
    ("defect", "seeds"),
    [
        (injected.InjectedBugs(keep_marks_of_deleted_ledgers=True), 100),
        (injected.InjectedBugs(keep_marks_of_returned_bookies=True), 150),
        (injected.InjectedBugs(read_lac_from_failed_bookie=True), 100),
    ],
    ids=[
        "deleted-ledger-marked-forever-3316",
        "returned-bookie-stays-marked-2766",
        "lac-from-failed-bookie-2755",
    ],
)
def test_checkers_catch_an_injected_autorecovery_defect(
    monkeypatch: pytest.MonkeyPatch, defect: injected.InjectedBugs, seeds: int
) -> None:
    """BookKeeper's AutoRecovery bugs, re-introduced one at a time: some seed must show a violation."""
    monkeypatch.setattr(injected, "INJECTED_BUGS", defect)
    for seed in range(seeds):
        if run_seed(seed).violations:
            return
    pytest.fail(f"{defect} went unnoticed for {seeds} seeds")
