"""``initialize-cluster-metadata``: the cluster, tenant ``public`` and namespace ``public/default``.

As Pulsar's ``PulsarClusterMetadataSetup``: writes the cluster's ``ClusterData``, creates tenant ``public``
(allowed on this cluster) and namespace ``public/default`` (replicated to this cluster, with the default
number of bundles). It also creates the BookKeeper cluster's instance id, ``/ledgers/INSTANCEID`` (a random
UUID, as BookKeeper's ``initNewCluster``), that every bookie's cookie records. Every step is
create-if-absent, so running it again - the Helm init job is re-run on every upgrade - changes nothing. A
store that cannot be reached is retried a bounded number of times with a growing pause (``attempts_max``,
``retry_delay_s``, doubling up to ``RETRY_DELAY_MAX_S``); :func:`retry_budget_s` is the longest this can
take, which the Helm chart checks against its job's deadline.

``wait-for-metadata`` (:func:`wait_for_metadata`) is the other half of the chart's start-up order, as
Pulsar's init containers that wait for ZooKeeper and for the cluster's metadata: it creates nothing and
returns once the store answers and, when asked, once the cluster's metadata exists (what
``initialize-cluster-metadata`` writes last, ``public/default``, included) and enough bookies are writable.
Each check that finds something missing logs one line saying what it waits for.

Both commands read how to reach the store from the environment (:class:`MetadataClientSettings`: the
``MAGNETAR_METADATA_*`` timeouts and ``MAGNETAR_ZK_TLS_*``, the names brokers and bookies use), so the init
job and the init containers reach a ZooKeeper that requires TLS as the processes do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

import trio
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar.bookkeeper.metadata import (
    MetadataConnectionSettings,
    MetadataStore,
    MetadataStoreSettings,
    NotFoundError,
    StoreUnavailableError,
    ensure_instance_id,
    list_bookies,
    open_metadata_store,
)
from magnetar.bookkeeper.metadata.zk_store import PROBE_TIMEOUT_S
from magnetar.broker.ownership import BUNDLES_MAX, DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES, bundle_boundaries
from magnetar.broker.policies import BundlesData, ClusterData, Policies, PolicyStore, TenantInfo, ensure
from magnetar.broker.wire import DEFAULT_NAMESPACE, PUBLIC_TENANT, check_named_entity

log = logging.getLogger(__name__)

RETRY_DELAY_MAX_S = 30.0
INIT_COMMAND = "magnetar initialize-cluster-metadata"
PositiveInt = Annotated[int, Field(gt=0)]


class MetadataClientSettings(BaseSettings, MetadataConnectionSettings):
    """How the metadata commands reach the store: the brokers' and bookies' names for the same settings."""

    model_config = SettingsConfigDict(env_prefix="MAGNETAR_", frozen=True, extra="forbid")

    metadata_url: str | None = None
    """The store (required): ``zk:HOST:PORT[,HOST:PORT][/chroot]``, ``rocksdb:///PATH``."""
    cluster: str | None = None
    """The cluster's name (``initialize-cluster-metadata --cluster``, ``wait-for-metadata --cluster``)."""


@dataclass(frozen=True, slots=True)
class ClusterInit:
    cluster: str
    web_service_url: str = ""
    broker_service_url: str = ""
    bundles: int = DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES
    web_service_url_tls: str = ""
    broker_service_url_tls: str = ""

    def __post_init__(self) -> None:
        check_named_entity("cluster", self.cluster)
        if not 0 < self.bundles <= BUNDLES_MAX:
            raise ValueError(f"bundles must be in 1..{BUNDLES_MAX}")


async def initialize_cluster_metadata(store: MetadataStore, init: ClusterInit) -> None:
    """Create what is missing; leave what exists untouched (idempotent)."""
    instance_id = await ensure_instance_id(store)  # BookKeeper's /ledgers/INSTANCEID, in every cookie
    log.info("cluster instance id %s", instance_id)
    policies = PolicyStore(store)
    data = ClusterData(
        serviceUrl=init.web_service_url,
        serviceUrlTls=init.web_service_url_tls,
        brokerServiceUrl=init.broker_service_url,
        brokerServiceUrlTls=init.broker_service_url_tls,
    )
    await ensure(lambda: policies.create_cluster(init.cluster, data))
    tenant = TenantInfo(adminRoles=[], allowedClusters=[init.cluster])
    await ensure(lambda: policies.create_tenant(PUBLIC_TENANT, tenant))
    bounds = bundle_boundaries(init.bundles)
    namespace = Policies(
        replication_clusters=[init.cluster],
        bundles=BundlesData(boundaries=[f"0x{b:08x}" for b in bounds], numBundles=init.bundles),
    )
    await ensure(lambda: policies.create_namespace(f"{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}", namespace))


def retry_budget_s(
    attempts_max: int, retry_delay_s: float, operation_timeout_s: float, servers: int = 1
) -> float:
    """The longest :func:`initialize_with_retries` can take against a ZooKeeper that never answers: every
    attempt waits ``operation_timeout_s`` for a session, then up to ``PROBE_TIMEOUT_S`` per server to say why
    there was none, and the pauses between attempts double from ``retry_delay_s`` up to
    ``RETRY_DELAY_MAX_S``."""
    pauses = sum(min(retry_delay_s * 2.0**i, RETRY_DELAY_MAX_S) for i in range(attempts_max - 1))
    return attempts_max * (operation_timeout_s + servers * PROBE_TIMEOUT_S) + pauses


async def initialize_with_retries(
    url: str,
    init: ClusterInit,
    *,
    attempts_max: int = 10,
    retry_delay_s: float = 1.0,
    settings: MetadataStoreSettings | None = None,
) -> None:
    """Open the store at ``url`` and initialize it, retrying while it is unreachable (bounded)."""
    delay = retry_delay_s
    for attempt in range(1, attempts_max + 1):
        try:
            async with open_metadata_store(url, settings) as store:
                await initialize_cluster_metadata(store, init)
            return
        except StoreUnavailableError as exc:
            if attempt == attempts_max:
                raise
            log.warning("metadata store unavailable (attempt %d/%d): %s", attempt, attempts_max, exc)
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_MAX_S)


@dataclass(frozen=True, slots=True)
class Awaited:
    """What :func:`wait_for_metadata` waits for, besides a store that answers."""

    cluster: str | None = None
    """The cluster, tenant ``public`` and namespace ``public/default`` (what the init job writes)."""
    bookies_min: int = 0
    """Writable bookies registered."""


class MetadataWaitTimeoutError(Exception):
    """``wait_for_metadata`` ran out of time; the message says what was still missing."""


async def missing_metadata(store: MetadataStore, awaited: Awaited) -> str | None:
    """What is not there yet, in words; None once everything awaited is."""
    if awaited.cluster is not None:
        policies = PolicyStore(store)
        namespace = f"{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}"
        if await policies.get_cluster(awaited.cluster) is None:
            return f"cluster {awaited.cluster!r} is not initialized yet ({INIT_COMMAND})"
        if await policies.get_namespace(namespace) is None:
            return f"namespace {namespace} of cluster {awaited.cluster!r} is not created yet"
    if awaited.bookies_min > 0:
        try:
            writable = len((await list_bookies(store)).writable)
        except NotFoundError:
            writable = 0
        if writable < awaited.bookies_min:
            return f"{writable} of {awaited.bookies_min} bookies needed are registered and writable"
    return None


async def wait_for_metadata(
    url: str,
    awaited: Awaited,
    *,
    settings: MetadataStoreSettings | None = None,
    timeout_s: float = 0.0,
    check_interval_s: float = 3.0,
) -> None:
    """Return once the store at ``url`` answers and holds what ``awaited`` names; log one line per check that
    finds something missing. ``timeout_s`` > 0 bounds the wait (:class:`MetadataWaitTimeoutError`)."""
    missing = f"metadata store {url} not reached yet"
    with trio.move_on_after(timeout_s if timeout_s > 0 else float("inf")):
        while True:
            try:
                async with open_metadata_store(url, settings) as store:
                    while True:
                        found = await missing_metadata(store, awaited)
                        if found is None:
                            log.info("metadata ready at %s", url)
                            return
                        missing = found
                        log.info("waiting: %s; next check in %gs", missing, check_interval_s)
                        await trio.sleep(check_interval_s)
            except StoreUnavailableError as exc:
                missing = f"metadata store {url} unreachable ({exc})"
                log.info("waiting: %s; next check in %gs", missing, check_interval_s)
                await trio.sleep(check_interval_s)
    raise MetadataWaitTimeoutError(f"gave up after {timeout_s:g}s: {missing}")
