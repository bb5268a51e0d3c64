"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/...]]``.

Pulsar's ``Namespaces`` v2 / ``NamespacesBase``: create (with optional ``Policies``; replication clusters
default to the local cluster, bundles to ``default_number_of_namespace_bundles``), get policies, delete (409
while topics remain; forced delete refused unless allowed, 405), list topics, and the retention / message TTL
/ backlog quota policies with Pulsar's validity rules (:mod:`.policy_rules`, 412 on a violation). Every
change is one compare-and-set of the namespace's policies node; a lost race is 409.
"""

from __future__ import annotations

from typing import Literal

from magnetar.admin.rest.framework import (
    AdminError,
    AuthoritativeQuery,
    Call,
    Endpoint,
    QueryModel,
    no_content,
    ok,
    ok_or_empty,
)
from magnetar.admin.rest.limit_policies import check
from magnetar.admin.rest.models import (
    BacklogQuotaBody,
    BacklogQuotaType,
    Int32,
    NamespacePoliciesBody,
    RetentionBody,
)
from magnetar.admin.rest.names import list_topics, namespace_of, require_namespace, require_tenant, tenant_of
from magnetar.admin.rest.policy_rules import (
    backlog_quota_error,
    quota_within_retention,
    quotas_within_retention,
    retention_error,
    ttl_error,
)
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.ownership import BUNDLES_MAX, bundle_boundaries
from magnetar.broker.policies import (
    CATALOGUE,
    AlreadyExists,
    BacklogQuota,
    BundlesData,
    Policies,
    RetentionPolicies,
)
from magnetar.managed_ledger.meta_store import ledger_path

TAG = "namespaces"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"


class NamespaceDeleteQuery(QueryModel):
    force: bool = False
    authoritative: bool = False


class TopicsQuery(QueryModel):
    mode: Literal["PERSISTENT", "NON_PERSISTENT", "ALL"] = "PERSISTENT"
    includeSystemTopic: bool = False


class BacklogQuotaQuery(QueryModel):
    backlogQuotaType: BacklogQuotaType = "destination_storage"
    authoritative: bool = False


# -- create / get / delete -----------------------------------------------------------------------------


async def list_namespaces(call: Call) -> HttpResponse:
    tenant = tenant_of(call)
    await require_tenant(call.context, tenant)
    return ok(await call.context.policies.namespaces(tenant))


def _bundles(body: NamespacePoliciesBody | None, default: int) -> BundlesData:
    count = default
    if body is not None and body.bundles is not None:
        requested = body.bundles.get("numBundles", default)
        if not isinstance(requested, int) or not 0 < requested <= BUNDLES_MAX:
            raise AdminError(412, f"Invalid number of bundles: must be in (0, {BUNDLES_MAX}]")
        count = requested
    bounds = bundle_boundaries(count)
    return BundlesData(boundaries=[f"0x{b:08x}" for b in bounds], numBundles=count)


def _initial_policies(call: Call) -> Policies:
    body: NamespacePoliciesBody | None = call.body
    settings = call.context.settings
    policies = Policies(
        replication_clusters=[settings.cluster_name],
        bundles=_bundles(body, settings.default_number_of_namespace_bundles),
    )
    if body is None:
        return policies
    update: dict[str, object] = {}
    if body.replication_clusters:
        update["replication_clusters"] = list(body.replication_clusters)
    if body.retention_policies is not None:
        retention = body.retention_policies.to_policies()
        _check_retention(retention)
        update["retention_policies"] = retention
    if body.message_ttl_in_seconds is not None:
        _check_ttl(body.message_ttl_in_seconds)
        update["message_ttl_in_seconds"] = body.message_ttl_in_seconds
    if body.backlog_quota_map:
        quotas = {kind: q.to_quota() for kind, q in body.backlog_quota_map.items()}
        for quota in quotas.values():
            _check_quota(quota)
        if not quotas_within_retention(quotas, update.get("retention_policies")):  # type: ignore[arg-type]
            raise AdminError(412, _QUOTA_OVER_RETENTION)
        update["backlog_quota_map"] = quotas
    for spec in CATALOGUE:
        # the rates are kept by cluster in Pulsar's document: a create body does not set them here
        value = getattr(body, spec.field, None)
        if value is not None:
            update[spec.field] = check(spec, value, call.context, topic_level=False)
    return policies.model_copy(update=update)


async def create_namespace(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    ctx = call.context
    await require_tenant(ctx, namespace.tenant)
    policies = _initial_policies(call)
    known = set(await ctx.policies.clusters())
    if not set(policies.replication_clusters) <= known | {ctx.settings.cluster_name}:
        raise AdminError(412, "Replication clusters do not exist")
    try:
        await ctx.policies.create_namespace(str(namespace), policies)
    except AlreadyExists:
        raise AdminError(409, "Namespace already exists") from None
    return no_content()


async def get_policies(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    return ok(await require_namespace(call.context, namespace))


async def delete_namespace(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    ctx = call.context
    await require_namespace(ctx, namespace)
    if call.query_as(NamespaceDeleteQuery).force and not ctx.settings.force_delete_namespace_allowed:
        raise AdminError(405, "Broker doesn't allow forced deletion of namespaces")
    if await list_topics(ctx, namespace):
        raise AdminError(409, "Namespace is not empty")
    await ctx.policies.delete_namespace(str(namespace))
    for leftover in (
        ledger_path(f"{namespace}/persistent"),
        f"/admin/partitioned-topics/{namespace}",
        f"/admin/topic-policies/{namespace}",
    ):
        await ctx.metadata.delete_recursive(leftover)
    return no_content()


async def get_topics(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    mode = call.query_as(TopicsQuery).mode
    non_persistent = await call.context.non_persistent.topics(namespace) if mode != "PERSISTENT" else []
    persistent = await list_topics(call.context, namespace) if mode != "NON_PERSISTENT" else []
    return ok(persistent + sorted(non_persistent))


async def get_bundles(call: Call) -> HttpResponse:
    policies = await require_namespace(call.context, namespace_of(call))
    return ok(policies.bundles)


# -- retention -----------------------------------------------------------------------------------------

_QUOTA_OVER_RETENTION = (
    "Specified backlog quota exceeds retention quota. Increase retention quota and retry request"
)
_RETENTION_UNDER_QUOTA = "Retention Quota must exceed configured backlog quota for namespace."


def _check_retention(retention: RetentionPolicies) -> None:
    error = retention_error(retention)
    if error is not None:
        raise AdminError(412, error)


def _check_ttl(seconds: int) -> None:
    error = ttl_error(seconds)
    if error is not None:
        raise AdminError(412, error)


def _check_quota(quota: BacklogQuota) -> None:
    error = backlog_quota_error(quota)
    if error is not None:
        raise AdminError(412, error)


async def get_retention(call: Call) -> HttpResponse:
    policies = await require_namespace(call.context, namespace_of(call))
    return ok_or_empty(policies.retention_policies)


async def set_retention(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    body: RetentionBody = call.body
    retention = body.to_policies()
    _check_retention(retention)
    await require_namespace(call.context, namespace)

    def change(p: Policies) -> Policies:
        if not quotas_within_retention(p.backlog_quota_map, retention):
            raise AdminError(412, _RETENTION_UNDER_QUOTA)
        return p.model_copy(update={"retention_policies": retention})

    await call.context.policies.update_namespace(str(namespace), change)
    return no_content()


async def remove_retention(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    await call.context.policies.update_namespace(
        str(namespace), lambda p: p.model_copy(update={"retention_policies": None})
    )
    return no_content()


# -- message TTL ---------------------------------------------------------------------------------------


async def get_ttl(call: Call) -> HttpResponse:
    policies = await require_namespace(call.context, namespace_of(call))
    return ok_or_empty(policies.message_ttl_in_seconds)


async def set_ttl(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    seconds: int = call.body
    _check_ttl(seconds)
    await require_namespace(call.context, namespace)
    await call.context.policies.update_namespace(
        str(namespace), lambda p: p.model_copy(update={"message_ttl_in_seconds": seconds})
    )
    return no_content()


async def remove_ttl(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    await call.context.policies.update_namespace(
        str(namespace), lambda p: p.model_copy(update={"message_ttl_in_seconds": None})
    )
    return no_content()


# -- backlog quota -------------------------------------------------------------------------------------


async def get_backlog_quota_map(call: Call) -> HttpResponse:
    policies = await require_namespace(call.context, namespace_of(call))
    return ok({kind: quota.model_dump() for kind, quota in sorted(policies.backlog_quota_map.items())})


async def set_backlog_quota(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    kind = call.query_as(BacklogQuotaQuery).backlogQuotaType
    body: BacklogQuotaBody = call.body
    quota = body.to_quota()
    _check_quota(quota)
    await require_namespace(call.context, namespace)

    def change(p: Policies) -> Policies:
        if kind == "destination_storage" and not quota_within_retention(quota, p.retention_policies):
            raise AdminError(412, _QUOTA_OVER_RETENTION)
        return p.model_copy(update={"backlog_quota_map": {**p.backlog_quota_map, kind: quota}})

    await call.context.policies.update_namespace(str(namespace), change)
    return no_content()


async def remove_backlog_quota(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    kind = call.query_as(BacklogQuotaQuery).backlogQuotaType
    await require_namespace(call.context, namespace)

    def change(p: Policies) -> Policies:
        remaining = {k: v for k, v in p.backlog_quota_map.items() if k != kind}
        return p.model_copy(update={"backlog_quota_map": remaining})

    await call.context.policies.update_namespace(str(namespace), change)
    return no_content()


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace does not exist", 412: "Namespace name is not valid"}
    e_set = {**e404, 409: "Concurrent modification", 412: "Invalid policy"}
    return [
        Endpoint("GET", "/admin/v2/namespaces/{tenant}", list_namespaces, "List a tenant's namespaces", TAG,
                 response=list[str], status=200, errors={404: "Tenant does not exist"}),
        Endpoint("PUT", NS, create_namespace, "Create a namespace", TAG, body=NamespacePoliciesBody,
                 errors={404: "Tenant does not exist", 409: "Namespace already exists",
                         412: "Namespace name is not valid"}),
        Endpoint("GET", NS, get_policies, "Get a namespace's policies", TAG, query=AuthoritativeQuery,
                 response=Policies, status=200, errors=e404),
        Endpoint("DELETE", NS, delete_namespace, "Delete a namespace", TAG, query=NamespaceDeleteQuery,
                 errors={**e404, 405: "Forced deletion not allowed", 409: "Namespace is not empty"}),
        Endpoint("GET", f"{NS}/topics", get_topics, "List a namespace's topics", TAG, query=TopicsQuery,
                 response=list[str], status=200, errors=e404),
        Endpoint("GET", f"{NS}/bundles", get_bundles, "Get a namespace's bundles", TAG,
                 query=AuthoritativeQuery, response=BundlesData, status=200, errors=e404),
        Endpoint("GET", f"{NS}/retention", get_retention, "Get retention", TAG, query=AuthoritativeQuery,
                 response=RetentionPolicies, status=200, errors=e404),
        Endpoint("POST", f"{NS}/retention", set_retention, "Set retention", TAG, query=AuthoritativeQuery,
                 body=RetentionBody, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{NS}/retention", remove_retention, "Remove retention", TAG,
                 query=AuthoritativeQuery, errors=e_set),
        Endpoint("GET", f"{NS}/messageTTL", get_ttl, "Get message TTL (seconds)", TAG,
                 query=AuthoritativeQuery, response=int, status=200, errors=e404),
        Endpoint("POST", f"{NS}/messageTTL", set_ttl, "Set message TTL (seconds)", TAG,
                 query=AuthoritativeQuery, body=Int32, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{NS}/messageTTL", remove_ttl, "Remove message TTL", TAG,
                 query=AuthoritativeQuery, errors=e_set),
        Endpoint("GET", f"{NS}/backlogQuotaMap", get_backlog_quota_map, "Get backlog quotas", TAG,
                 query=AuthoritativeQuery, response=dict[str, BacklogQuota], status=200, errors=e404),
        Endpoint("POST", f"{NS}/backlogQuota", set_backlog_quota, "Set a backlog quota", TAG,
                 query=BacklogQuotaQuery, body=BacklogQuotaBody, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{NS}/backlogQuota", remove_backlog_quota, "Remove a backlog quota", TAG,
                 query=BacklogQuotaQuery, errors=e_set),
    ]  # fmt: skip
