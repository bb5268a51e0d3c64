"""Settings of the load manager (:mod:`.load_manager`): Pulsar's ``loadBalancer*`` settings, same defaults.

Names are Pulsar's in snake case with the unit last: ``loadBalancerReportUpdateThresholdPercentage`` is
``load_balancer_report_update_threshold_percentage``, ``loadBalancerSheddingIntervalMinutes`` is
``load_balancer_shedding_interval_min`` (minutes may be fractional, so tests can run in seconds),
``loadBalancerNamespaceBundleMaxMsgRate`` is ``load_balancer_namespace_bundle_max_msg_rate_per_s``. The two
resource weights for bandwidth keep Pulsar's spelling (``bandwith``) so they are found under Pulsar's name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings

Percentage = Annotated[float, Field(ge=0, le=100)]
Weight = Annotated[float, Field(ge=0, le=100)]
Minutes = Annotated[float, Field(gt=0, le=10_080)]


class LoadBalancerSettings(BaseSettings):
    load_balancer_enabled: bool = True
    """Publish load reports, elect a leader, place unowned bundles on the least loaded broker. Off: the
    broker a lookup reaches takes an unowned bundle itself (no leader, no shedding, no automatic split)."""
    load_balancer_report_update_min_interval_ms: Annotated[int, Field(ge=50, le=3_600_000)] = 5_000
    """How often a broker samples its load (and the leader re-reads the reports)."""
    load_balancer_report_update_threshold_percentage: Percentage = 10
    """A sample is published when it moved by more than this since the last published one."""
    load_balancer_report_update_max_interval_min: Minutes = 15
    """A sample is published at least this often."""
    load_balancer_override_broker_nic_speed_gbps: Annotated[float, Field(gt=0, le=10_000)] | None = None
    """The NIC speed bandwidth usage is measured against; unset: the fastest NIC in ``/sys/class/net``, else
    1 Gbit/s."""
    load_balancer_load_placement_strategy: Literal[
        "LeastLongTermMessageRate", "LeastResourceUsageWithWeight"
    ] = "LeastLongTermMessageRate"
    """How the leader picks the broker for an unowned bundle, among those serving the fewest bundles of its
    namespace: the least message rate, or the least weighted resource usage
    (``broker/ownership/load_decisions.py``)."""
    load_balancer_broker_overloaded_threshold_percentage: Percentage = 85
    """A broker whose highest resource usage is above this gets no new bundles while another can take them."""
    load_balancer_shedding_enabled: bool = True
    load_balancer_load_shedding_strategy: Literal["ThresholdShedder", "OverloadShedder"] = "ThresholdShedder"
    """``ThresholdShedder``: brokers above the average by a margin; ``OverloadShedder``: brokers above
    ``load_balancer_broker_overloaded_threshold_percentage``."""
    load_balancer_shedding_interval_min: Minutes = 1
    """How often the leader looks for overloaded brokers (and for bundles to split)."""
    load_balancer_shedding_grace_period_min: Minutes = 30
    """A bundle unloaded by the shedder is not unloaded again by it for this long."""
    load_balancer_broker_threshold_shedder_percentage: Percentage = 10
    """A broker is overloaded when its usage is above the brokers' average by more than this."""
    load_balancer_history_resource_percentage: Annotated[float, Field(ge=0, lt=1)] = 0.9
    """Weight of the past in a broker's smoothed usage (0: only the latest report counts)."""
    load_balancer_bundle_unload_min_throughput_threshold_mb: Annotated[float, Field(ge=0, le=1_000_000)] = 10
    """A broker sheds only when it would move at least this many MB/s."""
    load_balancer_cpu_resource_weight: Weight = 1.0
    load_balancer_memory_resource_weight: Weight = 1.0
    load_balancer_direct_memory_resource_weight: Weight = 1.0
    load_balancer_bandwith_in_resource_weight: Weight = 1.0
    load_balancer_bandwith_out_resource_weight: Weight = 1.0
    load_balancer_auto_bundle_split_enabled: bool = True
    load_balancer_auto_unload_split_bundles_enabled: bool = True
    """Unload the halves of an automatically split bundle so they can move (they go through placement)."""
    load_balancer_namespace_bundle_max_topics: Annotated[int, Field(ge=1, le=10_000_000)] = 1000
    load_balancer_namespace_bundle_max_sessions: Annotated[int, Field(ge=1, le=10_000_000)] = 1000
    """Producers plus consumers of a bundle above which it is split."""
    load_balancer_namespace_bundle_max_msg_rate_per_s: Annotated[float, Field(gt=0, le=1e9)] = 30_000
    """Messages in plus out per second of a bundle above which it is split."""
    load_balancer_namespace_bundle_max_bandwidth_mbytes: Annotated[float, Field(gt=0, le=1e6)] = 100
    """Throughput in plus out (MB/s) of a bundle above which it is split."""
    load_balancer_namespace_maximum_bundles: Annotated[int, Field(ge=1, le=1024)] = 128
    """No automatic split makes a namespace have more bundles than this."""
    lookup_owner_probe_timeout_ms: Annotated[int, Field(ge=10, le=60_000)] = 1_000
    """A lookup names another broker (owner, leader, assignee) only after connecting to its HTTP port
    within this time: a broker whose process is gone is never named, even while its metadata session (and
    so its nodes) outlives it."""
