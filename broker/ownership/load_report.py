"""A broker's load report (Pulsar's ``LocalBrokerData``) and when to publish it again, sans-IO.

Each broker samples its load every ``load_balancer_report_update_min_interval_ms`` and publishes it as the
value of its registration node ``/loadbalance/brokers/<broker id>``, where the leader broker reads it.
Writing every sample would load the metadata store for nothing, so a sample is written only when it moved
enough since the last written one, or when the last write is
``load_balancer_report_update_max_interval_min`` old - Pulsar's ``needBrokerDataUpdate``: the largest of (a)
the change of the highest resource usage, in percentage points, (b) the relative change of the message rate
(in + out), (c) of the throughput (in + out) and (d) of the number of bundles, in percent, must exceed
``load_balancer_report_update_threshold_percentage``. A relative change from 0 to anything else is infinite
(it always counts).

Resources, each a usage and a limit (a percentage is usage / limit; a limit of 0 means "not measured" and
counts as 0 %): CPU as the broker process's share of the host's cores (100 per core), memory as the
process's resident set against the host's memory (MB), direct memory (not meaningful for Python: 0 / 0), and
bandwidth in and out as the broker's message throughput in kbit/s against the NIC speed. The JSON keeps
Pulsar's field names so ``pulsar-admin broker-stats load-report`` readers understand it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    usage: float = 0.0
    limit: float = 0.0

    def percent(self) -> float:
        """Usage in percent of the limit (0 when the limit is unknown)."""
        return 0.0 if self.limit <= 0 else 100.0 * self.usage / self.limit

    def to_json(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}

    @classmethod
    def from_json(cls, data: object) -> ResourceUsage:
        if not isinstance(data, Mapping):
            return cls()
        return cls(float(data.get("usage", 0.0)), float(data.get("limit", 0.0)))


@dataclass(frozen=True, slots=True)
class BundleStats:
    """Pulsar's ``NamespaceBundleStats``: one bundle's traffic on its owner."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    """Bytes per second."""
    msg_throughput_out: float = 0.0
    topics: int = 0
    producer_count: int = 0
    consumer_count: int = 0

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def sessions(self) -> int:
        return self.producer_count + self.consumer_count

    def to_json(self) -> dict[str, float | int]:
        return {
            "msgRateIn": self.msg_rate_in,
            "msgThroughputIn": self.msg_throughput_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "consumerCount": self.consumer_count,
            "producerCount": self.producer_count,
            "topics": self.topics,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BundleStats:
        return cls(
            msg_rate_in=float(data.get("msgRateIn", 0.0)),
            msg_rate_out=float(data.get("msgRateOut", 0.0)),
            msg_throughput_in=float(data.get("msgThroughputIn", 0.0)),
            msg_throughput_out=float(data.get("msgThroughputOut", 0.0)),
            topics=int(data.get("topics", 0)),
            producer_count=int(data.get("producerCount", 0)),
            consumer_count=int(data.get("consumerCount", 0)),
        )


@dataclass(frozen=True, slots=True)
class ResourceWeights:
    """Pulsar's ``loadBalancer{CPU,Memory,DirectMemory,BandwithIn,BandwithOut}ResourceWeight``."""

    cpu: float = 1.0
    memory: float = 1.0
    direct_memory: float = 1.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One broker's load; ``bundles`` maps ``tenant/namespace/0xLOW_0xHIGH`` to its stats."""

    broker_id: str
    http_url: str
    last_update_ms: int = 0
    cpu: ResourceUsage = ResourceUsage()
    memory: ResourceUsage = ResourceUsage()
    direct_memory: ResourceUsage = ResourceUsage()
    bandwidth_in: ResourceUsage = ResourceUsage()
    bandwidth_out: ResourceUsage = ResourceUsage()
    connections: int = 0
    bundles: Mapping[str, BundleStats] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Other fields of the registration node (kept when the report is written again)."""

    @property
    def msg_rate_in(self) -> float:
        return sum(s.msg_rate_in for s in self.bundles.values())

    @property
    def msg_rate_out(self) -> float:
        return sum(s.msg_rate_out for s in self.bundles.values())

    @property
    def msg_throughput_in(self) -> float:
        return sum(s.msg_throughput_in for s in self.bundles.values())

    @property
    def msg_throughput_out(self) -> float:
        return sum(s.msg_throughput_out for s in self.bundles.values())

    @property
    def num_topics(self) -> int:
        return sum(s.topics for s in self.bundles.values())

    def _resources(self) -> tuple[ResourceUsage, ...]:
        return (self.cpu, self.memory, self.direct_memory, self.bandwidth_in, self.bandwidth_out)

    def max_resource_usage(self) -> float:
        """The highest resource usage as a fraction (Pulsar's ``getMaxResourceUsage``)."""
        return max(r.percent() for r in self._resources()) / 100.0

    def max_resource_usage_with_weight(self, weights: ResourceWeights) -> float:
        """Pulsar's ``getMaxResourceUsageWithWeight``: the highest weighted usage, as a fraction."""
        pairs = zip(
            self._resources(),
            (weights.cpu, weights.memory, weights.direct_memory, weights.bandwidth_in, weights.bandwidth_out),
            strict=True,
        )
        return max(r.percent() * w for r, w in pairs) / 100.0

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "httpUrl": self.http_url,
            "webServiceUrl": self.http_url,
            "brokerId": self.broker_id,
            "loadReportType": "LocalBrokerData",
            "lastUpdate": self.last_update_ms,
            "cpu": self.cpu.to_json(),
            "memory": self.memory.to_json(),
            "directMemory": self.direct_memory.to_json(),
            "bandwidthIn": self.bandwidth_in.to_json(),
            "bandwidthOut": self.bandwidth_out.to_json(),
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "numTopics": self.num_topics,
            "numBundles": len(self.bundles),
            "numProducers": sum(s.producer_count for s in self.bundles.values()),
            "numConsumers": sum(s.consumer_count for s in self.bundles.values()),
            "connections": self.connections,
            "bundles": sorted(self.bundles),
            "lastStats": {name: stats.to_json() for name, stats in sorted(self.bundles.items())},
            "maxResourceUsage": self.max_resource_usage(),
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, broker_id: str, raw: bytes) -> LoadReport:
        """A registration node's value (a broker that has not reported yet has only ``httpUrl``)."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"load report of {broker_id} is not a JSON object")
        stats = data.get("lastStats") or {}
        return cls(
            broker_id=broker_id,
            http_url=str(data.get("httpUrl", f"http://{broker_id}")),
            last_update_ms=int(data.get("lastUpdate", 0)),
            cpu=ResourceUsage.from_json(data.get("cpu")),
            memory=ResourceUsage.from_json(data.get("memory")),
            direct_memory=ResourceUsage.from_json(data.get("directMemory")),
            bandwidth_in=ResourceUsage.from_json(data.get("bandwidthIn")),
            bandwidth_out=ResourceUsage.from_json(data.get("bandwidthOut")),
            connections=int(data.get("connections", 0)),
            bundles={str(k): BundleStats.from_json(v) for k, v in stats.items() if isinstance(v, dict)},
            extra={k: v for k, v in data.items() if k in _EXTRA_KEPT},
        )


_EXTRA_KEPT = frozenset({"advertisedListeners", "cluster", "httpUrlTls", "nativeUrl", "nativeUrlTls"})
"""What a report carries beyond its figures: the cluster and the addresses a lookup hands to clients."""


def percent_change(old: float, new: float) -> float:
    """Pulsar's ``percentChange``: relative change in percent; from 0 to non-0 is infinite."""
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return 100.0 * abs((old - new) / old)


def report_update_due(
    last: LoadReport | None,
    current: LoadReport,
    now_ms: int,
    *,
    threshold_percentage: float,
    max_interval_min: float,
) -> bool:
    """Whether ``current`` must be written (Pulsar's ``needBrokerDataUpdate``; see the module docstring)."""
    if last is None or now_ms - last.last_update_ms > max_interval_min * 60_000:
        return True
    max_change = max(
        100.0 * abs(last.max_resource_usage() - current.max_resource_usage()),
        percent_change(last.msg_rate_in + last.msg_rate_out, current.msg_rate_in + current.msg_rate_out),
        percent_change(
            last.msg_throughput_in + last.msg_throughput_out,
            current.msg_throughput_in + current.msg_throughput_out,
        ),
        percent_change(len(last.bundles), len(current.bundles)),
    )
    return max_change > threshold_percentage
