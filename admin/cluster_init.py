"""``initialize-cluster-metadata``: the cluster, tenant ``public`` and namespace ``public/default``.

As Pulsar's ``PulsarClusterMetadataSetup``: writes the cluster's ``ClusterData``, creates tenant ``public``
(allowed on this cluster) and namespace ``public/default`` (replicated to this cluster, with the default
number of bundles). It also creates the BookKeeper cluster's instance id, ``/ledgers/INSTANCEID`` (a random
UUID, as BookKeeper's ``initNewCluster``), that every bookie's cookie records. Every step is
create-if-absent, so running it again - the Helm init job is re-run on every upgrade - changes nothing. A
store that cannot be reached is retried a bounded number of times with a growing pause
(``init_attempts_max``, ``init_retry_delay_s``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.metadata import MetadataStore, StoreUnavailableError, open_metadata_store
from magnetar.bookkeeper.metadata.bookies import ensure_instance_id
from magnetar.broker.namespace_bundle import DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES, bundle_boundaries
from magnetar.broker.policies import (
    BundlesData,
    ClusterData,
    Policies,
    PolicyStore,
    TenantInfo,
    ensure,
)
from magnetar.broker.wire.topic_name import DEFAULT_NAMESPACE, PUBLIC_TENANT, check_named_entity

log = logging.getLogger(__name__)

RETRY_DELAY_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class ClusterInit:
    cluster: str
    web_service_url: str = ""
    broker_service_url: str = ""
    bundles: int = DEFAULT_NUMBER_OF_NAMESPACE_BUNDLES

    def __post_init__(self) -> None:
        check_named_entity("cluster", self.cluster)
        if not 0 < self.bundles <= 1024:
            raise ValueError("bundles must be in 1..1024")


async def initialize_cluster_metadata(store: MetadataStore, init: ClusterInit) -> None:
    """Create what is missing; leave what exists untouched (idempotent)."""
    instance_id = await ensure_instance_id(store)  # BookKeeper's /ledgers/INSTANCEID, in every cookie
    log.info("cluster instance id %s", instance_id)
    policies = PolicyStore(store)
    data = ClusterData(serviceUrl=init.web_service_url, brokerServiceUrl=init.broker_service_url)
    await ensure(lambda: policies.create_cluster(init.cluster, data))
    tenant = TenantInfo(adminRoles=[], allowedClusters=[init.cluster])
    await ensure(lambda: policies.create_tenant(PUBLIC_TENANT, tenant))
    bounds = bundle_boundaries(init.bundles)
    namespace = Policies(
        replication_clusters=[init.cluster],
        bundles=BundlesData(boundaries=[f"0x{b:08x}" for b in bounds], numBundles=init.bundles),
    )
    await ensure(lambda: policies.create_namespace(f"{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}", namespace))


async def initialize_with_retries(
    url: str, init: ClusterInit, *, attempts_max: int = 10, retry_delay_s: float = 1.0
) -> None:
    """Open the store at ``url`` and initialize it, retrying while it is unreachable (bounded)."""
    delay = retry_delay_s
    for attempt in range(1, attempts_max + 1):
        try:
            async with open_metadata_store(url) as store:
                await initialize_cluster_metadata(store, init)
            return
        except StoreUnavailableError as exc:
            if attempt == attempts_max:
                raise
            log.warning("metadata store unavailable (attempt %d/%d): %s", attempt, attempts_max, exc)
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_MAX_S)
