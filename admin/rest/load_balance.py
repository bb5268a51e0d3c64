"""Bundles and the load manager over REST, as the Java ``PulsarAdmin`` calls them.

* ``PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload``
  (``NamespacesImpl.unloadNamespaceBundle``): the owner closes the bundle's topics cleanly and gives the
  bundle up; the next lookup places it. Asked of a broker that does not own it: 307 to the owner
  (``authoritative=true``), as Pulsar; nobody owns it: 204.
* ``PUT .../{bundle}/split?unload=&splitAlgorithmName=`` (``splitNamespaceBundle``): the owner splits the
  bundle in two equal halves (``range_equally_divide``, Pulsar's default and the only algorithm here: another
  name is 412); with ``unload=true`` the halves go through placement, else the owner keeps them. An unowned
  bundle is taken by the broker asked first.
* ``PUT /admin/v2/namespaces/{tenant}/{namespace}/unload`` (``unload``): every owned bundle of the namespace,
  wherever it is owned (other owners are asked through the load manager and unload within their next round).
* ``GET /admin/v2/brokers/leaderBroker`` (``BrokersImpl.getLeaderBroker``): ``{"serviceUrl", "brokerId"}``.
* ``GET /admin/v2/broker-stats/load-report`` (``BrokerStatsImpl.getLoadReport``): this broker's current load
  report (Pulsar's ``LocalBrokerData`` fields).
"""

from __future__ import annotations

from typing import Any

from magnetar.admin.rest.bundle_host import BundleHost
from magnetar.admin.rest.framework import AdminError, Call, Endpoint, QueryModel, no_content, ok
from magnetar.admin.rest.names import namespace_of, require_namespace
from magnetar.bookkeeper.runtime.http import HttpError, HttpResponse
from magnetar.broker.ownership import NamespaceBundle
from magnetar.broker.wire import InvalidTopicNameError

TAG = "bundles"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
SPLIT_ALGORITHM = "range_equally_divide"


class SplitQuery(QueryModel):
    authoritative: bool = False
    unload: bool = False
    splitAlgorithmName: str | None = None


class UnloadQuery(QueryModel):
    authoritative: bool = False


def _host(call: Call) -> BundleHost:
    host = call.context.bundles
    if host is None:
        raise AdminError(404, "This server has no load manager")
    return host


async def _bundle(call: Call) -> tuple[str, str]:
    namespace = namespace_of(call)
    policies = await require_namespace(call.context, namespace)
    try:
        bundle = NamespaceBundle.parse(call.param("bundle"))
    except InvalidTopicNameError as exc:
        raise AdminError(412, str(exc)) from None
    bounds = [int(b, 16) for b in policies.bundles.boundaries]
    if bounds and (bundle.lower not in bounds or bundle.upper not in bounds or _spans(bundle, bounds)):
        raise AdminError(404, f"Bundle {bundle} is not a bundle of {namespace}")
    return str(namespace), bundle.range_name


def _spans(bundle: NamespaceBundle, bounds: list[int]) -> bool:
    return any(bundle.lower < b < bundle.upper for b in bounds)


def _redirect(call: Call, owner: str) -> HttpError:
    pairs = [f"{k}={v}" for k, v in call.request.query.pairs if k != "authoritative"]
    location = f"{owner.rstrip('/')}{call.request.path}?{'&'.join([*pairs, 'authoritative=true'])}"
    return HttpError(307, "Redirect to the bundle's owner", (("location", location),))


async def unload_bundle(call: Call) -> HttpResponse:
    namespace, bundle = await _bundle(call)
    host = _host(call)
    owner = await host.owner_url(namespace, bundle)
    if owner is None:
        return no_content()
    if owner:
        raise _redirect(call, owner)
    await host.unload(namespace, bundle)
    return no_content()


async def split_bundle(call: Call) -> HttpResponse:
    query = call.query_as(SplitQuery)
    if query.splitAlgorithmName not in (None, "", SPLIT_ALGORITHM):
        raise AdminError(412, f"Unsupported namespace bundle split algorithm, supported: {SPLIT_ALGORITHM}")
    namespace, bundle = await _bundle(call)
    host = _host(call)
    owner = await host.owner_url(namespace, bundle)
    if owner:
        raise _redirect(call, owner)
    await host.split(namespace, bundle, query.unload)
    return no_content()


async def unload_namespace(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    await _host(call).unload_namespace(str(namespace))
    return no_content()


async def leader_broker(call: Call) -> HttpResponse:
    leader = await _host(call).leader()
    if leader is None:
        raise AdminError(404, "Couldn't find leader broker")
    return ok(leader)


async def load_report(call: Call) -> HttpResponse:
    return ok(_host(call).load_report())


def endpoints() -> list[Endpoint]:
    moved = {307: "Redirect to the bundle's owner", 404: "Namespace or bundle does not exist"}
    # fmt: off
    return [
        Endpoint("GET", "/admin/v2/brokers/leaderBroker", leader_broker, "The leader broker", "brokers",
                 response=dict[str, str], status=200, errors={404: "Couldn't find leader broker"}),
        Endpoint("GET", "/admin/v2/broker-stats/load-report", load_report, "This broker's load report",
                 "broker-stats", response=dict[str, Any], status=200),
        Endpoint("PUT", f"{NS}/unload", unload_namespace, "Unload every bundle of a namespace", TAG,
                 query=UnloadQuery, errors={404: "Namespace does not exist"}),
        Endpoint("PUT", f"{NS}/{{bundle}}/unload", unload_bundle, "Unload a namespace bundle", TAG,
                 query=UnloadQuery, errors=moved),
        Endpoint("PUT", f"{NS}/{{bundle}}/split", split_bundle, "Split a namespace bundle in two", TAG,
                 query=SplitQuery, body=Any, errors={**moved, 412: "Unsupported split algorithm"}),
    ]
    # fmt: on
