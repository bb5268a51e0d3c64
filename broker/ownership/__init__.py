"""Who serves what: namespace-bundle ownership and the load manager that places and moves bundles.

A topic is served by the broker owning the namespace bundle holding its name's hash
(:mod:`.namespace_bundle`).
Ownership is an ephemeral node per bundle (:mod:`.manager`), decided by a sans-IO state machine that keeps a
bundle served through a metadata outage (:mod:`.state`). A lookup answers the owner of a topic's bundle
(:mod:`.lookup`, Pulsar's ``/lookup/v2``). The load manager (:mod:`.load_manager`, its settings in
:mod:`.load_balancer_settings`) reports each broker's load (:mod:`.load_report`), and its leader decides
placement, shedding and splits (:mod:`.load_decisions`, sans-IO). A broker's named binary addresses
(Pulsar's advertised listeners, :mod:`magnetar.broker.wire.listeners`) travel in its registration.
:mod:`.peer_addresses` keeps the addresses of the other live brokers. Nothing here imports the session front
door, the owner proxy or the service: the service composes them.
"""

from magnetar.broker.ownership.bundle_map import Bundle, BundleMap
from magnetar.broker.ownership.load_balancer_settings import LoadBalancerSettings
from magnetar.broker.ownership.load_manager import (
    Handlers,
    LoadManager,
    OwnerGoneError,
    Resolution,
    bundle_stats,
    tcp_probe,
)
from magnetar.broker.ownership.load_report import BundleStats
from magnetar.broker.ownership.lookup import LookupHandlers
from magnetar.broker.ownership.manager import OwnerInfo, OwnershipManager
from magnetar.broker.ownership.namespace_bundle import (
    BUNDLES_MAX,
    DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES,
    NamespaceBundle,
    bundle_boundaries,
)
from magnetar.broker.ownership.peer_addresses import PeerAddresses, maintain_peer_addresses

__all__ = [
    "BUNDLES_MAX",
    "DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES",
    "Bundle",
    "BundleMap",
    "BundleStats",
    "Handlers",
    "LoadBalancerSettings",
    "LoadManager",
    "LookupHandlers",
    "NamespaceBundle",
    "OwnerGoneError",
    "OwnerInfo",
    "OwnershipManager",
    "PeerAddresses",
    "Resolution",
    "bundle_boundaries",
    "bundle_stats",
    "maintain_peer_addresses",
    "tcp_probe",
]
