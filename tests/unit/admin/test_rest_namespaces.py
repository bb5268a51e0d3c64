"""Clusters, brokers, tenants and namespaces over HTTP: every route, its success and its error codes."""

from __future__ import annotations

import httpx
import pytest
from fixtures.admin import AdminServer, run_admin_server

from magnetar.admin.rest import AdminSettings
from magnetar.bookkeeper.metadata import MemoryMetadataStore


def reason(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"reason"}, body
    return str(body["reason"])


async def test_clusters_and_brokers(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.get("/admin/v2/clusters")).json() == ["standalone"]
    cluster = await admin_client.get("/admin/v2/clusters/standalone")
    assert cluster.status_code == 200
    assert cluster.json()["serviceUrl"] == "http://127.0.0.1:8080"
    assert (await admin_client.get("/admin/v2/clusters/nope")).status_code == 404
    assert (await admin_client.get("/admin/v2/clusters/bad%20name")).status_code == 412
    created = await admin_client.put("/admin/v2/clusters/east", json={"serviceUrl": "http://east:8080"})
    assert created.status_code == 204
    assert (await admin_client.put("/admin/v2/clusters/east", json={})).status_code == 409
    updated = await admin_client.post("/admin/v2/clusters/east", json={"serviceUrl": "http://e2:8080"})
    assert updated.status_code == 204
    assert (await admin_client.get("/admin/v2/clusters/east")).json()["serviceUrl"] == "http://e2:8080"
    assert (await admin_client.post("/admin/v2/clusters/west", json={})).status_code == 404

    health = await admin_client.get("/admin/v2/brokers/health")
    assert (health.status_code, health.text) == (200, "ok")
    assert (await admin_client.get("/admin/v2/brokers/standalone")).json() == ["127.0.0.1:8080"]
    assert (await admin_client.get("/admin/v2/brokers")).json() == ["127.0.0.1:8080"]
    assert (await admin_client.get("/admin/v2/brokers/unknown")).status_code == 404


async def test_tenant_lifecycle(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.get("/admin/v2/tenants")).json() == ["public"]
    body = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert (await admin_client.put("/admin/v2/tenants/acme", json=body)).status_code == 204
    again = await admin_client.put("/admin/v2/tenants/acme", json=body)
    assert (again.status_code, reason(again)) == (409, "Tenant already exist")
    assert (await admin_client.get("/admin/v2/tenants")).json() == ["acme", "public"]
    assert (await admin_client.get("/admin/v2/tenants/acme")).json() == body
    missing = await admin_client.get("/admin/v2/tenants/nobody")
    assert (missing.status_code, reason(missing)) == (404, "Tenant does not exist")

    update = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert (await admin_client.post("/admin/v2/tenants/acme", json=update)).status_code == 204
    assert (await admin_client.get("/admin/v2/tenants/acme")).json()["adminRoles"] == []
    assert (await admin_client.post("/admin/v2/tenants/nobody", json=update)).status_code == 404

    assert (await admin_client.put("/admin/v2/namespaces/acme/orders")).status_code == 204
    busy = await admin_client.delete("/admin/v2/tenants/acme")
    assert (busy.status_code, reason(busy)) == (409, "The tenant still has active namespaces")
    forced = await admin_client.delete("/admin/v2/tenants/acme", params={"force": "true"})
    assert forced.status_code == 405
    assert (await admin_client.delete("/admin/v2/namespaces/acme/orders")).status_code == 204
    assert (await admin_client.delete("/admin/v2/tenants/acme")).status_code == 204
    assert (await admin_client.delete("/admin/v2/tenants/acme")).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        ({"allowedClusters": []}, 412, "Clusters can not be empty"),
        ({}, 412, "Clusters can not be empty"),
        ({"allowedClusters": ["mars"]}, 412, "Clusters do not exist"),
        ({"allowedClusters": "standalone"}, 400, "Invalid request body"),
        ([1, 2], 400, "Invalid request body"),
    ],
)
async def test_tenant_create_refusals(
    admin_client: httpx.AsyncClient, body: object, status: int, why: str
) -> None:
    response = await admin_client.put("/admin/v2/tenants/t1", json=body)
    assert response.status_code == status
    assert reason(response).startswith(why)
    assert (await admin_client.get("/admin/v2/tenants/t1")).status_code == 404  # nothing half-applied


async def test_invalid_names_and_bodies(admin_client: httpx.AsyncClient) -> None:
    bad = await admin_client.put("/admin/v2/tenants/bad%20tenant", json={"allowedClusters": ["standalone"]})
    assert (bad.status_code, reason(bad)) == (412, "Tenant name is not valid")
    bad_ns = await admin_client.put("/admin/v2/namespaces/public/bad%24ns")
    assert (bad_ns.status_code, reason(bad_ns)) == (412, "Namespace name is not valid")
    not_json = await admin_client.put(
        "/admin/v2/tenants/t2", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400
    assert reason(not_json).startswith("Invalid JSON body")
    # JAX-RS ignores a parameter it does not know and reads a boolean as Boolean.valueOf: only "true" (any
    # case) is true. Other parameters are still validated.
    unknown_param = await admin_client.get("/admin/v2/tenants", params={"color": "blue"})
    assert (unknown_param.status_code, unknown_param.json()) == (200, ["public"])
    not_true = await admin_client.delete("/admin/v2/tenants/public", params={"force": "maybe"})
    assert (not_true.status_code, reason(not_true)) == (409, "The tenant still has active namespaces")
    forced = await admin_client.delete("/admin/v2/tenants/public", params={"force": "TRUE"})
    assert (forced.status_code, reason(forced)) == (405, "Broker doesn't allow forced deletion of tenants")
    bad_enum = await admin_client.post(
        "/admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=bogus", json={"limitSize": 1}
    )
    assert bad_enum.status_code == 400
    assert reason(bad_enum).startswith("Invalid query parameter 'backlogQuotaType'")
    deep = b"[" * 200 + b"]" * 200
    too_deep = await admin_client.put("/admin/v2/tenants/t3", content=deep)
    assert too_deep.status_code == 400


async def test_huge_body_is_refused_before_reading() -> None:
    from magnetar.bookkeeper.runtime.http import HttpSettings

    store = MemoryMetadataStore()
    http = HttpSettings(http_bind_address="127.0.0.1", http_port=0, http_body_bytes_max=1024)
    async with (
        run_admin_server(store, http=http) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        response = await client.put("/admin/v2/tenants/big", content=b"x" * 4096)
        assert response.status_code == 413
        assert "reason" in response.json()
    await store.aclose()


async def test_namespace_lifecycle(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.get("/admin/v2/namespaces/public")).json() == ["public/default"]
    assert (await admin_client.get("/admin/v2/namespaces/nobody")).status_code == 404
    assert (await admin_client.put("/admin/v2/namespaces/public/ns1")).status_code == 204
    exists = await admin_client.put("/admin/v2/namespaces/public/ns1")
    assert (exists.status_code, reason(exists)) == (409, "Namespace already exists")
    no_tenant = await admin_client.put("/admin/v2/namespaces/nobody/ns1")
    assert (no_tenant.status_code, reason(no_tenant)) == (404, "Tenant does not exist")

    policies = (await admin_client.get("/admin/v2/namespaces/public/ns1")).json()
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["bundles"]["numBundles"] == 4
    assert policies["bundles"]["boundaries"][0] == "0x00000000"
    assert policies["bundles"]["boundaries"][-1] == "0xffffffff"
    assert policies["retention_policies"] is None
    assert policies["backlog_quota_map"] == {}
    assert (await admin_client.get("/admin/v2/namespaces/public/ns1/bundles")).json()["numBundles"] == 4
    assert (await admin_client.get("/admin/v2/namespaces/public/none")).status_code == 404

    assert (await admin_client.get("/admin/v2/namespaces/public/ns1/topics")).json() == []
    assert (await admin_client.put("/admin/v2/persistent/public/ns1/t/partitions", json=2)).status_code == 204
    topics = (await admin_client.get("/admin/v2/namespaces/public/ns1/topics")).json()
    assert topics == ["persistent://public/ns1/t-partition-0", "persistent://public/ns1/t-partition-1"]
    non_persistent = await admin_client.get(
        "/admin/v2/namespaces/public/ns1/topics", params={"mode": "NON_PERSISTENT"}
    )
    assert non_persistent.json() == []
    busy = await admin_client.delete("/admin/v2/namespaces/public/ns1")
    assert (busy.status_code, reason(busy)) == (409, "Namespace is not empty")
    forced = await admin_client.delete("/admin/v2/namespaces/public/ns1", params={"force": "true"})
    assert forced.status_code == 405
    assert (await admin_client.delete("/admin/v2/persistent/public/ns1/t/partitions")).status_code == 204
    assert (await admin_client.delete("/admin/v2/namespaces/public/ns1")).status_code == 204
    assert (await admin_client.delete("/admin/v2/namespaces/public/ns1")).status_code == 404


async def test_namespace_create_with_policies(admin_client: httpx.AsyncClient) -> None:
    body = {
        "bundles": {"numBundles": 8},
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        "message_ttl_in_seconds": 30,
    }
    assert (await admin_client.put("/admin/v2/namespaces/public/p1", json=body)).status_code == 204
    policies = (await admin_client.get("/admin/v2/namespaces/public/p1")).json()
    assert policies["bundles"]["numBundles"] == 8
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert policies["message_ttl_in_seconds"] == 30
    bad = {"retention_policies": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5}}
    refused = await admin_client.put("/admin/v2/namespaces/public/p2", json=bad)
    assert refused.status_code == 412
    assert (await admin_client.get("/admin/v2/namespaces/public/p2")).status_code == 404
    too_many = await admin_client.put("/admin/v2/namespaces/public/p3", json={"bundles": {"numBundles": 0}})
    assert too_many.status_code == 412


# Pulsar's validity table (docs/upstream.md, Pulsar §2.2).
@pytest.mark.parametrize(
    ("time_min", "size_mb", "valid"),
    [
        (-1, -1, True),
        (-1, 10, True),
        (10, -1, True),
        (0, 0, True),
        (0, 10, False),
        (10, 0, False),
        (10, 10, True),
        (-2, 10, False),
        (10, -5, False),
    ],
)
async def test_retention_validity_table(
    admin_client: httpx.AsyncClient, time_min: int, size_mb: int, valid: bool
) -> None:
    url = "/admin/v2/namespaces/public/default/retention"
    body = {"retentionTimeInMinutes": time_min, "retentionSizeInMB": size_mb}
    response = await admin_client.post(url, json=body)
    if valid:
        assert response.status_code == 204
        assert (await admin_client.get(url)).json() == body
    else:
        assert response.status_code == 412
        assert reason(response).startswith("Invalid retention policy")
        assert (await admin_client.get(url)).status_code == 204  # still unset


async def test_retention_get_set_remove(admin_client: httpx.AsyncClient) -> None:
    url = "/admin/v2/namespaces/public/default/retention"
    assert (await admin_client.get(url)).status_code == 204
    body = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}
    assert (await admin_client.post(url, json=body)).status_code == 204
    got = await admin_client.get(url)
    assert (got.status_code, got.json()) == (200, body)
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204
    assert (await admin_client.post(url)).status_code == 400  # body required
    wrong_type = await admin_client.post(url, json={"retentionTimeInMinutes": "soon"})
    assert wrong_type.status_code == 400
    too_big = await admin_client.post(url, json={"retentionTimeInMinutes": 2**31, "retentionSizeInMB": 1})
    assert too_big.status_code == 400
    missing = await admin_client.post("/admin/v2/namespaces/public/none/retention", json=body)
    assert missing.status_code == 404


async def test_message_ttl(admin_client: httpx.AsyncClient) -> None:
    url = "/admin/v2/namespaces/public/default/messageTTL"
    assert (await admin_client.get(url)).status_code == 204
    assert (await admin_client.post(url, json=120)).status_code == 204
    assert (await admin_client.get(url)).json() == 120
    negative = await admin_client.post(url, json=-5)
    assert (negative.status_code, reason(negative)) == (412, "Invalid TTL")
    assert (await admin_client.post(url, json="abc")).status_code == 400
    assert (await admin_client.get(url)).json() == 120
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204


async def test_backlog_quota_and_its_relation_to_retention(admin_client: httpx.AsyncClient) -> None:
    ns = "/admin/v2/namespaces/public/default"
    quota = {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "consumer_backlog_eviction"}
    assert (await admin_client.post(f"{ns}/backlogQuota", json=quota)).status_code == 204
    quota_map = (await admin_client.get(f"{ns}/backlogQuotaMap")).json()
    assert quota_map == {"destination_storage": quota}
    # Retention smaller than the quota would delete what the quota protects.
    small = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 5}
    refused = await admin_client.post(f"{ns}/retention", json=small)
    assert refused.status_code == 412
    assert reason(refused) == "Retention Quota must exceed configured backlog quota for namespace."
    big = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 100}
    assert (await admin_client.post(f"{ns}/retention", json=big)).status_code == 204
    over = {"limitSize": 200 * 1024 * 1024, "policy": "producer_exception"}
    too_big = await admin_client.post(f"{ns}/backlogQuota", json=over)
    assert too_big.status_code == 412
    legacy = {"limit": 1024, "policy": "producer_request_hold"}
    assert (await admin_client.post(f"{ns}/backlogQuota", json=legacy)).status_code == 204
    assert (await admin_client.get(f"{ns}/backlogQuotaMap")).json()["destination_storage"][
        "limitSize"
    ] == 1024
    bad_policy = await admin_client.post(f"{ns}/backlogQuota", json={"limitSize": 1, "policy": "drop_all"})
    assert bad_policy.status_code == 400
    bad_type = await admin_client.post(f"{ns}/backlogQuota", params={"backlogQuotaType": "x"}, json=legacy)
    assert bad_type.status_code == 400
    age = {"limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert (
        await admin_client.post(f"{ns}/backlogQuota", params={"backlogQuotaType": "message_age"}, json=age)
    ).status_code == 204
    assert set((await admin_client.get(f"{ns}/backlogQuotaMap")).json()) == {
        "destination_storage",
        "message_age",
    }
    removed = await admin_client.delete(f"{ns}/backlogQuota", params={"backlogQuotaType": "message_age"})
    assert removed.status_code == 204
    assert set((await admin_client.get(f"{ns}/backlogQuotaMap")).json()) == {"destination_storage"}


async def test_max_tenants_and_missing_routes(admin_server: AdminServer) -> None:
    store = MemoryMetadataStore()
    await store.put("/admin/clusters/standalone", b"{}", None)
    async with (
        run_admin_server(store, AdminSettings(max_tenants=1)) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        body = {"allowedClusters": ["standalone"]}
        assert (await client.put("/admin/v2/tenants/one", json=body)).status_code == 204
        over = await client.put("/admin/v2/tenants/two", json=body)
        assert (over.status_code, reason(over)) == (412, "Exceed the maximum number of tenants")
        assert (await client.get("/admin/v2/nothing-here")).status_code == 404
        assert (await client.patch("/admin/v2/tenants")).status_code == 405
    await store.aclose()
