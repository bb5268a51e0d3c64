"""Clusters, brokers and tenants: ``/admin/v2/clusters``, ``/admin/v2/brokers``, ``/admin/v2/tenants``.

Pulsar's ``ClustersBase``, ``BrokersBase`` and ``TenantsBase``: a tenant names the clusters it may use
(``allowedClusters``, which must be non-empty and exist), is deleted only once it has no namespaces (409),
and a forced delete is refused unless ``force_delete_tenant_allowed`` (405, Pulsar's default).

Brokers, as the Java client's ``BrokersImpl`` calls them: ``brokers/version`` (the version as plain text,
which the client reads as a ``String``), ``brokers/ready`` (200 ``ok`` once serving, else 500),
``brokers/leaderBroker`` (``BrokerInfo``: ``serviceUrl``, ``brokerId``), ``brokers/{cluster}`` (active
brokers), ``brokers/{cluster}/{broker}/ownedNamespaces`` (``NamespaceOwnershipStatus`` per owned bundle; a
request for another live broker is redirected to it, as Pulsar's ``validateBrokerName`` does),
``brokers/configuration/runtime`` (the effective settings, by Magnetar's names, secrets left out) and the
dynamic-configuration calls. On a broker, ``leaderBroker`` is answered by the load manager's route
(``load_balance``, registered first) with the elected leader; an admin API served without the load manager
answers it here with the live broker whose id sorts first (the same answer on every broker). Magnetar has
no dynamic configuration, so the list of dynamic names and their values are empty and setting one is 412,
as Pulsar answers for a setting that is not dynamic (deleting one, ``DELETE brokers/configuration/{name}``,
is not routed: it would shadow ``configuration/values`` and ``runtime``).
"""

from __future__ import annotations

import importlib.metadata

from magnetar.admin.rest.framework import (
    AdminError,
    Call,
    Endpoint,
    QueryModel,
    no_content,
    ok,
    plain,
)
from magnetar.admin.rest.models import ClusterDataBody, TenantInfoBody
from magnetar.admin.rest.names import tenant_of
from magnetar.bookkeeper.runtime.http import HttpError, HttpResponse
from magnetar.broker.policies import AlreadyExists, ClusterData, TenantInfo
from magnetar.broker.wire import (
    InvalidTopicNameError,
    UnsafeNameError,
    check_name_characters,
    check_named_entity,
)

TAG_CLUSTERS = "clusters"
TAG_BROKERS = "brokers"
TAG_TENANTS = "tenants"


class HealthQuery(QueryModel):
    topicVersion: str | None = None
    brokerId: str | None = None


class ForceQuery(QueryModel):
    force: bool = False


def _cluster_of(call: Call) -> str:
    cluster = call.param("cluster")
    try:
        check_named_entity("cluster", cluster)
    except InvalidTopicNameError:
        raise AdminError(412, "Cluster name is not valid") from None
    return cluster


# -- clusters ------------------------------------------------------------------------------------------


async def list_clusters(call: Call) -> HttpResponse:
    return ok(sorted(await call.context.policies.clusters()))


async def get_cluster(call: Call) -> HttpResponse:
    data = await call.context.policies.get_cluster(_cluster_of(call))
    if data is None:
        raise AdminError(404, "Cluster does not exist")
    return ok(data)


async def create_cluster(call: Call) -> HttpResponse:
    cluster = _cluster_of(call)
    body: ClusterDataBody | None = call.body
    data = body.to_data() if body is not None else ClusterData()
    try:
        await call.context.policies.create_cluster(cluster, data)
    except AlreadyExists:
        raise AdminError(409, "Cluster already exists") from None
    return no_content()


async def update_cluster(call: Call) -> HttpResponse:
    cluster = _cluster_of(call)
    body: ClusterDataBody = call.body
    await call.context.policies.update_cluster(cluster, body.to_data())
    return no_content()


# -- brokers -------------------------------------------------------------------------------------------


async def health(call: Call) -> HttpResponse:
    if not await call.context.brokers.healthy():
        raise AdminError(503, "Broker is not healthy")
    return plain("ok")


async def active_brokers(call: Call) -> HttpResponse:
    await _check_cluster(call)
    return ok(sorted(await call.context.brokers.active_brokers()))


async def local_brokers(call: Call) -> HttpResponse:
    return ok(sorted(await call.context.brokers.active_brokers()))


def magnetar_version() -> str:
    try:
        return importlib.metadata.version("magnetar")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


async def version(call: Call) -> HttpResponse:
    return plain(magnetar_version())


async def ready(call: Call) -> HttpResponse:
    if not await call.context.brokers.healthy():
        raise AdminError(500, "Broker is not ready")
    return plain("ok")


async def leader_broker(call: Call) -> HttpResponse:
    brokers = sorted(await call.context.brokers.active_brokers())
    if not brokers:
        raise AdminError(404, "Couldn't find leader broker")
    return ok({"serviceUrl": f"http://{brokers[0]}", "brokerId": brokers[0]})


async def _check_cluster(call: Call) -> None:
    cluster = _cluster_of(call)
    if (
        cluster != call.context.settings.cluster_name
        and await call.context.policies.get_cluster(cluster) is None
    ):
        raise AdminError(404, "Cluster does not exist")


async def owned_namespaces(call: Call) -> HttpResponse:
    await _check_cluster(call)
    broker = call.param("broker")
    directory = call.context.brokers
    if broker != directory.broker_id():
        if broker not in await directory.active_brokers():
            raise AdminError(404, f"Broker {broker} is not an active broker")
        location = f"http://{broker}{call.request.path}"
        raise HttpError(307, "Redirect to the broker asked about", (("location", location),))
    status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    owned = sorted(directory.owned_bundles())
    return ok({f"{namespace}/{bundle}": dict(status) for namespace, bundle in owned})


async def runtime_configuration(call: Call) -> HttpResponse:
    return ok(dict(sorted(call.context.brokers.runtime_configuration().items())))


async def dynamic_configuration_names(call: Call) -> HttpResponse:
    return ok([])


async def dynamic_configuration_values(call: Call) -> HttpResponse:
    return ok({})


async def update_dynamic_configuration(call: Call) -> HttpResponse:
    raise AdminError(412, " Can't update non-dynamic configuration")


# -- tenants -------------------------------------------------------------------------------------------


async def list_tenants(call: Call) -> HttpResponse:
    return ok(sorted(await call.context.policies.tenants()))


async def get_tenant(call: Call) -> HttpResponse:
    info = await call.context.policies.get_tenant(tenant_of(call))
    if info is None:
        raise AdminError(404, "Tenant does not exist")
    return ok(info)


async def _validated_info(call: Call) -> TenantInfo:
    body: TenantInfoBody | None = call.body
    info = body.to_info() if body is not None else TenantInfo()
    for role in info.adminRoles:
        try:
            check_name_characters("role", role)
        except UnsafeNameError as exc:
            raise AdminError(412, str(exc)) from None
    if not info.allowedClusters:
        raise AdminError(412, "Clusters can not be empty")
    known = set(await call.context.policies.clusters())
    if not set(info.allowedClusters) <= known:
        raise AdminError(412, "Clusters do not exist")
    return info


async def create_tenant(call: Call) -> HttpResponse:
    tenant = tenant_of(call)
    ctx = call.context
    if await ctx.policies.get_tenant(tenant) is not None:
        raise AdminError(409, "Tenant already exist")
    limit = ctx.settings.max_tenants
    if limit > 0 and len(await ctx.policies.tenants()) >= limit:
        raise AdminError(412, "Exceed the maximum number of tenants")
    info = await _validated_info(call)
    try:
        await ctx.policies.create_tenant(tenant, info)
    except AlreadyExists:
        raise AdminError(409, "Tenant already exist") from None
    return no_content()


async def update_tenant(call: Call) -> HttpResponse:
    tenant = tenant_of(call)
    if await call.context.policies.get_tenant(tenant) is None:
        raise AdminError(404, "Tenant does not exist")
    info = await _validated_info(call)
    await call.context.policies.update_tenant(tenant, info)
    return no_content()


async def delete_tenant(call: Call) -> HttpResponse:
    tenant = tenant_of(call)
    ctx = call.context
    if await ctx.policies.get_tenant(tenant) is None:
        raise AdminError(404, "Tenant does not exist")
    if call.query_as(ForceQuery).force and not ctx.settings.force_delete_tenant_allowed:
        raise AdminError(405, "Broker doesn't allow forced deletion of tenants")
    await ctx.policies.delete_tenant(tenant)
    return no_content()


def endpoints() -> list[Endpoint]:
    not_found = {404: "Cluster does not exist"}
    tenant_errors = {404: "Tenant does not exist", 412: "Tenant name is not valid"}
    return [
        Endpoint("GET", "/admin/v2/clusters", list_clusters, "List clusters", TAG_CLUSTERS,
                 response=list[str], status=200),
        Endpoint("GET", "/admin/v2/clusters/{cluster}", get_cluster, "Get a cluster", TAG_CLUSTERS,
                 response=ClusterData, status=200, errors=not_found),
        Endpoint("PUT", "/admin/v2/clusters/{cluster}", create_cluster, "Create a cluster", TAG_CLUSTERS,
                 body=ClusterDataBody, errors={409: "Cluster already exists"}),
        Endpoint("POST", "/admin/v2/clusters/{cluster}", update_cluster, "Update a cluster", TAG_CLUSTERS,
                 body=ClusterDataBody, body_required=True, errors=not_found),
        Endpoint("GET", "/admin/v2/brokers/health", health, "Broker health check", TAG_BROKERS,
                 query=HealthQuery, status=200, content_type="text/plain",
                 errors={503: "Broker is not healthy"}),
        Endpoint("GET", "/admin/v2/brokers", local_brokers, "Active brokers of this cluster", TAG_BROKERS,
                 response=list[str], status=200),
        Endpoint("GET", "/admin/v2/brokers/version", version, "Version of this broker", TAG_BROKERS,
                 status=200, content_type="text/plain"),
        Endpoint("GET", "/admin/v2/brokers/ready", ready, "Whether this broker serves", TAG_BROKERS,
                 status=200, content_type="text/plain", errors={500: "Broker is not ready"}),
        Endpoint("GET", "/admin/v2/brokers/leaderBroker", leader_broker, "The leader broker", TAG_BROKERS,
                 response=dict[str, str], status=200, errors={404: "Couldn't find leader broker"}),
        Endpoint("GET", "/admin/v2/brokers/configuration", dynamic_configuration_names,
                 "Names of the dynamic settings (none)", TAG_BROKERS, response=list[str], status=200),
        Endpoint("GET", "/admin/v2/brokers/configuration/values", dynamic_configuration_values,
                 "Values of the dynamic settings (none)", TAG_BROKERS, response=dict[str, str], status=200),
        Endpoint("GET", "/admin/v2/brokers/configuration/runtime", runtime_configuration,
                 "This broker's effective settings", TAG_BROKERS, response=dict[str, str], status=200),
        Endpoint("POST", "/admin/v2/brokers/configuration/{name}/{value}", update_dynamic_configuration,
                 "Update a dynamic setting (none exists: 412)", TAG_BROKERS,
                 errors={412: "Can't update non-dynamic configuration"}),
        Endpoint("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces,
                 "Bundles owned by a broker", TAG_BROKERS, response=dict[str, dict[str, object]], status=200,
                 errors={307: "Redirect to that broker", 404: "Cluster or broker does not exist"}),
        Endpoint("GET", "/admin/v2/brokers/{cluster}", active_brokers, "Active brokers of a cluster",
                 TAG_BROKERS, response=list[str], status=200, errors=not_found),
        Endpoint("GET", "/admin/v2/tenants", list_tenants, "List tenants", TAG_TENANTS,
                 response=list[str], status=200),
        Endpoint("GET", "/admin/v2/tenants/{tenant}", get_tenant, "Get a tenant", TAG_TENANTS,
                 response=TenantInfo, status=200, errors=tenant_errors),
        Endpoint("PUT", "/admin/v2/tenants/{tenant}", create_tenant, "Create a tenant", TAG_TENANTS,
                 body=TenantInfoBody, errors={409: "Tenant already exist", 412: "Clusters can not be empty"}),
        Endpoint("POST", "/admin/v2/tenants/{tenant}", update_tenant, "Update a tenant", TAG_TENANTS,
                 body=TenantInfoBody, body_required=True, errors=tenant_errors),
        Endpoint("DELETE", "/admin/v2/tenants/{tenant}", delete_tenant, "Delete a tenant", TAG_TENANTS,
                 query=ForceQuery,
                 errors={**tenant_errors, 405: "Forced deletion not allowed",
                         409: "The tenant still has active namespaces"}),
    ]  # fmt: skip
