"""The leader broker's decisions over load reports, sans-IO: placement, shedding, bundle splits.

Pulsar's modular load manager, reduced to pure code over :class:`~.load_report.LoadReport` values and a time
(milliseconds) passed in; :mod:`.load_manager` does the reading and writing.

Placement (:class:`Placement`, strategy ``LeastLongTermMessageRate``). An unowned bundle goes to a live
broker chosen in two steps, as Pulsar's ``ModularLoadManagerImpl.selectBroker``: first only the brokers that
serve the fewest bundles of the bundle's namespace stay candidates
(``removeMostServicingBrokersForNamespace`` - this spreads a namespace's bundles evenly even before any
traffic is measured); among them the one with the least long-term message rate wins: the sum over its
bundles, and over the bundles assigned to it but not yet in its report, of each bundle's long-term average
rate (in + out; :class:`LongTermRates`, Pulsar's ``TimeAverageMessageData``), a broker whose highest resource
usage is above
``load_balancer_broker_overloaded_threshold_percentage`` scoring worst. (Strategy
``LeastResourceUsageWithWeight`` ranks by the highest weighted resource usage instead of the message rate;
Pulsar's also drops brokers far above the average usage, here the namespace filter comes first.) Ties go to
the broker with the fewest bundles in total, then to the deciding broker (no redirect needed), then the
smallest id (Pulsar draws at random; a fixed order makes the choice reproducible). Assignments the leader
made are remembered (Pulsar's "preallocated" bundles) until the broker's report lists the bundle or the
assignment is ``assignment_expiry_ms`` old.

Shedding (:class:`ThresholdShedder`, Pulsar's ``ThresholdShedder``). Each broker's usage is its highest
weighted resource usage, smoothed over rounds (``usage = old * history + new * (1 - history)``). A broker
whose usage exceeds the brokers' average by more than ``load_balancer_broker_threshold_shedder_percentage``
offloads ``usage - average - threshold + 5 %`` of its throughput: its bundles by throughput, largest first,
until that much is selected (at least one). A broker with a single bundle keeps it; a plan below
``load_balancer_bundle_unload_min_throughput_threshold_mb`` is skipped; a bundle unloaded less than
``load_balancer_shedding_grace_period_min`` ago is not unloaded again (so nothing ping-pongs). Strategy
``OverloadShedder`` (Pulsar's) instead sheds only from brokers whose highest resource usage is at least
``load_balancer_broker_overloaded_threshold_percentage``, ``usage - threshold + 5 %`` of their throughput.

Splits (:func:`bundles_to_split`, Pulsar's ``BundleSplitterTask``): a bundle with more than one topic is
split when it exceeds any of ``load_balancer_namespace_bundle_max_{topics,sessions,msg_rate,bandwidth}``,
while its namespace has fewer than ``load_balancer_namespace_maximum_bundles`` bundles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from magnetar.broker.ownership.load_report import LoadReport, ResourceWeights

MB = 1024 * 1024
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
"""Pulsar's margin: an overloaded broker sheds down to 5 % below the threshold, not just to it."""


def namespace_of(full_bundle: str) -> str:
    """``tenant/ns/0xLOW_0xHIGH`` -> ``tenant/ns``."""
    return full_bundle.rsplit("/", 1)[0]


LONG_TERM_SAMPLES = 1000
"""Reports a bundle's long-term rate averages over at most (Pulsar's ``NUM_LONG_SAMPLES``): the mean of every
report until there are this many, then each new report weighs 1/1000."""
BUNDLE_RATES_TTL_MS = 3_600_000
"""A bundle no report has listed for this long (deleted, or its namespace split it) is forgotten."""


class LongTermRates:
    """Each bundle's long-term message rate (in + out), averaged over the reports that listed it, whichever
    broker owned it (the average follows the bundle when it moves, so a bundle shed from a busy broker is
    placed by what it usually carries, not by the zero of its first report on its new owner).

    A report counts once: only a report newer than the broker's last one seen (``last_update_ms``) adds a
    sample. Sans-IO; the caller passes the time."""

    def __init__(self, samples_max: int = LONG_TERM_SAMPLES, ttl_ms: int = BUNDLE_RATES_TTL_MS) -> None:
        self.samples_max = samples_max
        self.ttl_ms = ttl_ms
        self._rates: dict[str, tuple[float, int, int]] = {}
        """Full bundle name -> (average rate, samples, when last listed in ms)."""
        self._seen: dict[str, int] = {}
        """Broker id -> ``last_update_ms`` of its last report counted."""

    def observe(self, reports: Mapping[str, LoadReport], now_ms: int) -> None:
        for broker, report in reports.items():
            if report.last_update_ms and report.last_update_ms <= self._seen.get(broker, -1):
                continue
            self._seen[broker] = report.last_update_ms
            for bundle, stats in report.bundles.items():
                average, samples, _ = self._rates.get(bundle, (0.0, 0, now_ms))
                samples = min(samples + 1, self.samples_max)
                average += (stats.msg_rate - average) / samples
                self._rates[bundle] = (average, samples, now_ms)
        for bundle, (_, _, listed_ms) in list(self._rates.items()):
            if now_ms - listed_ms > self.ttl_ms:
                del self._rates[bundle]
        for gone in set(self._seen) - set(reports):
            del self._seen[gone]

    def rate(self, bundle: str) -> float:
        """The bundle's long-term rate (0 for a bundle never listed)."""
        entry = self._rates.get(bundle)
        return 0.0 if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._rates)


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    overloaded_threshold_percentage: float = 85.0
    assignment_expiry_ms: int = 60_000
    strategy: str = "LeastLongTermMessageRate"
    weights: ResourceWeights = field(default_factory=ResourceWeights)


class Placement:
    """Least-long-term-message-rate placement with the leader's memory of its recent assignments."""

    def __init__(self, settings: PlacementSettings) -> None:
        self.settings = settings
        self.rates = LongTermRates()
        self.assigned: dict[str, tuple[str, int]] = {}
        """Full bundle name -> (broker id, when assigned in ms): assignments not yet seen in a report."""

    def forget_seen(self, reports: Mapping[str, LoadReport], now_ms: int) -> None:
        """Drop assignments a report now lists, or whose broker is gone, or that are too old."""
        expiry = self.settings.assignment_expiry_ms
        for bundle, (broker, at_ms) in list(self.assigned.items()):
            report = reports.get(broker)
            if report is None or bundle in report.bundles or now_ms - at_ms > expiry:
                del self.assigned[bundle]

    def select(
        self, full_bundle: str, reports: Mapping[str, LoadReport], now_ms: int, prefer: str = ""
    ) -> str | None:
        """The broker to own ``full_bundle`` among the live brokers of ``reports`` (None: there is none);
        among equals ``prefer`` (the deciding broker: no redirect needed).

        The choice is remembered as an assignment (see the module docstring)."""
        if not reports:
            return None
        self.forget_seen(reports, now_ms)
        self.rates.observe(reports, now_ms)
        namespace = namespace_of(full_bundle)
        in_namespace = dict.fromkeys(reports, 0)
        total = {broker: len(report.bundles) for broker, report in reports.items()}
        for broker, report in reports.items():
            in_namespace[broker] += sum(1 for b in report.bundles if namespace_of(b) == namespace)
        pending_rate = dict.fromkeys(reports, 0.0)
        for bundle, (broker, _) in self.assigned.items():
            if broker in reports and bundle != full_bundle:
                total[broker] += 1
                pending_rate[broker] += self.rates.rate(bundle)
                if namespace_of(bundle) == namespace:
                    in_namespace[broker] += 1
        fewest = min(in_namespace.values())
        candidates = [broker for broker, count in in_namespace.items() if count == fewest]
        best = min(
            candidates,
            key=lambda broker: (
                self._score(reports[broker], pending_rate[broker]),
                total[broker],
                broker != prefer,
                broker,
            ),
        )
        self.assigned[full_bundle] = (best, now_ms)
        return best

    def _score(self, report: LoadReport, pending_rate: float) -> float:
        settings = self.settings
        if settings.strategy == "LeastResourceUsageWithWeight":
            # Pulsar's LeastResourceUsageWithWeight: the least weighted resource usage wins
            usage = report.max_resource_usage_with_weight(settings.weights)
            return math.inf if usage * 100.0 > settings.overloaded_threshold_percentage else usage
        if report.max_resource_usage() * 100.0 > settings.overloaded_threshold_percentage:
            return math.inf
        return sum(self.rates.rate(bundle) for bundle in report.bundles) + pending_rate


@dataclass(frozen=True, slots=True)
class ShedderSettings:
    strategy: str = "ThresholdShedder"
    overloaded_threshold_percentage: float = 85.0
    threshold_percentage: float = 10.0
    history_resource_percentage: float = 0.9
    min_throughput_threshold_mb: float = 10.0
    grace_period_min: float = 30.0
    weights: ResourceWeights = field(default_factory=ResourceWeights)


class ThresholdShedder:
    """Which bundles to unload from which brokers this round (see the module docstring)."""

    def __init__(self, settings: ShedderSettings) -> None:
        self.settings = settings
        self.avg_usage: dict[str, float] = {}
        """Each broker's smoothed usage (a fraction)."""
        self.recently_unloaded: dict[str, int] = {}
        """Full bundle name -> when it was last unloaded (ms)."""

    def record_unload(self, full_bundle: str, now_ms: int) -> None:
        self.recently_unloaded[full_bundle] = now_ms

    def find_bundles_for_unloading(
        self, reports: Mapping[str, LoadReport], now_ms: int
    ) -> list[tuple[str, str]]:
        """``(broker id, full bundle name)`` pairs to unload; the caller records each unload it makes."""
        settings = self.settings
        grace_ms = settings.grace_period_min * 60_000
        self.recently_unloaded = {b: at for b, at in self.recently_unloaded.items() if now_ms - at < grace_ms}
        for gone in set(self.avg_usage) - set(reports):
            del self.avg_usage[gone]
        history = settings.history_resource_percentage
        for broker, report in reports.items():
            current = report.max_resource_usage_with_weight(settings.weights)
            self.avg_usage[broker] = self.avg_usage.get(broker, 0.0) * history + (1 - history) * current
        if not reports:
            return []
        average = sum(self.avg_usage[b] for b in reports) / len(reports)
        if average == 0 and settings.strategy == "ThresholdShedder":
            return []
        threshold = settings.threshold_percentage / 100.0
        overloaded = settings.overloaded_threshold_percentage / 100.0
        selected: list[tuple[str, str]] = []
        for broker in sorted(reports):
            report = reports[broker]
            if settings.strategy == "OverloadShedder":
                # Pulsar's OverloadShedder: only brokers above the overload threshold, down to it
                usage = report.max_resource_usage()
                if usage < overloaded or len(report.bundles) <= 1:
                    continue
                share = usage - overloaded + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            else:
                usage = self.avg_usage[broker]
                if usage <= average + threshold or len(report.bundles) <= 1:
                    continue
                share = usage - average - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            to_offload = (report.msg_throughput_in + report.msg_throughput_out) * share
            if to_offload < settings.min_throughput_threshold_mb * MB:
                continue
            selected.extend((broker, bundle) for bundle in self._pick(report, to_offload))
        return selected

    def _pick(self, report: LoadReport, to_offload: float) -> list[str]:
        movable = sorted(
            (
                (stats.throughput, name)
                for name, stats in report.bundles.items()
                if name not in self.recently_unloaded
            ),
            key=lambda pair: (-pair[0], pair[1]),
        )
        picked: list[str] = []
        marked = 0.0
        for throughput, name in movable:
            if picked and marked >= to_offload:
                break
            picked.append(name)
            marked += throughput
        return picked


@dataclass(frozen=True, slots=True)
class SplitSettings:
    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate_per_s: float = 30_000
    max_bandwidth_mbytes: float = 100
    maximum_bundles: int = 128


def split_reason(
    stats_topics: int, sessions: int, msg_rate: float, throughput: float, settings: SplitSettings
) -> str | None:
    """Which threshold a bundle exceeds (None: none)."""
    if stats_topics <= 1:
        return None
    if stats_topics > settings.max_topics:
        return f"{stats_topics} topics > {settings.max_topics}"
    if sessions > settings.max_sessions:
        return f"{sessions} sessions > {settings.max_sessions}"
    if msg_rate > settings.max_msg_rate_per_s:
        return f"{msg_rate:.0f} msg/s > {settings.max_msg_rate_per_s:g}"
    if throughput > settings.max_bandwidth_mbytes * MB:
        return f"{throughput / MB:.1f} MB/s > {settings.max_bandwidth_mbytes:g}"
    return None


def bundles_to_split(
    reports: Iterable[LoadReport], bundle_counts: Mapping[str, int], settings: SplitSettings
) -> list[tuple[str, str, str]]:
    """``(broker id, full bundle name, reason)`` for each bundle to split; ``bundle_counts`` gives each
    namespace's current number of bundles (a namespace missing from it is not split)."""
    planned: dict[str, int] = {}
    out: list[tuple[str, str, str]] = []
    for report in sorted(reports, key=lambda r: r.broker_id):
        for name, stats in sorted(report.bundles.items()):
            namespace = namespace_of(name)
            count = bundle_counts.get(namespace)
            if count is None or count + planned.get(namespace, 0) >= settings.maximum_bundles:
                continue
            reason = split_reason(stats.topics, stats.sessions, stats.msg_rate, stats.throughput, settings)
            if reason is not None:
                planned[namespace] = planned.get(namespace, 0) + 1
                out.append((report.broker_id, name, reason))
    return out
