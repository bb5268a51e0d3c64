"""The comparison harness end to end on Magnetar standalone: a few seconds of every phase, then stopped.

The peers (Redis, NATS, RabbitMQ, pulsar-lite) are not part of `make test`; their drivers run with
``make bench-compare``; the ``-pulsar`` row runs pulsar-lite's client driver (the official
``pulsar-client``, in the dev extra) against Magnetar's binary port. No figure is asserted - only that every
phase measured something and that nothing the driver started outlives it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench.comparison.figures import Latency, Throughput
from bench.comparison.magnetar_system import MagnetarSystem
from bench.comparison.report import Results, render_tables, scenarios
from bench.comparison.runner import Runner, Settings, build_system, info

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    "name", ["magnetar-standalone", "magnetar-standalone-binary", "magnetar-standalone-pulsar"]
)
def test_the_standalone_driver_measures_every_phase_and_stops_its_process(tmp_path: Path, name: str) -> None:
    settings = Settings(
        sizes=[100], rates=[500.0], e2e_rate=500.0, messages=2_000, duration_s=1.0, window=200,
        phase_limit_s=60.0, drain_s=10.0,
    )  # fmt: skip
    system = build_system(name, settings.window)
    assert isinstance(system, MagnetarSystem)
    all_scenarios = scenarios(settings.sizes, settings.rates, settings.e2e_rate)
    results = Results([info(system)])
    runner = Runner(settings, all_scenarios, results, tmp_path)
    started: list[int] = []
    original_start = system.start

    def start(workdir: Path) -> None:
        original_start(workdir)
        started.extend(system.pids())

    system.start = start  # type: ignore[method-assign]
    runner.run_system(system)

    assert len(started) == 1
    assert not alive(started[0])
    publish, consume, at_rate, e2e = (results.get(s, system.name) for s in all_scenarios)
    assert isinstance(publish, Throughput), publish
    assert publish.count == 2_000
    assert isinstance(consume, Throughput), consume
    assert consume.count == 2_000
    assert isinstance(at_rate, Latency), at_rate
    assert at_rate.count == 500
    assert isinstance(e2e, Latency), e2e
    assert e2e.count == 500
    assert f"| {name} | fsync (1 bookie) |" in render_tables(results, all_scenarios)
