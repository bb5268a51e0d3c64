"""Partitioned-topic metadata, topic listings and topic-level policies over HTTP."""

from __future__ import annotations

import httpx
from fixtures.admin import AdminServer, initialized_store, run_admin_server

from magnetar.admin.rest import AdminSettings
from magnetar.managed_ledger.info import ManagedLedgerInfo
from magnetar.managed_ledger.meta_store import ledger_path

NS = "/admin/v2/persistent/public/default"


async def make_topic(server: AdminServer, local_encoded: str) -> None:
    """A topic as the broker leaves one: its managed ledger's metadata node."""
    path = ledger_path(f"public/default/persistent/{local_encoded}")
    await server.metadata.put(path, ManagedLedgerInfo().encode(), -1)


async def test_partitioned_topic_lifecycle(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.get(f"{NS}/orders/partitions")).json() == {"partitions": 0, "deleted": False}
    assert (await admin_client.put(f"{NS}/orders/partitions", json=3)).status_code == 204
    assert (await admin_client.get(f"{NS}/orders/partitions")).json() == {"partitions": 3, "deleted": False}
    again = await admin_client.put(f"{NS}/orders/partitions", json=3)
    assert (again.status_code, again.json()["reason"]) == (409, "This topic already exists")
    assert (await admin_client.get(f"{NS}/partitioned")).json() == ["persistent://public/default/orders"]
    listed = (await admin_client.get(NS)).json()
    assert listed == [f"persistent://public/default/orders-partition-{i}" for i in range(3)]

    assert (await admin_client.post(f"{NS}/orders/partitions", json=5)).status_code == 204
    assert (await admin_client.get(f"{NS}/orders/partitions")).json()["partitions"] == 5
    shrink = await admin_client.post(f"{NS}/orders/partitions", json=2)
    assert shrink.status_code == 422
    assert (await admin_client.post(f"{NS}/unknown/partitions", json=2)).status_code == 404

    assert (await admin_client.put(f"{NS}/zero/partitions", json=0)).status_code == 406
    assert (await admin_client.put(f"{NS}/many/partitions", json=10**6)).status_code == 406
    assert (await admin_client.put(f"{NS}/x-partition-1/partitions", json=2)).status_code == 412
    assert (await admin_client.put(f"{NS}/nobody/partitions", json="two")).status_code == 400
    assert (
        await admin_client.put("/admin/v2/persistent/public/none/t/partitions", json=2)
    ).status_code == 404

    assert (await admin_client.delete(f"{NS}/orders/partitions")).status_code == 204
    assert (await admin_client.delete(f"{NS}/orders/partitions")).status_code == 404
    assert (await admin_client.get(f"{NS}/partitioned")).json() == []


async def test_partition_limit_setting() -> None:
    store = await initialized_store()
    settings = AdminSettings(max_num_partitions_per_partitioned_topic=4)
    async with (
        run_admin_server(store, settings) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        assert (await client.put(f"{NS}/t/partitions", json=5)).status_code == 406
        assert (await client.put(f"{NS}/t/partitions", json=4)).status_code == 204
        assert (await client.post(f"{NS}/t/partitions", json=5)).status_code == 406
    await store.aclose()


async def test_topic_names_are_decoded_like_pulsar(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    # pulsar-admin sends the local name URL-encoded (space as '+'); the listing shows the decoded name.
    assert (await admin_client.put(f"{NS}/my+topic%21/partitions", json=1)).status_code == 204
    assert (await admin_client.get(f"{NS}/partitioned")).json() == ["persistent://public/default/my topic!"]
    await make_topic(admin_server, "plain")
    listed = (await admin_client.get(NS)).json()
    assert "persistent://public/default/plain" in listed
    assert (await admin_client.put(f"{NS}/plain/partitions", json=2)).status_code == 409


async def test_topic_level_retention_overrides_namespace(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    url = f"{NS}/t1/retention"
    body = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20}
    missing = await admin_client.post(url, json=body)
    assert (missing.status_code, missing.json()["reason"]) == (404, "Topic not found")
    await make_topic(admin_server, "t1")
    assert (await admin_client.get(url)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == {
        "retentionTimeInMinutes": 0,
        "retentionSizeInMB": 0,
    }
    ns_retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    ns_url = "/admin/v2/namespaces/public/default/retention"
    assert (await admin_client.post(ns_url, json=ns_retention)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == ns_retention
    assert (await admin_client.post(url, json=body)).status_code == 204
    assert (await admin_client.get(url)).json() == body
    assert (await admin_client.get(url, params={"applied": "true"})).json() == body
    invalid = await admin_client.post(url, json={"retentionTimeInMinutes": 0, "retentionSizeInMB": 1})
    assert invalid.status_code == 412
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204


async def test_topic_level_ttl_and_backlog_quota(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t2")
    ttl = f"{NS}/t2/messageTTL"
    assert (await admin_client.post(ttl, params={"messageTTL": 30})).status_code == 204  # pulsar-admin's form
    assert (await admin_client.get(ttl)).json() == 30
    assert (await admin_client.post(ttl, json=45)).status_code == 204
    assert (await admin_client.get(ttl)).json() == 45
    assert (await admin_client.post(ttl, params={"messageTTL": -1})).status_code == 412
    assert (await admin_client.post(ttl)).status_code == 204  # no value: unset, as Pulsar's null
    assert (await admin_client.get(ttl)).status_code == 204
    assert (await admin_client.delete(ttl)).status_code == 204
    assert (await admin_client.get(ttl, params={"applied": "true"})).json() == 0

    quota_url = f"{NS}/t2/backlogQuota"
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert (await admin_client.post(quota_url, json=quota)).status_code == 204
    assert (await admin_client.get(f"{NS}/t2/backlogQuotaMap")).json() == {"destination_storage": quota}
    retention_too_small = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 0}
    assert (await admin_client.post(f"{NS}/t2/retention", json=retention_too_small)).status_code == 412
    assert (await admin_client.delete(quota_url)).status_code == 204
    assert (await admin_client.get(f"{NS}/t2/backlogQuotaMap")).json() == {}


async def test_topic_level_policies_can_be_disabled() -> None:
    store = await initialized_store()
    settings = AdminSettings(topic_level_policies_enabled=False)
    async with (
        run_admin_server(store, settings) as server,
        httpx.AsyncClient(base_url=server.base_url) as client,
    ):
        await make_topic(server, "t")
        response = await client.get(f"{NS}/t/retention")
        assert response.status_code == 405
        assert response.json()["reason"].startswith("Topic level policies is disabled")
    await store.aclose()


async def test_partition_of_partitioned_topic_takes_policies(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.put(f"{NS}/p/partitions", json=2)).status_code == 204
    body = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert (await admin_client.post(f"{NS}/p-partition-1/retention", json=body)).status_code == 204
    assert (await admin_client.post(f"{NS}/p-partition-2/retention", json=body)).status_code == 404


async def test_openapi_document_lists_every_route(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    response = await admin_client.get("/admin/v2/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    paths = document["paths"]
    assert "/admin/v2/namespaces/{tenant}/{namespace}/retention" in paths
    retention = paths["/admin/v2/namespaces/{tenant}/{namespace}/retention"]
    assert set(retention) == {"get", "post", "delete"}
    body_schema = retention["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema == {"$ref": "#/components/schemas/RetentionBody"}
    fields = document["components"]["schemas"]["RetentionBody"]["properties"]
    assert set(fields) == {"retentionTimeInMinutes", "retentionSizeInMB"}
    assert "412" in retention["post"]["responses"]
    assert document == admin_server.document
