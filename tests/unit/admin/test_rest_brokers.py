"""``BrokersImpl`` calls and the non-persistent listings, sent as the Java admin client sends them.

Each request below is the one ``pulsar-client-admin`` builds (``adminBrokers = web.path("admin/v2/brokers")``
and the parts each method adds; ``TopicsImpl.getListAsync`` asks ``persistent`` and ``non-persistent``
with ``bundle`` and ``includeSystemTopic``), and each answer is checked as the client reads it: a ``String``
for the version, ``BrokerInfo`` JSON, ``Map<String, NamespaceOwnershipStatus>``, ``List<String>``.
"""

from __future__ import annotations

import httpx
import pytest
from fixtures.admin import initialized_store, run_admin_server

from magnetar.admin.processes.broker_admin import runtime_configuration
from magnetar.admin.rest import AdminSettings, StaticBrokers
from magnetar.admin.rest.clusters import magnetar_version
from magnetar.broker.settings import BrokerSettings

BROKERS = "/admin/v2/brokers"


@pytest.fixture
async def client() -> httpx.AsyncClient:
    store = await initialized_store()
    brokers = StaticBrokers(
        ["127.0.0.1:8080", "127.0.0.1:8081"],
        bundles=[("public/default", "0x00000000_0x40000000")],
        configuration={"cluster": "standalone"},
    )
    async with (
        run_admin_server(store, AdminSettings(), brokers=brokers) as server,
        httpx.AsyncClient(base_url=server.base_url, timeout=30) as c,
    ):
        yield c  # type: ignore[misc]
    await store.aclose()


async def test_version_ready_and_leader(client: httpx.AsyncClient) -> None:
    version = await client.get(f"{BROKERS}/version")
    assert (version.status_code, version.text) == (200, magnetar_version())  # read as a String
    ready = await client.get(f"{BROKERS}/ready")
    assert (ready.status_code, ready.text) == (200, "ok")
    leader = await client.get(f"{BROKERS}/leaderBroker")
    assert leader.json() == {"serviceUrl": "http://127.0.0.1:8080", "brokerId": "127.0.0.1:8080"}
    assert (await client.get(BROKERS)).json() == ["127.0.0.1:8080", "127.0.0.1:8081"]
    assert (await client.get(f"{BROKERS}/standalone")).json() == ["127.0.0.1:8080", "127.0.0.1:8081"]
    assert (await client.get(f"{BROKERS}/nowhere")).status_code == 404


async def test_owned_namespaces_of_this_broker_and_a_redirect_for_another(client: httpx.AsyncClient) -> None:
    owned = await client.get(f"{BROKERS}/standalone/127.0.0.1:8080/ownedNamespaces")
    assert owned.json() == {
        "public/default/0x00000000_0x40000000": {
            "broker_assignment": "shared",
            "is_controlled": False,
            "is_active": True,
        }
    }
    other = await client.get(f"{BROKERS}/standalone/127.0.0.1:8081/ownedNamespaces")
    assert other.status_code == 307
    assert (
        other.headers["location"]
        == "http://127.0.0.1:8081/admin/v2/brokers/standalone/127.0.0.1:8081/ownedNamespaces"
    )
    assert (await client.get(f"{BROKERS}/standalone/10.0.0.1:1/ownedNamespaces")).status_code == 404
    assert (await client.get(f"{BROKERS}/nowhere/127.0.0.1:8080/ownedNamespaces")).status_code == 404


async def test_configuration_calls(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"{BROKERS}/configuration")).json() == []
    assert (await client.get(f"{BROKERS}/configuration/values")).json() == {}
    assert (await client.get(f"{BROKERS}/configuration/runtime")).json() == {"cluster": "standalone"}
    update = await client.post(f"{BROKERS}/configuration/dispatchThrottlingRatePerTopicInMsg/10", content=b"")
    assert (update.status_code, update.json()["reason"]) == (412, " Can't update non-dynamic configuration")


def test_runtime_configuration_leaves_secrets_out() -> None:
    settings = BrokerSettings(
        token_secret_key="data:;base64,c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
        managed_ledger_password="hunter2",
    )
    shown = runtime_configuration(settings)
    assert "token_secret_key" not in shown
    assert "managed_ledger_password" not in shown
    assert shown["cluster"] == "standalone"
    assert shown["authentication_enabled"] == "false"
    assert "hunter2" not in repr(shown)


async def test_the_java_clients_topic_listings_ask_both_domains(client: httpx.AsyncClient) -> None:
    assert (await client.put("/admin/v2/persistent/public/default/p/partitions", json=2)).status_code == 204
    query = {"bundle": None, "includeSystemTopic": "false"}  # WebTarget drops a null query value
    params = {k: v for k, v in query.items() if v is not None}
    persistent = await client.get("/admin/v2/persistent/public/default", params=params)
    non_persistent = await client.get("/admin/v2/non-persistent/public/default", params=params)
    assert (persistent.status_code, non_persistent.status_code) == (200, 200)
    # getList: the union of both lists
    assert sorted({*persistent.json(), *non_persistent.json()}) == [
        "persistent://public/default/p-partition-0",
        "persistent://public/default/p-partition-1",
    ]
    partitioned = await client.get("/admin/v2/persistent/public/default/partitioned", params=params)
    np_partitioned = await client.get("/admin/v2/non-persistent/public/default/partitioned", params=params)
    assert (partitioned.json(), np_partitioned.json()) == (["persistent://public/default/p"], [])
    missing = await client.get("/admin/v2/non-persistent/public/none")
    assert (missing.status_code, missing.json()["reason"]) == (404, "Namespace does not exist")
    missing = await client.get("/admin/v2/non-persistent/public/none/partitioned")
    assert missing.status_code == 404
