"""The catalogue's policies over HTTP: every route (namespace and topic), Pulsar's statuses and reasons,
hostile bodies, precedence with ``?applied=true`` and the namespace's full policies document."""

from __future__ import annotations

import json

import httpx
import pytest
from fixtures.admin import AdminServer

from magnetar.broker.policies.catalogue import CATALOGUE, PolicySpec
from magnetar.managed_ledger.info import ManagedLedgerInfo
from magnetar.managed_ledger.meta_store import ledger_path

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/t1"
INT_POLICIES = [s for s in CATALOGUE if s.kind == "int"]


async def make_topic(server: AdminServer, local: str) -> None:
    await server.metadata.put(
        ledger_path(f"public/default/persistent/{local}"), ManagedLedgerInfo().encode(), -1
    )


def reason(response: httpx.Response) -> str:
    return str(response.json()["reason"])


async def post_raw(client: httpx.AsyncClient, url: str, raw: str) -> httpx.Response:
    return await client.post(url, content=raw.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("spec", INT_POLICIES, ids=lambda s: s.ns_path)
async def test_namespace_count_lifecycle(admin_client: httpx.AsyncClient, spec: PolicySpec) -> None:
    url = f"{NS}/{spec.ns_path}"
    assert (await admin_client.get(url)).status_code == 204
    assert (await admin_client.post(url, json=7)).status_code == 204
    assert (await admin_client.get(url)).json() == 7
    assert (await admin_client.get(NS)).json()[spec.field] == 7
    negative = await admin_client.post(url, json=-1)
    assert negative.status_code == 412
    if spec.field == "subscription_expiration_time_minutes":
        assert reason(negative) == "Invalid value for subscription expiration time"
    elif spec.field == "deduplicationSnapshotIntervalSeconds":
        assert reason(negative) == "interval must be greater than or equal to 0"
    else:
        assert reason(negative) == f"{spec.ns_path} must be 0 or more"
    assert (await admin_client.get(url)).json() == 7
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204
    missing = await admin_client.post("/admin/v2/namespaces/public/nope/" + spec.ns_path, json=1)
    assert missing.status_code == 404


@pytest.mark.parametrize(
    "raw",
    [
        str(2**31),  # beyond Java's int
        str(2**63),
        str(-(2**63) - 1),
        '"\u0661\u0662"',  # Arabic-Indic digits are no Java number
        "true",
        "1.5",
        '{"value": 1}',
        "[1]",
        '"ten"',
        "",
    ],
)
async def test_namespace_count_hostile_bodies(admin_client: httpx.AsyncClient, raw: str) -> None:
    response = await post_raw(admin_client, f"{NS}/maxProducersPerTopic", raw)
    assert response.status_code == 400, response.text
    assert (await admin_client.get(f"{NS}/maxProducersPerTopic")).status_code == 204


async def test_count_in_a_string_is_read_as_java_reads_it(admin_client: httpx.AsyncClient) -> None:
    assert (await post_raw(admin_client, f"{NS}/maxConsumersPerTopic", '" 12 "')).status_code == 204
    assert (await admin_client.get(f"{NS}/maxConsumersPerTopic")).json() == 12
    assert (await post_raw(admin_client, f"{NS}/maxConsumersPerTopic", str(2**31 - 1))).status_code == 204


PERSISTENCE_CASES = [
    ({"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}, 204, None),
    ({"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
      "managedLedgerMaxMarkDeleteRate": 2.5, "managedLedgerStorageClassName": None}, 204, None),
    ({}, 204, None),  # the no-argument constructor's 2/2/2
    ({"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 1}, 400,
     "Bookkeeper Ensemble (2) >= WriteQuorum (3) >= AckQuorum (1)"),
    ({"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 3}, 400,
     "Bookkeeper Ensemble (3) >= WriteQuorum (2) >= AckQuorum (3)"),
    ({"bookkeeperEnsemble": 0, "bookkeeperWriteQuorum": 0, "bookkeeperAckQuorum": 0}, 400,
     "Bookkeeper-Ensemble must be <= 5 and > 0."),
    ({"bookkeeperEnsemble": 6, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}, 400,
     "Bookkeeper-Ensemble must be <= 5 and > 0."),
    ({"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": -1, "bookkeeperAckQuorum": -2}, 400,
     "Bookkeeper-WriteQuorum must be <= 5 and > 0."),
    ({"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 0}, 400,
     "Bookkeeper-AckQuorum must be <= 5 and > 0."),
    ({"bookkeeperEnsemble": 2**31}, 400, None),
    ({"bookkeeperEnsemble": 2**63}, 400, None),
    ({"bookkeeperEnsemble": "\u0663"}, 400, None),
    ({"bookkeeperEnsemble": True}, 400, None),
    ({"managedLedgerMaxMarkDeleteRate": "fast"}, 400, None),
    ({"managedLedgerMaxMarkDeleteRate": 1e400}, 400, None),
    ([2, 2, 2], 400, None),
    (3, 400, None),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "why"), PERSISTENCE_CASES)
async def test_persistence_validation(
    admin_client: httpx.AsyncClient, body: object, status: int, why: str | None
) -> None:
    response = await post_raw(admin_client, f"{NS}/persistence", json.dumps(body))
    assert response.status_code == status, response.text
    if why is not None:
        assert reason(response) == why
    stored = await admin_client.get(f"{NS}/persistence")
    if status == 204:
        expected = {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2,
                    "managedLedgerMaxMarkDeleteRate": 0.0}  # fmt: skip
        assert isinstance(body, dict)
        expected.update({k: v for k, v in body.items() if k in expected})
        assert stored.json() == expected
        assert (await admin_client.get(NS)).json()["persistence"] == expected
    else:
        assert stored.status_code == 204


AUTO_TOPIC_CASES = [
    ({"allowAutoTopicCreation": False}, 204, None),
    ({"allowAutoTopicCreation": True, "topicType": "non-partitioned"}, 204, None),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}, 204, None),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned"}, 412,
     "[defaultNumPartitions] cannot be null when the type is partitioned."),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0}, 412,
     "[defaultNumPartitions] cannot be less than 1 for partition type."),
    ({"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2}, 412,
     "[defaultNumPartitions] is not allowed to be set when the type is non-partition."),
    ({"allowAutoTopicCreation": True, "topicType": "sharded"}, 412, "Unknown topic type [sharded]"),
    ({"allowAutoTopicCreation": True}, 412, "Unknown topic type [None]"),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2**31}, 400, None),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 100_000}, 406,
     "Number of partitions should be less than or equal to 65536"),
    ({"allowAutoTopicCreation": [True]}, 400, None),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "why"), AUTO_TOPIC_CASES)
async def test_auto_topic_creation_validation(
    admin_client: httpx.AsyncClient, body: dict[str, object], status: int, why: str | None
) -> None:
    response = await admin_client.post(f"{NS}/autoTopicCreation", json=body)
    assert response.status_code == status, response.text
    if why is not None and status == 412:
        assert reason(response) == f"Invalid configuration for autoTopicCreationOverride. the detail is {why}"
    elif why is not None:
        assert reason(response) == why
    stored = await admin_client.get(f"{NS}/autoTopicCreation")
    if status == 204:
        assert stored.json()["allowAutoTopicCreation"] == body["allowAutoTopicCreation"]
        assert (await admin_client.get(NS)).json()["autoTopicCreationOverride"] == stored.json()
    else:
        assert stored.status_code == 204


async def test_object_policies_ignore_unknown_fields_and_unknown_modes(
    admin_client: httpx.AsyncClient,
) -> None:
    body = {"inactiveTopicDeleteMode": "delete_eventually", "maxInactiveDurationSeconds": 30,
            "deleteWhileInactive": True, "somethingNew": 1}  # fmt: skip
    assert (await admin_client.post(f"{NS}/inactiveTopicPolicies", json=body)).status_code == 204
    assert (await admin_client.get(f"{NS}/inactiveTopicPolicies")).json() == {
        "inactiveTopicDeleteMode": None,
        "maxInactiveDurationSeconds": 30,
        "deleteWhileInactive": True,
    }
    sub = {"allowAutoSubscriptionCreation": False, "extra": "x"}
    assert (await admin_client.post(f"{NS}/autoSubscriptionCreation", json=sub)).status_code == 204
    policies = (await admin_client.get(NS)).json()
    assert policies["autoSubscriptionCreationOverride"] == {"allowAutoSubscriptionCreation": False}
    assert policies["inactive_topic_policies"]["deleteWhileInactive"] is True
    assert (await admin_client.delete(f"{NS}/autoSubscriptionCreation")).status_code == 204
    assert (await admin_client.get(NS)).json()["autoSubscriptionCreationOverride"] is None


async def test_full_policies_document_names_every_policy(admin_client: httpx.AsyncClient) -> None:
    policies = (await admin_client.get(NS)).json()
    for spec in CATALOGUE:
        assert spec.field in policies, spec.field
        assert policies[spec.field] is None, spec.field


async def test_topic_level_overrides_namespace_overrides_broker(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    url = f"{TOPIC}/maxProducers"
    assert (await admin_client.post(url, json=3)).status_code == 404
    await make_topic(admin_server, "t1")
    assert (await admin_client.get(url)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == 0  # the broker's
    assert (await admin_client.post(f"{NS}/maxProducersPerTopic", json=5)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == 5
    assert (await admin_client.post(url, json=3)).status_code == 204
    assert (await admin_client.get(url)).json() == 3
    assert (await admin_client.get(url, params={"applied": "true"})).json() == 3
    negative = await admin_client.post(url, json=-1)
    assert (negative.status_code, reason(negative)) == (412, "maxProducers must be 0 or more")
    assert (await post_raw(admin_client, url, str(2**63))).status_code == 400
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == 5

    unacked = await admin_client.post(f"{TOPIC}/maxUnackedMessagesOnConsumer", json=-5)
    assert (unacked.status_code, reason(unacked)) == (412, "maxUnackedNum must be 0 or more")
    per_sub = await admin_client.post(f"{TOPIC}/maxConsumersPerSubscription", json=-5)
    assert (per_sub.status_code, reason(per_sub)) == (412, "Invalid value for maxConsumersPerSubscription")
    applied = await admin_client.get(f"{TOPIC}/maxUnackedMessagesOnConsumer", params={"applied": "true"})
    assert applied.json() == 50_000

    persistence = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1}
    assert (await admin_client.post(f"{TOPIC}/persistence", json=persistence)).status_code == 204
    got = (await admin_client.get(f"{TOPIC}/persistence")).json()
    assert (got["bookkeeperEnsemble"], got["bookkeeperWriteQuorum"], got["bookkeeperAckQuorum"]) == (1, 1, 1)
    bad = await admin_client.post(f"{TOPIC}/persistence", json={"bookkeeperEnsemble": 1})
    assert (bad.status_code, reason(bad)) == (
        400,
        "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuorum (2)",
    )


async def test_topic_routes_refuse_partitions_and_namespace_only_policies(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t1-partition-0")
    partition = await admin_client.post(f"{TOPIC}-partition-0/maxProducers", json=1)
    assert (partition.status_code, reason(partition)) == (
        412,
        "Not allowed to set/get topic policy for a partition",
    )
    await make_topic(admin_server, "t1")
    for name in ("subscriptionExpirationTime", "autoTopicCreation"):
        assert (await admin_client.post(f"{TOPIC}/{name}", json=1)).status_code in (404, 405)


async def test_namespace_created_with_policies_checks_them_as_their_routes(
    admin_client: httpx.AsyncClient,
) -> None:
    body = {
        "max_producers_per_topic": 2,
        "persistence": {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1},
        "autoSubscriptionCreationOverride": {"allowAutoSubscriptionCreation": False},
    }
    assert (await admin_client.put("/admin/v2/namespaces/public/made", json=body)).status_code == 204
    policies = (await admin_client.get("/admin/v2/namespaces/public/made")).json()
    assert policies["max_producers_per_topic"] == 2
    assert policies["persistence"]["bookkeeperEnsemble"] == 1
    assert policies["autoSubscriptionCreationOverride"] == {"allowAutoSubscriptionCreation": False}
    refused = await admin_client.put("/admin/v2/namespaces/public/bad", json={"max_consumers_per_topic": -3})
    assert (refused.status_code, reason(refused)) == (412, "maxConsumersPerTopic must be 0 or more")
    wrong = await admin_client.put(
        "/admin/v2/namespaces/public/bad", json={"persistence": {"bookkeeperEnsemble": 9}}
    )
    assert wrong.status_code == 400
    assert (await admin_client.get("/admin/v2/namespaces/public/bad")).status_code == 404


async def test_delayed_delivery_namespace_lifecycle(admin_client: httpx.AsyncClient) -> None:
    url = f"{NS}/delayedDelivery"
    assert (await admin_client.get(url)).status_code == 204
    body = {"active": False, "tickTime": 250, "maxDeliveryDelayInMillis": 60_000}
    assert (await admin_client.post(url, json=body)).status_code == 204
    assert (await admin_client.get(url)).json() == body
    assert (await admin_client.get(NS)).json()["delayed_delivery_policies"] == body
    assert (await admin_client.post(url, json={"active": True})).status_code == 204  # Java's defaults
    assert (await admin_client.get(url)).json() == {
        "active": True,
        "tickTime": 0,
        "maxDeliveryDelayInMillis": 0,
    }
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ('{"active": true, "tickTime": -1}', 412),
        ('{"active": true, "maxDeliveryDelayInMillis": -5}', 412),
        ('{"active": true, "tickTime": 9223372036854775808}', 400),  # 2^63: beyond Java's long
        ('{"active": true, "tickTime": "\u0661\u0662"}', 400),  # Arabic-Indic digits
        ('{"active": true, "tickTime": "1s"}', 400),
        ('{"active": true, "tickTime": true}', 400),
        ('{"active": "maybe"}', 400),
        ('{"active": {"x": 1}}', 400),
        ("[1]", 400),
        ('"\u202eactive"', 400),
    ],
)
async def test_delayed_delivery_hostile_bodies(
    admin_client: httpx.AsyncClient, raw: str, status: int
) -> None:
    response = await post_raw(admin_client, f"{NS}/delayedDelivery", raw)
    assert response.status_code == status, response.text
    if status == 412:
        assert "must be 0 or more" in reason(response)
    assert (await admin_client.get(f"{NS}/delayedDelivery")).status_code == 204


async def test_delayed_delivery_topic_fields_resolve_one_by_one(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t1")
    url = f"{TOPIC}/delayedDelivery"
    applied = {"applied": "true"}
    assert (await admin_client.get(url)).status_code == 204
    broker = {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    assert (await admin_client.get(url, params=applied)).json() == broker
    namespace = {"active": False, "tickTime": 200, "maxDeliveryDelayInMillis": 9000}
    assert (await admin_client.post(f"{NS}/delayedDelivery", json=namespace)).status_code == 204
    assert (await admin_client.get(url, params=applied)).json() == namespace
    own = {"active": True, "tickTime": 50, "maxDeliveryDelayInMillis": 7}
    assert (await admin_client.post(url, json=own)).status_code == 204
    assert (await admin_client.get(url)).json() == own
    assert (await admin_client.get(url, params=applied)).json() == own
    stored = await admin_server.context.policies.get_topic_policies("public/default", "t1")
    assert (
        stored.delayedDeliveryEnabled,
        stored.delayedDeliveryTickTimeMillis,
        stored.delayedDeliveryMaxDelayInMillis,
    ) == (True, 50, 7)
    # one field unset at topic level: that field comes from the namespace, the others stay the topic's
    await admin_server.context.policies.update_topic_policies(
        "public/default", "t1", lambda p: p.model_copy(update={"delayedDeliveryTickTimeMillis": None})
    )
    assert (await admin_client.get(url)).status_code == 204  # no object without active and tickTime
    mixed = {"active": True, "tickTime": 200, "maxDeliveryDelayInMillis": 7}
    assert (await admin_client.get(url, params=applied)).json() == mixed
    negative = await admin_client.post(url, json={"active": True, "tickTime": -1})
    assert negative.status_code == 412
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url, params=applied)).json() == namespace


@pytest.mark.parametrize(
    ("raw", "stored"),
    [("true", True), ("false", False), ('"true"', True), ('" false "', False)],
)
async def test_deduplication_switch(admin_client: httpx.AsyncClient, raw: str, stored: bool) -> None:
    url = f"{NS}/deduplication"
    assert (await admin_client.get(url)).status_code == 204
    assert (await post_raw(admin_client, url, raw)).status_code == 204
    assert (await admin_client.get(url)).json() is stored
    assert (await admin_client.get(NS)).json()["deduplicationEnabled"] is stored
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204


@pytest.mark.parametrize(
    "raw",
    ["1", "0", '"yes"', '"TRUE"', '"\u202etrue"', '"tr\u0000ue"', "null", "[true]", '{"enabled": true}',
     str(2**63), ""],
)  # fmt: skip
async def test_deduplication_switch_hostile_bodies(admin_client: httpx.AsyncClient, raw: str) -> None:
    response = await post_raw(admin_client, f"{NS}/deduplication", raw)
    assert response.status_code == 400, response.text
    assert (await admin_client.get(f"{NS}/deduplication")).status_code == 204


async def test_topic_deduplication_policies(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t1")
    enabled = f"{TOPIC}/deduplicationEnabled"
    assert (await admin_client.get(enabled, params={"applied": "true"})).json() is False  # the broker's
    assert (await admin_client.post(f"{NS}/deduplication", json=True)).status_code == 204
    assert (await admin_client.get(enabled, params={"applied": "true"})).json() is True
    assert (await admin_client.post(enabled, json=False)).status_code == 204
    assert (await admin_client.get(enabled)).json() is False
    assert (await admin_client.get(enabled, params={"applied": "true"})).json() is False
    assert (await post_raw(admin_client, enabled, "2")).status_code == 400

    interval = f"{TOPIC}/deduplicationSnapshotInterval"
    assert (await admin_client.get(interval, params={"applied": "true"})).json() == 120
    negative = await admin_client.post(interval, json=-1)
    assert (negative.status_code, reason(negative)) == (412, "interval must be 0 or more")
    assert (await post_raw(admin_client, interval, str(2**63))).status_code == 400
    assert (await post_raw(admin_client, interval, '"\u0661"')).status_code == 400
    assert (await admin_client.post(interval, json=30)).status_code == 204
    assert (await admin_client.get(interval)).json() == 30
    assert (await admin_client.delete(interval)).status_code == 204
    assert (await admin_client.get(interval)).status_code == 204
