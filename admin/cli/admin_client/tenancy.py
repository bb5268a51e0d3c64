"""``magnetar admin clusters|brokers|tenants|namespaces``: pulsar-admin's verbs and flags."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from magnetar.admin.cli.admin_client.client import AdminClient
from magnetar.admin.cli.admin_client.units import UnitError, parse_size_bytes, parse_time_s, retention_body
from magnetar.admin.cli.admin_client.verbs import (
    UsageError,
    Verb,
    combine,
    force_flag,
    namespace_path,
    option,
    positional,
)

QUOTA_TYPES = ["destination_storage", "message_age"]
A = argparse.Namespace
C = AdminClient


def _csv(text: str | None) -> list[str]:
    return [item for item in (text or "").split(",") if item]


def _units(fn: Any, value: str) -> int:
    try:
        return int(fn(value))
    except UnitError as exc:
        raise UsageError(str(exc)) from None


# -- clusters and brokers ------------------------------------------------------------------------------


def _cluster_body(args: A) -> dict[str, str]:
    return {"serviceUrl": args.url or "", "brokerServiceUrl": args.broker_url or ""}


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster")
    parser.add_argument("--url", help="the cluster's HTTP service URL")
    parser.add_argument("--broker-url", help="the cluster's broker service URL")


CLUSTERS = [
    Verb("list", "list clusters", lambda c, a: c.get("/admin/v2/clusters")),
    Verb("get", "get a cluster's data", lambda c, a: c.get(f"/admin/v2/clusters/{a.cluster}"),
         positional("cluster", "cluster name")),
    Verb("create", "create a cluster",
         lambda c, a: c.put(f"/admin/v2/clusters/{a.cluster}", _cluster_body(a)), _cluster_flags),
    Verb("update", "update a cluster",
         lambda c, a: c.post(f"/admin/v2/clusters/{a.cluster}", _cluster_body(a)), _cluster_flags),
]  # fmt: skip

BROKERS = [
    Verb("list", "list the active brokers of a cluster",
         lambda c, a: c.get(f"/admin/v2/brokers/{a.cluster}"), positional("cluster", "cluster name")),
    Verb("healthcheck", "run the broker health check", lambda c, a: c.get("/admin/v2/brokers/health")),
    Verb("leader-broker", "the leader broker (it runs the load manager)",
         lambda c, a: c.get("/admin/v2/brokers/leaderBroker")),
    Verb("load-report", "the load report of the broker asked (--admin-url)",
         lambda c, a: c.get("/admin/v2/broker-stats/load-report")),
]  # fmt: skip

# -- tenants --------------------------------------------------------------------------------------------


def _tenant_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tenant")
    parser.add_argument("-r", "--admin-roles", help="comma-separated admin roles")
    parser.add_argument("-c", "--allowed-clusters", help="comma-separated clusters (default: all clusters)")


def _tenant_body(client: C, args: A) -> dict[str, list[str]]:
    clusters = _csv(args.allowed_clusters) or list(client.get("/admin/v2/clusters") or [])
    return {"adminRoles": _csv(args.admin_roles), "allowedClusters": clusters}


TENANTS = [
    Verb("list", "list tenants", lambda c, a: c.get("/admin/v2/tenants")),
    Verb("get", "get a tenant's configuration", lambda c, a: c.get(f"/admin/v2/tenants/{a.tenant}"),
         positional("tenant", "tenant name")),
    Verb("create", "create a tenant",
         lambda c, a: c.put(f"/admin/v2/tenants/{a.tenant}", _tenant_body(c, a)), _tenant_flags),
    Verb("update", "update a tenant",
         lambda c, a: c.post(f"/admin/v2/tenants/{a.tenant}", _tenant_body(c, a)), _tenant_flags),
    Verb("delete", "delete a tenant", lambda c, a: c.delete(f"/admin/v2/tenants/{a.tenant}", force=a.force),
         combine(positional("tenant", "tenant name"), force_flag)),
]  # fmt: skip

# -- namespaces -----------------------------------------------------------------------------------------

NS = positional("namespace", "tenant/namespace")


def _create_namespace(client: C, args: A) -> Any:
    body = {"bundles": {"numBundles": args.bundles}} if args.bundles else None
    return client.put(namespace_path(args.namespace), body)


def retention_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-t", "--time", required=True, help="retention time, e.g. 100m, 3h, 2d, 5w; -1 = infinite"
    )
    parser.add_argument(
        "-s", "--size", required=True, help="retention size, e.g. 10M, 16G, 3T; -1 = infinite"
    )


def _retention(args: A) -> dict[str, int]:
    try:
        return retention_body(args.time, args.size)
    except UnitError as exc:
        raise UsageError(str(exc)) from None


def _ttl_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-ttl", "--messageTTL", dest="ttl", required=True, help="TTL, e.g. 3600, 100m, 3h, 2d"
    )


def quota_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-l", "--limit", help="size limit (e.g. 10M, 16G)")
    parser.add_argument("-lt", "--limitTime", dest="limit_time", help="time limit (e.g. 3h, 2d)")
    parser.add_argument(
        "-p", "--policy", required=True,
        choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"],
    )  # fmt: skip
    parser.add_argument("-t", "--type", default="destination_storage", choices=QUOTA_TYPES)


def quota_body(args: A) -> dict[str, Any]:
    body: dict[str, Any] = {"policy": args.policy}
    if args.limit is not None:
        body["limitSize"] = _units(parse_size_bytes, args.limit)
    if args.limit_time is not None:
        body["limitTime"] = _units(parse_time_s, args.limit_time)
    return body


def _quota_type_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--type", default="destination_storage", choices=QUOTA_TYPES)


def _role_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", required=True, help="the role (a token's subject)")


def _actions_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--actions", required=True, help="comma-separated: produce,consume,functions,...")


def _ns(args: A, tail: str = "") -> str:
    return namespace_path(args.namespace) + tail


def _unload(client: C, args: A) -> Any:
    if args.bundle:
        return client.put(_ns(args, f"/{args.bundle}/unload"))
    return client.put(_ns(args, "/unload"))


def _split(client: C, args: A) -> Any:
    return client.put(
        _ns(args, f"/{args.bundle}/split"),
        None,
        unload=str(args.unload).lower(),
        splitAlgorithmName=args.algorithm,
    )


NAMESPACES = [
    Verb("list", "list the namespaces of a tenant", lambda c, a: c.get(f"/admin/v2/namespaces/{a.tenant}"),
         positional("tenant", "tenant name")),
    Verb("create", "create a namespace", _create_namespace,
         combine(NS, option("-b", "--bundles", type=int, help="number of bundles"))),
    Verb("delete", "delete a namespace",
         lambda c, a: c.delete(_ns(a), force=a.force), combine(NS, force_flag)),
    Verb("policies", "get a namespace's policies", lambda c, a: c.get(_ns(a)), NS),
    Verb("topics", "list a namespace's topics", lambda c, a: c.get(_ns(a, "/topics")), NS),
    Verb("set-retention", "set the retention policy",
         lambda c, a: c.post(_ns(a, "/retention"), _retention(a)), combine(NS, retention_flags)),
    Verb("get-retention", "get the retention policy", lambda c, a: c.get(_ns(a, "/retention")), NS),
    Verb("remove-retention", "remove the retention policy", lambda c, a: c.delete(_ns(a, "/retention")), NS),
    Verb("set-message-ttl", "set the message TTL",
         lambda c, a: c.post(_ns(a, "/messageTTL"), _units(parse_time_s, a.ttl)), combine(NS, _ttl_flags)),
    Verb("get-message-ttl", "get the message TTL", lambda c, a: c.get(_ns(a, "/messageTTL")), NS),
    Verb("remove-message-ttl", "remove the message TTL", lambda c, a: c.delete(_ns(a, "/messageTTL")), NS),
    Verb("set-backlog-quota", "set a backlog quota",
         lambda c, a: c.post(_ns(a, "/backlogQuota"), quota_body(a), backlogQuotaType=a.type),
         combine(NS, quota_flags)),
    Verb("get-backlog-quotas", "get the backlog quotas", lambda c, a: c.get(_ns(a, "/backlogQuotaMap")), NS),
    Verb("remove-backlog-quota", "remove a backlog quota",
         lambda c, a: c.delete(_ns(a, "/backlogQuota"), backlogQuotaType=a.type),
         combine(NS, _quota_type_flag)),
    Verb("bundles", "get a namespace's bundles (boundaries, count)", lambda c, a: c.get(_ns(a, "/bundles")),
         NS),
    Verb("unload", "unload a namespace, or one of its bundles (-b): owners close the topics, lookups place "
         "the bundles again", _unload, combine(NS, option("-b", "--bundle", help="{start}_{end}, e.g. "
         "0x00000000_0x40000000"))),
    Verb("split-bundle", "split a bundle in two halves", _split,
         combine(NS, option("-b", "--bundle", required=True, help="{start}_{end}"),
                 option("-u", "--unload", action="store_true", help="unload the halves after the split"),
                 option("--split-algorithm-name", dest="algorithm", default="range_equally_divide",
                        help="only range_equally_divide"))),
    Verb("permissions", "get the permissions on a namespace", lambda c, a: c.get(_ns(a, "/permissions")), NS),
    Verb("grant-permission", "grant a role actions (produce, consume, functions ...) on a namespace",
         lambda c, a: c.post(_ns(a, f"/permissions/{quote(a.role, safe='')}"), _csv(a.actions)),
         combine(NS, _role_flag, _actions_flag)),
    Verb("revoke-permission", "revoke a role's actions on a namespace",
         lambda c, a: c.delete(_ns(a, f"/permissions/{quote(a.role, safe='')}")), combine(NS, _role_flag)),
]  # fmt: skip
