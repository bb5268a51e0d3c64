"""The load manager's I/O: load reports, leader election, placement of unowned bundles, shedding, splits.

Pulsar's modular load manager over the metadata store; every decision is made by the sans-IO code of
:mod:`.load_report` and :mod:`.load_decisions`, this module reads and writes.

* **Load reports.** Every ``load_balancer_report_update_min_interval_ms`` the broker samples its load and
  writes it as the value of its registration node ``/loadbalance/brokers/<id>`` when
  :func:`~.load_report.report_update_due` says so.
* **Leader.** Brokers race to create the ephemeral ``/loadbalance/leader`` (``{"serviceUrl", "brokerId"}``,
  Pulsar's ``LeaderBroker``); the winner is the leader until its session ends, then the next sampling round
  elects another.
* **Placement.** A lookup of a bundle nobody owns, on whichever broker it reaches
  (:meth:`LoadManager.resolve`): an assignment of the bundle to this broker -> take it; an assignment to
  another live broker -> redirect there; else the leader decides (a broker that is not the leader redirects
  the lookup to it; a leader that is gone is replaced by the broker asked). The leader writes its choice as
  the ephemeral ``/loadbalance/assignments/<bundle>`` (it dies with the leader's session), then takes the
  bundle itself or redirects to the chosen broker, which finds the assignment and takes the bundle. A broker
  is named in an answer only when its registration exists and its HTTP port accepts a connection
  (``lookup_owner_probe_timeout_ms``): a process that is gone is never named, even while its metadata
  session outlives it - the lookup answers 503 (retry) instead.
* **Shedding and splits.** Every ``load_balancer_shedding_interval_min`` the leader runs the threshold
  shedder and the split check over the reports and asks owners to unload or split bundles by writing
  ``/loadbalance/requests/<broker id>/<bundle>``; each broker carries out its requests in its sampling
  round (unloading closes the bundle's topics cleanly - see ``BrokerService.unload_bundle``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import trio

from magnetar.bookkeeper.metadata import BadVersionError, MetadataStore, MetadataStoreError, NotFoundError
from magnetar.broker.core import NonPersistentTopic, PersistentTopic
from magnetar.broker.ownership.load_balancer_settings import LoadBalancerSettings
from magnetar.broker.ownership.load_decisions import (
    Placement,
    PlacementSettings,
    ShedderSettings,
    SplitSettings,
    ThresholdShedder,
    bundles_to_split,
)
from magnetar.broker.ownership.load_report import (
    BundleStats,
    LoadReport,
    ResourceUsage,
    ResourceWeights,
    report_update_due,
)
from magnetar.broker.ownership.manager import BROKERS_ROOT, OwnerInfo, OwnershipManager
from magnetar.broker.wire import listeners_from_json, listeners_json

log = logging.getLogger(__name__)

LEADER_PATH = "/loadbalance/leader"
ASSIGNMENTS_ROOT = "/loadbalance/assignments"
REQUESTS_ROOT = "/loadbalance/requests"

Bundle = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a lookup of a bundle this broker does not own answers: ``owner`` is the broker to name;
    ``redirect`` says it is not (yet) the owner but the broker that decides (Pulsar's lookup redirect);
    ``authoritative`` is Pulsar's flag for the redirect's target."""

    owner: OwnerInfo
    redirect: bool = False
    authoritative: bool = False


class OwnerGoneError(Exception):
    """The broker that would be named does not answer: the lookup is to be retried."""


@dataclass(frozen=True, slots=True)
class Handlers:
    """What the load manager asks of the broker service."""

    sample: Callable[[], Iterable[tuple[Bundle, BundleStats]]]
    connections: Callable[[], int]
    unload: Callable[[str, str], Awaitable[None]]
    split: Callable[[str, str, bool], Awaitable[None]]
    bundle_count: Callable[[str], Awaitable[int]]


def _node_name(full_bundle: str) -> str:
    return quote(full_bundle, safe="")


class LoadManager:
    def __init__(
        self,
        store: MetadataStore,
        ownership: OwnershipManager,
        settings: LoadBalancerSettings,
        handlers: Handlers,
        *,
        extra: dict[str, Any] | None = None,
        probe: Callable[[str, float], Awaitable[bool]] | None = None,
        resources: Callable[[LoadReport], LoadReport] | None = None,
    ) -> None:
        """``probe(url, timeout_s)`` tells whether a broker answers (default: a TCP connect);
        ``resources(report)`` fills in CPU, memory and bandwidth (default: :class:`ResourceSampler`)."""
        self._store = store
        self._ownership = ownership
        self.settings = settings
        self._handlers = handlers
        self._extra = dict(extra or {})
        self._probe = probe or tcp_probe
        self.broker_id = ownership.broker_id
        weights = ResourceWeights(
            cpu=settings.load_balancer_cpu_resource_weight,
            memory=settings.load_balancer_memory_resource_weight,
            direct_memory=settings.load_balancer_direct_memory_resource_weight,
            bandwidth_in=settings.load_balancer_bandwith_in_resource_weight,
            bandwidth_out=settings.load_balancer_bandwith_out_resource_weight,
        )
        overloaded = settings.load_balancer_broker_overloaded_threshold_percentage
        self.placement = Placement(
            PlacementSettings(
                overloaded_threshold_percentage=overloaded,
                assignment_expiry_ms=max(60_000, 4 * settings.load_balancer_report_update_min_interval_ms),
                strategy=settings.load_balancer_load_placement_strategy,
                weights=weights,
            )
        )
        self.shedder = ThresholdShedder(
            ShedderSettings(
                strategy=settings.load_balancer_load_shedding_strategy,
                overloaded_threshold_percentage=overloaded,
                threshold_percentage=settings.load_balancer_broker_threshold_shedder_percentage,
                history_resource_percentage=settings.load_balancer_history_resource_percentage,
                min_throughput_threshold_mb=settings.load_balancer_bundle_unload_min_throughput_threshold_mb,
                grace_period_min=settings.load_balancer_shedding_grace_period_min,
                weights=weights,
            )
        )
        self.split_settings = SplitSettings(
            max_topics=settings.load_balancer_namespace_bundle_max_topics,
            max_sessions=settings.load_balancer_namespace_bundle_max_sessions,
            max_msg_rate_per_s=settings.load_balancer_namespace_bundle_max_msg_rate_per_s,
            max_bandwidth_mbytes=settings.load_balancer_namespace_bundle_max_bandwidth_mbytes,
            maximum_bundles=settings.load_balancer_namespace_maximum_bundles,
        )
        self.last_report: LoadReport | None = None
        self.reports_written = 0
        self._resources = (
            resources or ResourceSampler(settings.load_balancer_override_broker_nic_speed_gbps).fill
        )
        self._decide_lock = trio.Lock()

    @property
    def me(self) -> OwnerInfo:
        return self._ownership.me

    # -- the loops --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Sample, report, elect, carry out requests; as the leader, shed and split. Until cancelled."""
        period_s = self.settings.load_balancer_report_update_min_interval_ms / 1000
        shed_every_s = self.settings.load_balancer_shedding_interval_min * 60
        next_shed = trio.current_time() + shed_every_s
        while True:
            try:
                await self.report_once()
                await self.elect()
                await self.carry_out_requests()
                if trio.current_time() >= next_shed:
                    next_shed = trio.current_time() + shed_every_s
                    if await self.is_leader():
                        await self.leader_round()
            except (MetadataStoreError, ValueError) as exc:  # ValueError: a node that is not JSON
                log.warning("load manager of %s: %s", self.broker_id, exc)
            await trio.sleep(period_s)

    # -- load reports -------------------------------------------------------------------------------

    def sample(self) -> LoadReport:
        bundles: dict[str, BundleStats] = {}
        for (namespace, bundle), stats in self._handlers.sample():
            bundles[f"{namespace}/{bundle}"] = stats
        for namespace, bundle in self._ownership.owned:  # owned bundles without loaded topics count too
            bundles.setdefault(f"{namespace}/{bundle}", BundleStats())
        report = LoadReport(
            broker_id=self.broker_id,
            http_url=self.me.httpUrl,
            last_update_ms=int(time.time() * 1000),
            connections=self._handlers.connections(),
            bundles=bundles,
            extra={
                **self._extra,
                "httpUrlTls": self.me.httpUrlTls,
                "nativeUrl": self.me.nativeUrl,
                "nativeUrlTls": self.me.nativeUrlTls,
                "advertisedListeners": listeners_json(self.me.advertisedListeners),
            },
        )
        return self._resources(report)

    async def report_once(self, *, force: bool = False) -> bool:
        """Write the current sample if it is due; whether it was written."""
        current = self.sample()
        due = force or report_update_due(
            self.last_report,
            current,
            current.last_update_ms,
            threshold_percentage=self.settings.load_balancer_report_update_threshold_percentage,
            max_interval_min=self.settings.load_balancer_report_update_max_interval_min,
        )
        if not due:
            return False
        await self._ownership.register_broker(current.to_json())
        self.last_report = current
        self.reports_written += 1
        return True

    async def reports(self) -> dict[str, LoadReport]:
        """Every registered broker's latest report."""
        out: dict[str, LoadReport] = {}
        for broker in await self._store.get_children(BROKERS_ROOT):
            result = await self._store.get(f"{BROKERS_ROOT}/{broker}")
            if result is not None:
                with contextlib.suppress(ValueError):
                    out[broker] = LoadReport.decode(broker, result.value)
        return out

    async def report_of(self, broker: str) -> LoadReport | None:
        result = await self._store.get(f"{BROKERS_ROOT}/{broker}")
        return None if result is None else LoadReport.decode(broker, result.value)

    # -- leader election ------------------------------------------------------------------------------

    async def leader(self) -> tuple[str, str] | None:
        """``(broker id, service URL)`` of the elected leader, if any."""
        result = await self._store.get(LEADER_PATH)
        if result is None:
            return None
        data = json.loads(result.value)
        return str(data["brokerId"]), str(data["serviceUrl"])

    async def is_leader(self) -> bool:
        leader = await self.leader()
        return leader is not None and leader[0] == self.broker_id

    async def elect(self) -> None:
        """Become the leader if there is none (the node dies with the leader's session)."""
        if await self._store.exists(LEADER_PATH):
            return
        value = json.dumps({"serviceUrl": self.me.httpUrl, "brokerId": self.broker_id}).encode()
        try:
            await self._store.put(LEADER_PATH, value, -1, ephemeral=True)
        except BadVersionError:
            return  # another broker won
        log.info("broker %s is the leader broker", self.broker_id)

    # -- placement -------------------------------------------------------------------------------------

    async def alive(self, broker: str) -> OwnerInfo | None:
        """The broker's address if it is registered and its HTTP port answers."""
        if broker == self.broker_id:
            return self.me
        report = await self.report_of(broker)
        if report is None:
            return None
        timeout_s = self.settings.lookup_owner_probe_timeout_ms / 1000
        if not await self._probe(report.http_url, timeout_s):
            return None
        return OwnerInfo(
            httpUrl=report.http_url,
            httpUrlTls=str(report.extra.get("httpUrlTls", "")),
            nativeUrl=str(report.extra.get("nativeUrl", "")),
            nativeUrlTls=str(report.extra.get("nativeUrlTls", "")),
            advertisedListeners=listeners_from_json(report.extra.get("advertisedListeners")),
        )

    async def check_owner_alive(self, owner: OwnerInfo, namespace: str, bundle: str) -> None:
        if owner.httpUrl == self.me.httpUrl:
            return
        if not await self._probe(owner.httpUrl, self.settings.lookup_owner_probe_timeout_ms / 1000):
            raise OwnerGoneError(
                f"bundle {namespace}/{bundle} is owned by {owner.httpUrl}, which does not answer; "
                "its ownership ends when its metadata session expires"
            )

    async def resolve(self, namespace: str, bundle: str) -> Resolution | None:
        """Where the lookup of an unowned bundle goes; None: this broker is to take it."""
        full = f"{namespace}/{bundle}"
        path = f"{ASSIGNMENTS_ROOT}/{_node_name(full)}"
        assigned = await self._store.get(path)
        if assigned is not None:
            assignee = assigned.value.decode()
            if assignee == self.broker_id:
                return None
            info = await self.alive(assignee)
            if info is not None:
                return Resolution(info, redirect=True, authoritative=True)
        leader = await self.leader()
        if leader is not None and leader[0] != self.broker_id:
            info = await self.alive(leader[0])
            if info is not None:
                return Resolution(info, redirect=True, authoritative=False)
        return await self._decide(full, path)

    async def _decide(self, full: str, path: str) -> Resolution | None:
        """As the leader (or in its absence): choose the broker and record the assignment."""
        async with self._decide_lock:
            namespace, _, bundle = full.rpartition("/")
            owner = await self._ownership.get_owner(namespace, bundle)
            if owner is not None:  # taken while this decision waited for the one before it
                return None if owner.httpUrl == self.me.httpUrl else Resolution(owner)
            reports = await self.reports()
            live: dict[str, LoadReport] = {}
            timeout_s = self.settings.lookup_owner_probe_timeout_ms / 1000

            async def check(broker: str, report: LoadReport) -> None:
                if broker == self.broker_id or await self._probe(report.http_url, timeout_s):
                    live[broker] = report

            async with trio.open_nursery() as nursery:  # probed together: one timeout, not one per broker
                for broker, report in reports.items():
                    nursery.start_soon(check, broker, report)
            choice = self.placement.select(full, live, int(time.time() * 1000), prefer=self.broker_id)
            if choice is None or choice == self.broker_id:
                return None
            with contextlib.suppress(NotFoundError):
                await self._store.delete(path)
            await self._store.put(path, choice.encode(), -1, ephemeral=True)
            log.info("leader %s assigns bundle %s to %s", self.broker_id, full, choice)
            info = await self.alive(choice)
            if info is None:
                raise OwnerGoneError(f"broker {choice} chosen for {full} stopped answering")
            return Resolution(info, redirect=True, authoritative=True)

    async def acquired(self, namespace: str, bundle: str) -> None:
        """This broker took the bundle: its assignment (if any) is done."""
        path = f"{ASSIGNMENTS_ROOT}/{_node_name(f'{namespace}/{bundle}')}"
        with contextlib.suppress(NotFoundError, MetadataStoreError):
            await self._store.delete(path)

    # -- shedding and splits ---------------------------------------------------------------------------

    async def leader_round(self) -> list[tuple[str, str, str]]:
        """One round of shedding and split checks; the requests made (op, broker, bundle)."""
        reports = await self.reports()
        now_ms = int(time.time() * 1000)
        self.placement.rates.observe(reports, now_ms)  # every round samples the bundles' long-term rates
        made: list[tuple[str, str, str]] = []
        if self.settings.load_balancer_shedding_enabled and len(reports) > 1:
            for broker, full in self.shedder.find_bundles_for_unloading(reports, now_ms):
                log.info("shedding: unloading %s from overloaded broker %s", full, broker)
                await self.request(broker, full, {"op": "unload"})
                self.shedder.record_unload(full, now_ms)
                made.append(("unload", broker, full))
        if self.settings.load_balancer_auto_bundle_split_enabled:
            counts: dict[str, int] = {}
            for report in reports.values():
                for full in report.bundles:
                    namespace = full.rsplit("/", 1)[0]
                    if namespace not in counts:
                        counts[namespace] = await self._handlers.bundle_count(namespace)
            for broker, full, reason in bundles_to_split(reports.values(), counts, self.split_settings):
                log.info("splitting bundle %s on %s: %s", full, broker, reason)
                unload = self.settings.load_balancer_auto_unload_split_bundles_enabled
                await self.request(broker, full, {"op": "split", "unload": unload})
                made.append(("split", broker, full))
        return made

    async def request(self, broker: str, full_bundle: str, body: dict[str, Any]) -> None:
        path = f"{REQUESTS_ROOT}/{broker}/{_node_name(full_bundle)}"
        await self._store.put(path, json.dumps(body).encode(), None)

    async def carry_out_requests(self) -> int:
        """Unload or split the bundles the leader asked this broker to; how many were handled."""
        root = f"{REQUESTS_ROOT}/{self.broker_id}"
        try:
            names = await self._store.get_children(root)
        except NotFoundError:
            return 0
        for name in names:
            path = f"{root}/{name}"
            result = await self._store.get(path)
            with contextlib.suppress(NotFoundError):
                await self._store.delete(path)
            if result is None:
                continue
            namespace, _, bundle = unquote(name).rpartition("/")
            body = json.loads(result.value)
            if not self._ownership.owns(namespace, bundle):
                continue
            try:
                if body.get("op") == "split":
                    await self._handlers.split(namespace, bundle, bool(body.get("unload", True)))
                else:
                    await self._handlers.unload(namespace, bundle)
            except Exception as exc:  # one failed request must not stop the others
                log.warning("request %s on bundle %s/%s failed: %s", body, namespace, bundle, exc)
        return len(names)


def bundle_stats(
    loaded: Iterable[tuple[Bundle, PersistentTopic | NonPersistentTopic]],
) -> list[tuple[Bundle, BundleStats]]:
    """Each bundle's traffic (Pulsar's ``NamespaceBundleStats``) from its loaded topics' stats rates, both
    kinds: a non-persistent topic's traffic loads its broker as much as a persistent one's (as in Pulsar,
    whose bundle stats count every topic of the bundle)."""
    per_bundle: dict[Bundle, list[PersistentTopic | NonPersistentTopic]] = {}
    for bundle, topic in loaded:
        per_bundle.setdefault(bundle, []).append(topic)
    out = []
    for bundle, topics in per_bundle.items():
        subscriptions = [s for t in topics for s in t.subscriptions.values()]
        stats = BundleStats(
            msg_rate_in=sum(t.rate_in.msgs_per_s for t in topics),
            msg_throughput_in=sum(t.rate_in.bytes_per_s for t in topics),
            msg_rate_out=sum(s.rate_out.msgs_per_s for s in subscriptions),
            msg_throughput_out=sum(s.rate_out.bytes_per_s for s in subscriptions),
            topics=len(topics),
            producer_count=sum(len(t.producers) for t in topics),
            consumer_count=sum(len(s.consumers) for s in subscriptions),
        )
        out.append((bundle, stats))
    return out


async def tcp_probe(http_url: str, timeout_s: float) -> bool:
    """Whether a TCP connection to the URL's host and port opens within ``timeout_s``."""
    parts = urlsplit(http_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


class ResourceSampler:
    """CPU (this process, 100 per core), memory (resident set against the host's), bandwidth (message
    throughput against the NIC speed) of the broker, filled into a report."""

    def __init__(self, nic_speed_gbps: float | None) -> None:
        self._nic_kbps = (nic_speed_gbps or _nic_speed_gbps()) * 1_000_000
        self._cpus = os.cpu_count() or 1
        self._last_cpu = time.process_time()
        self._last_wall = time.monotonic()
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._total_mb = _total_memory_mb(self._page)

    def fill(self, report: LoadReport) -> LoadReport:
        cpu_now, wall_now = time.process_time(), time.monotonic()
        elapsed = max(1e-6, wall_now - self._last_wall)
        cpu_percent = 100.0 * (cpu_now - self._last_cpu) / elapsed
        self._last_cpu, self._last_wall = cpu_now, wall_now
        kbits = 8 / 1000
        return LoadReport(
            broker_id=report.broker_id,
            http_url=report.http_url,
            last_update_ms=report.last_update_ms,
            cpu=ResourceUsage(cpu_percent, 100.0 * self._cpus),
            memory=ResourceUsage(_rss_mb(self._page), self._total_mb),
            direct_memory=ResourceUsage(),
            bandwidth_in=ResourceUsage(report.msg_throughput_in * kbits, self._nic_kbps),
            bandwidth_out=ResourceUsage(report.msg_throughput_out * kbits, self._nic_kbps),
            connections=report.connections,
            bundles=report.bundles,
            extra=report.extra,
        )


def _nic_speed_gbps() -> float:
    speeds = []
    for speed in Path("/sys/class/net").glob("*/speed"):
        with contextlib.suppress(OSError, ValueError):
            speeds.append(int(speed.read_text().strip()))
    best = max((s for s in speeds if s > 0), default=0)
    return best / 1000 if best else 1.0


def _rss_mb(page: int) -> float:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return 0.0


def _total_memory_mb(page: int) -> float:
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * page / (1024 * 1024))
    except (ValueError, OSError, AttributeError):
        return 0.0
