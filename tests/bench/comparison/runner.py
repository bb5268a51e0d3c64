"""Runs the comparison: for each system in turn, start it, measure every scenario for every size, stop it.

One system runs at a time (they would compete for the 2 cores otherwise). Each phase runs in its own
``anyio.run`` on the system's event loop (trio for Magnetar's clients, asyncio for the peers), bounded by
``phase_limit_s`` plus a grace for connecting; a phase that fails is recorded with its reason and the run
goes on. Whatever happens, :meth:`System.stop` stops every process the system started, by pid.

The harness's own garbage collector must not show in the figures: before each phase everything allocated so
far is collected and frozen (``gc.freeze``), so a collection during the phase scans only what the phase
allocates. Without it, a generation-2 pass of the harness took 11-24 ms in the middle of a latency run and
put that much on the p99.9 (and, on a single 10-second run, on the p99) of whichever system was measured.
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
from bench.comparison import engine
from bench.comparison.figures import Failure, Figure, Latency, Throughput
from bench.comparison.machine import cpu_ticks, steal_share
from bench.comparison.report import Results, Scenario, SystemInfo
from bench.comparison.system import System

MAGNETARS = (
    "magnetar-standalone", "magnetar-cluster", "magnetar-standalone-binary", "magnetar-cluster-binary",
    "magnetar-standalone-pulsar", "magnetar-cluster-pulsar",
)  # fmt: skip
"""Magnetar over Pulsar's WebSocket API, over its binary subprotocol ``magnetar.v1``, and over Pulsar's
binary protocol (its binary port) with the official ``pulsar-client``."""
CONNECT_GRACE_S = 60.0
"""On top of a phase's own bound: connecting, creating topics and subscriptions, closing."""


@dataclass(frozen=True)
class Settings:
    sizes: list[int]
    rates: list[float]
    e2e_rate: float
    messages: int
    duration_s: float
    window: int
    phase_limit_s: float
    drain_s: float


def describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def build_system(name: str, window: int) -> System:
    """The driver for one ``--peers`` name (imports only what that system needs)."""
    if name in ("redis-always", "redis-everysec"):
        from bench.comparison.redis_system import RedisSystem

        return RedisSystem(name, name.removeprefix("redis-"))
    if name == "nats":
        from bench.comparison.nats_system import NatsSystem

        return NatsSystem(name, window)
    if name == "rabbitmq":
        from bench.comparison.rabbitmq_system import RabbitMqSystem

        return RabbitMqSystem(name)
    if name == "pulsar-lite":
        from bench.comparison.pulsar_lite_system import PulsarLiteSystem

        return PulsarLiteSystem(name, window)
    if name in MAGNETARS and name.endswith("-pulsar"):
        from bench.comparison.magnetar_pulsar_system import MagnetarPulsarSystem

        return MagnetarPulsarSystem(name, cluster="cluster" in name, window=window)
    if name in MAGNETARS:
        from bench.comparison.magnetar_system import MagnetarSystem

        return MagnetarSystem(name, cluster="cluster" in name, binary=name.endswith("-binary"))
    raise ValueError(f"unknown system {name!r}")


def info(system: System) -> SystemInfo:
    return SystemInfo(system.name, system.durability, system.durability_detail, system.consume_mode)


class Runner:
    def __init__(
        self, settings: Settings, scenarios: list[Scenario], results: Results, workdir: Path
    ) -> None:
        self.settings = settings
        self.scenarios = scenarios
        self.results = results
        self.workdir = workdir
        self.versions: dict[str, dict[str, str]] = {}
        self.how: dict[str, str] = {}

    def run_system(self, system: System) -> None:
        print(f"== {system.name} ({system.durability})", flush=True)
        missing = system.available()
        if missing is not None:
            print(f"  not measured: {missing}", flush=True)
            self._fail_all(system, f"not measured: {missing}")
            return
        self.versions[system.name] = system.versions()
        started = time.monotonic()
        try:
            system.start(self.workdir / system.name)
            self.how[system.name] = system.how
            for scenario in self.scenarios:
                self._measure(system, scenario)
        except Exception as exc:  # a system that does not start is reported, the others still run
            print(f"  failed: {describe(exc)}\n{traceback.format_exc()}", flush=True)
            self._fail_all(system, f"failed: {describe(exc)}")
        finally:
            try:
                system.stop()
            except Exception as exc:
                print(f"  stopping {system.name} failed: {describe(exc)}", flush=True)
        print(f"  {system.name} done in {time.monotonic() - started:.0f} s", flush=True)

    def _fail_all(self, system: System, reason: str) -> None:
        for scenario in self.scenarios:
            if self.results.get(scenario, system.name) is None:
                self.results.put(scenario, system.name, Failure(reason))

    def _measure(self, system: System, scenario: Scenario) -> None:
        s = self.settings
        size = scenario.size
        topic = f"bench-{size}-{scenario.key}"
        phase: Callable[[], Awaitable[Figure]]
        if scenario.key == "publish":
            phase = lambda: engine.publish_throughput(  # noqa: E731
                system, topic, size, s.messages, s.window, s.phase_limit_s
            )
        elif scenario.key == "consume":
            published = self.results.get(Scenario("publish", "", size), system.name)
            if not isinstance(published, Throughput) or not published.count:
                self.results.put(scenario, system.name, Failure("nothing was published"))
                return
            topic = f"bench-{size}-publish"
            phase = lambda: engine.consume_throughput(system, topic, published.count, s.phase_limit_s)  # noqa: E731
        elif scenario.key == "e2e":
            phase = lambda: engine.end_to_end_latency(  # noqa: E731
                system, topic, size, s.e2e_rate, s.duration_s, s.window, s.drain_s
            )
        else:
            rate = float(scenario.key.removeprefix("rate-"))
            phase = lambda: engine.publish_latency(  # noqa: E731
                system, topic, size, rate, s.duration_s, s.window, s.drain_s
            )
        print(f"  -- {scenario.title}", flush=True)
        before = cpu_ticks()
        figure = self._run_phase(system, phase)
        steal = steal_share(before, cpu_ticks())
        self.results.put(scenario, system.name, figure, steal)
        print(f"     {summary(figure)}; {steal:.0%} of the CPU time stolen by the hypervisor", flush=True)

    def _run_phase(self, system: System, phase: Callable[[], Awaitable[Figure]]) -> Figure:
        limit = max(self.settings.phase_limit_s, self.settings.duration_s + self.settings.drain_s)

        async def bounded() -> Figure:
            with anyio.fail_after(limit + CONNECT_GRACE_S):
                return await phase()

        gc.collect()
        gc.freeze()
        try:
            return anyio.run(bounded, backend=system.backend)
        except Exception as exc:  # recorded in the report; the next phase still runs
            print(f"     failed: {describe(exc)}", flush=True)
            return Failure(describe(exc))
        finally:
            gc.unfreeze()


def summary(figure: Figure) -> str:
    if isinstance(figure, Throughput):
        partial = "" if figure.complete else " (incomplete)"
        return f"{figure.rate:,.0f} msgs/s ({figure.count:,} in {figure.elapsed_s:.2f} s){partial}"
    if isinstance(figure, Latency):
        state = " SATURATED" if figure.saturated else ""
        return (
            f"achieved {figure.achieved_rate:,.0f}/{figure.target_rate:,.0f} msgs/s{state}, ms p50 "
            f"{figure.p50_ms:.2f} p99 {figure.p99_ms:.2f} p99.9 {figure.p999_ms:.2f} max {figure.max_ms:.1f} "
            f"(harness send lag p99 {figure.send_lag_p99_ms:.2f})"
        )
    return figure.reason
