"""One failure scenario: a real cluster, the workload, a fault script, then the checker's verdict.

:meth:`Scenario.run` starts the consumers (one Exclusive durable subscription each, created at the earliest
position before anything is published), then the producers, waits until messages are acknowledged (the
cluster works at all), runs the scenario's fault script, checks that the cluster recovers (acks flow again,
bounded), stops the producers and lets the consumers drain until every acknowledged message has been
delivered to every subscription or ``drain_timeout_s`` passes. The summary table is printed; a failed
verdict, a component that crashed on its own or a cluster that does not recover fails the test with the
details: the lost/reordered/phantom messages with the phase in which they were sent and acknowledged, the
phase timeline, the workload's session counts and the log files of every process.

Every step is bounded: the whole scenario runs under ``timeout_s``.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from chaos.checker import Checker, Verdict, summary_table
from chaos.workload import NAMESPACE, ProducerSpec, Workload
from fixtures.dev_cluster import ClusterExits

from magnetar.admin.processes.dev_cluster import DevCluster
from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsRejected

log = logging.getLogger("chaos")

POLL_S = 0.2
"""How often :meth:`Scenario.wait_for` looks at its condition."""
SUMMARIES: list[str] = []
"""Every scenario's summary table, printed again at the end of the pytest run (tests/chaos/conftest.py), so
the figures show even when pytest captures the output of passing tests."""


@dataclass(frozen=True)
class ScenarioConfig:
    name: str
    producers: tuple[ProducerSpec, ...] = (ProducerSpec("p0"), ProducerSpec("p1"))
    subscriptions: tuple[str, ...] = ("sub-a", "sub-b")
    late_subscriptions: tuple[str, ...] = ()
    """Subscriptions created at the start but read only in the drain phase (from the bookies, after the
    faults); the checker holds them to the same no-loss rule."""
    warmup_s: float = 2.0
    steady_s: float = 2.0
    recovery_timeout_s: float = 40.0
    drain_timeout_s: float = 40.0
    timeout_s: float = 240.0
    consumer_idle_s: float = 4.0
    protocol: str = "websocket"
    """``websocket`` (:class:`~chaos.workload.Workload`) or ``pulsar``: Pulsar's binary protocol through the
    official client (:class:`~chaos.pulsar_workload.PulsarWorkload`)."""
    deduplication: bool = False
    """The namespace deduplicates (set before anything is published) and the producers are named (their
    names are the key): what a client resends after a failover must not be stored twice (``pulsar`` only)."""


@dataclass
class Scenario:
    config: ScenarioConfig
    cluster: DevCluster
    exits: ClusterExits = field(default_factory=ClusterExits)
    topic: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")
    notes: list[str] = field(default_factory=list)
    fault_window: tuple[float, float] | None = None
    """From the start of the fault script to the end of the steady phase after it (trio time)."""

    def __post_init__(self) -> None:
        self.checker = Checker(
            [*self.config.subscriptions, *self.config.late_subscriptions], trio.current_time
        )
        self.draining = trio.Event()
        self.workload = self._workload()
        self._start = 0.0

    def _workload(self) -> Workload:
        producers = list(self.config.producers)
        if self.config.protocol == "pulsar":
            from chaos.pulsar_workload import PulsarWorkload

            return PulsarWorkload(
                self.checker,
                self.binary_urls,
                self.topic,
                producers,
                idle_s=self.config.consumer_idle_s,
                named=self.config.deduplication,
            )
        return Workload(
            self.checker,
            lambda: self.cluster.broker_urls,
            self.topic,
            producers,
            idle_s=self.config.consumer_idle_s,
        )

    def binary_urls(self) -> list[str]:
        """Every broker's ``pulsar://`` address (its binary port)."""
        cluster = self.cluster
        return [
            f"pulsar://{cluster.broker_address(i)}:{cluster.ports.brokers[i]['binary']}"
            for i in range(len(cluster.broker_names))
        ]

    # -- the script's vocabulary -------------------------------------------------------------------

    def phase(self, name: str) -> None:
        self.checker.set_phase(name)
        log.info("[%s] phase %s at %.1f s", self.config.name, name, trio.current_time() - self._start)
        print(f"  {trio.current_time() - self._start:6.1f}s  {name}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"          {text}", flush=True)

    async def hold(self, seconds: float) -> None:
        """Let the workload run for ``seconds`` (the scenario's timeline, not a synchronization)."""
        await trio.sleep(seconds)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Wait until ``condition()`` holds (polled every ``POLL_S``, in a thread: it may read files or ask a
        server, and the workload runs in this loop); how long it took. After ``timeout_s`` the scenario fails
        naming ``what`` - say there where the deadline comes from."""
        started = trio.current_time()
        with trio.move_on_after(timeout_s):
            while not await trio.to_thread.run_sync(condition):
                await trio.sleep(POLL_S)
            return trio.current_time() - started
        raise AssertionError(
            f"waited {timeout_s:.0f} s in phase {self.checker.phase} for {what}\n{self.report()}"
        )

    async def recovered(self, acks: int = 20, what: str = "") -> float:
        """Wait until ``acks`` new acknowledgements arrive (bounded); returns how long it took."""
        started = trio.current_time()
        target = self.checker.acked_count + acks
        if not await self.workload.wait_until(
            lambda: self.checker.acked_count >= target, self.config.recovery_timeout_s
        ):
            raise AssertionError(
                f"no recovery within {self.config.recovery_timeout_s} s in phase {self.checker.phase}"
                f" {what}\n{self.report()}"
            )
        return trio.current_time() - started

    async def owner(self) -> str:
        """The name of the broker that owns the topic now (asked of the live brokers, bounded)."""
        path = f"/lookup/v2/topic/{NAMESPACE}/{self.topic}"
        with trio.fail_after(self.config.recovery_timeout_s):
            while True:
                for name, url in zip(self.cluster.broker_names, self.cluster.broker_urls, strict=True):
                    process = self.cluster.process(name)
                    if not process.running or process.paused:
                        continue
                    try:
                        document = await trio.to_thread.run_sync(_get_json, url + path)
                        return self.cluster.broker_names[self.cluster.broker_index(document["httpUrl"])]
                    except (OSError, ValueError, KeyError):
                        continue
                await trio.sleep(0.2)

    async def takeover_by(self, broker: str) -> None:
        """Make ``broker`` serve the topic (bounded): open readers there until one is served by it rather than
        redirected elsewhere (the previous owner's ephemeral node must be gone first)."""
        url = self.cluster.broker_urls[self.cluster.broker_names.index(broker)]
        ws_url = url.replace("http://", "ws://") + f"/ws/v2/reader/{NAMESPACE}/{self.topic}"
        with trio.fail_after(self.config.recovery_timeout_s):
            while True:
                try:
                    reader = await WsClient.connect(ws_url, timeout_s=3)
                except (OSError, WsRejected, trio.TooSlowError):
                    await trio.sleep(0.2)
                    continue
                served_by = reader.url.split("/ws/")[0]
                await reader.aclose()
                if served_by == ws_url.split("/ws/")[0]:
                    return
                await trio.sleep(0.2)

    # -- running -----------------------------------------------------------------------------------

    async def run(self, faults: Callable[[Scenario], Awaitable[None]]) -> Verdict:
        config = self.config
        self._start = trio.current_time()
        print(f"\n-- scenario {config.name} (topic {self.topic})", flush=True)
        if config.deduplication:
            url = f"{self.cluster.broker_urls[0]}/admin/v2/namespaces/public/default/deduplication"
            await trio.to_thread.run_sync(_post_json, url, True)
        with trio.fail_after(config.timeout_s):
            async with trio.open_nursery() as nursery:
                for subscription in config.subscriptions:
                    nursery.start_soon(self.workload.run_consumer, subscription)
                for subscription in config.late_subscriptions:
                    nursery.start_soon(self.workload.run_consumer, subscription, self.draining)
                with trio.fail_after(config.recovery_timeout_s):
                    for event in self.workload.subscribed.values():
                        await event.wait()
                async with trio.open_nursery() as producers:
                    for spec in config.producers:
                        producers.start_soon(self.workload.run_producer, spec)
                    self.phase("warmup")
                    await self.recovered(what="(the cluster never served)")
                    await self.hold(config.warmup_s)
                    faults_started = trio.current_time()
                    await faults(self)
                    self.phase("steady")
                    await self.recovered(what="(after the faults)")
                    await self.hold(config.steady_s)
                    self.fault_window = (faults_started, trio.current_time())
                    self.workload.stop_producing.set()
                self.phase("drain")
                self.draining.set()
                await self.workload.wait_until(
                    lambda: self.checker.missing_total() == 0, config.drain_timeout_s
                )
                nursery.cancel_scope.cancel()
        verdict = self.checker.verdict()
        table = summary_table(f"{config.name} ({trio.current_time() - self._start:.0f} s)", verdict)
        print(table, flush=True)
        SUMMARIES.append(table)
        return verdict

    def longest_gap_in_faults(self) -> float:
        """The longest time without any acknowledgement from the start of the faults to the end of steady."""
        assert self.fault_window is not None, "the scenario has not run"
        return self.checker.longest_gap_between(*self.fault_window)

    async def broker_metric(self, broker: str, name: str) -> float:
        """The sum of the samples of metric ``name`` on ``broker``'s ``/metrics`` (0 when absent)."""
        return await trio.to_thread.run_sync(self.broker_metric_blocking, broker, name)

    def broker_metric_blocking(self, broker: str, name: str) -> float:
        """:meth:`broker_metric` for a thread (a :meth:`wait_for` condition)."""
        url = self.cluster.broker_urls[self.cluster.broker_names.index(broker)] + "/metrics"
        text = _get_text(url)
        total = 0.0
        for line in text.splitlines():
            metric, _, value = line.rpartition(" ")
            if metric.split("{")[0] == name:
                total += float(value)
        return total

    async def ledger_entries(self) -> list[int]:
        """Entries of each ledger of the topic (its owner's internal stats; the open ledger's live count)."""
        owner = await self.owner()
        url = self.cluster.broker_urls[self.cluster.broker_names.index(owner)]
        stats: dict[str, Any] = await trio.to_thread.run_sync(
            _get_json, f"{url}/admin/v2/{NAMESPACE}/{self.topic}/internalStats"
        )
        entries = [int(ledger["entries"]) for ledger in stats["ledgers"]]
        if entries:
            entries[-1] = int(stats.get("currentLedgerEntries", entries[-1]))
        return entries

    def report(self) -> str:
        start = self.checker.phases[0][0]
        timeline = ", ".join(f"{t - start:.1f}s {name}" for t, name in self.checker.phases)
        logs = "\n".join(f"  {name}: {p.log_path}" for name, p in self.cluster.processes.items())
        return (
            f"phases: {timeline}\nnotes: {self.notes}\nsessions: {self.workload.stats.sessions}, "
            f"connect failures: {self.workload.stats.connect_failures}\nprocess logs:\n{logs}"
        )

    def assert_ok(
        self, verdict: Verdict, *, ack_gap_max_s: float | None = None, ack_gap_basis: str = ""
    ) -> None:
        """The checker's verdict holds, nothing crashed, something was acknowledged, and (when given) no gap
        between acknowledgements during the faults reached ``ack_gap_max_s`` - a bound derived from the
        scenario's own faults or settings, which ``ack_gap_basis`` names."""
        problems = []
        if ack_gap_max_s is not None:
            gap = self.longest_gap_in_faults()
            if gap >= ack_gap_max_s:
                bound = f"bound {ack_gap_max_s:g} s: {ack_gap_basis}"
                problems.append(f"an ack gap of {gap:.2f} s during the faults ({bound})")
        if not verdict.ok:
            problems.append("the checker found violations:\n" + "\n".join(verdict.details))
        if self.exits.exits:
            problems.append(self.exits.describe())
        if verdict.acked == 0:
            problems.append("nothing was acknowledged")
        if problems:
            raise AssertionError(
                f"scenario {self.config.name} failed\n{summary_table(self.config.name, verdict)}\n"
                + "\n".join(problems)
                + "\n"
                + self.report()
            )


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        document: dict[str, Any] = json.loads(response.read())
        return document


def _post_json(url: str, body: object) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=5):
        pass


def _get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
        return text
