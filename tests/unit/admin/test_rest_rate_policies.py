"""The rate policies over HTTP (``publishRate``, ``dispatchRate``, ``subscriptionDispatchRate``,
``subscribeRate`` and one subscription's ``dispatchRate``): Pulsar's bodies and defaults, normalisation (a
rate that limits nothing is no rate), the topic's null POST, precedence, and hostile bodies."""

from __future__ import annotations

import json

import httpx
import pytest
from fixtures.admin import AdminServer

from magnetar.broker.policies.catalogue import CATALOGUE, PolicySpec

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/t1"
RATES = [s for s in CATALOGUE if s.kind in ("publish_rate", "dispatch_rate", "subscribe_rate")]
BODIES = {
    "publish_rate": {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1024},
    "dispatch_rate": {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": 2048,
                      "relativeToPublishRate": True, "ratePeriodInSecond": 2},
    "subscribe_rate": {"subscribeThrottlingRatePerConsumer": 3, "ratePeriodInSecond": 60},
}  # fmt: skip
FIRST_FIELD = {kind: next(iter(body)) for kind, body in BODIES.items()}


async def make_topic(server: AdminServer, local: str) -> None:
    from magnetar.managed_ledger.info import ManagedLedgerInfo
    from magnetar.managed_ledger.meta_store import ledger_path

    await server.metadata.put(
        ledger_path(f"public/default/persistent/{local}"), ManagedLedgerInfo().encode(), -1
    )


async def post_raw(client: httpx.AsyncClient, url: str, raw: str) -> httpx.Response:
    return await client.post(url, content=raw.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("spec", RATES, ids=lambda s: s.ns_path)
async def test_namespace_rate_lifecycle(admin_client: httpx.AsyncClient, spec: PolicySpec) -> None:
    url = f"{NS}/{spec.ns_path}"
    assert (await admin_client.get(url)).status_code == 204
    body = BODIES[spec.kind]
    assert (await admin_client.post(url, json=body)).status_code == 204
    assert (await admin_client.get(url)).json() == body
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204
    missing = await admin_client.post(f"/admin/v2/namespaces/public/nope/{spec.ns_path}", json=body)
    assert missing.status_code == 404


async def test_absent_fields_take_the_java_constructors_values(admin_client: httpx.AsyncClient) -> None:
    assert (await admin_client.post(f"{NS}/publishRate", json={})).status_code == 204
    assert (await admin_client.get(f"{NS}/publishRate")).json() == {
        "publishThrottlingRateInMsg": -1,
        "publishThrottlingRateInByte": -1,
    }
    assert (await admin_client.post(f"{NS}/dispatchRate", json={"somethingNew": 1})).status_code == 204
    assert (await admin_client.get(f"{NS}/dispatchRate")).json() == {
        "dispatchThrottlingRateInMsg": 0,
        "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 0,
    }
    assert (await admin_client.post(f"{NS}/subscribeRate", json={})).status_code == 204
    got = (await admin_client.get(f"{NS}/subscribeRate")).json()
    assert got == {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}


HOSTILE = [
    "2147483648",  # a bare number is no object
    '"fast"',
    "[1]",
    "true",
    "",
    '{"%s": "ten"}',
    '{"%s": 9223372036854775808}',  # 2^63: beyond Java's long
    '{"%s": -9223372036854775809}',
    '{"%s": "\u0661\u0662"}',  # Arabic-Indic digits are no Java number
    '{"%s": "1\u202e2"}',  # a bidi control inside digits
    '{"%s": true}',
    '{"%s": 1.5}',
    '{"%s": [1]}',
    '{"%s": {"x": 1}}',
    '{"%s": ' + "9" * 5000 + "}",
]


@pytest.mark.parametrize("spec", RATES, ids=lambda s: s.ns_path)
@pytest.mark.parametrize("raw", HOSTILE)
async def test_hostile_rate_bodies_are_400_and_change_nothing(
    admin_client: httpx.AsyncClient, spec: PolicySpec, raw: str
) -> None:
    url = f"{NS}/{spec.ns_path}"
    text = raw.replace("%s", FIRST_FIELD[spec.kind])
    response = await post_raw(admin_client, url, text)
    assert response.status_code == 400, response.text
    assert "reason" in response.json()
    assert (await admin_client.get(url)).status_code == 204


async def test_int_fields_beyond_java_int_are_400_long_fields_take_2_63_minus_1(
    admin_client: httpx.AsyncClient,
) -> None:
    url = f"{NS}/publishRate"
    assert (await admin_client.post(url, json={"publishThrottlingRateInMsg": 2**31})).status_code == 400
    big = {"publishThrottlingRateInMsg": 2**31 - 1, "publishThrottlingRateInByte": 2**63 - 1}
    assert (await admin_client.post(url, json=big)).status_code == 204
    assert (await admin_client.get(url)).json() == big
    assert (await post_raw(admin_client, url, "null")).status_code == 400  # a namespace rate needs a body


async def test_topic_rate_normalised_precedence_and_null_post(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t1")
    url = f"{TOPIC}/publishRate"
    applied = {"applied": "true"}
    assert (await admin_client.get(url, params=applied)).content in (b"", b"null")  # the broker: no limit
    namespace_rate = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    assert (await admin_client.post(f"{NS}/publishRate", json=namespace_rate)).status_code == 204
    assert (await admin_client.get(url, params=applied)).json() == namespace_rate
    # a topic rate limiting nothing is stored as given but cannot lift the namespace's (Pulsar's normalize)
    off = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 0}
    assert (await admin_client.post(url, json=off)).status_code == 204
    assert (await admin_client.get(url)).json() == off
    assert (await admin_client.get(url, params=applied)).json() == namespace_rate
    own = {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": 0}
    assert (await admin_client.post(url, json=own)).status_code == 204
    assert (await admin_client.get(url, params=applied)).json() == own
    assert (await post_raw(admin_client, url, "")).status_code == 204  # no rate: ignored, as Pulsar
    assert (await admin_client.get(url)).json() == own
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204
    # a subscribe rate needs a period too
    zero_period = {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 0}
    assert (await admin_client.post(f"{TOPIC}/subscribeRate", json=zero_period)).status_code == 204
    got = await admin_client.get(f"{TOPIC}/subscribeRate", params=applied)
    assert got.content in (b"", b"null")


async def test_subscription_own_dispatch_rate(
    admin_server: AdminServer, admin_client: httpx.AsyncClient
) -> None:
    await make_topic(admin_server, "t1")
    url = f"{TOPIC}/sub1/dispatchRate"
    assert (await admin_client.get(url)).status_code == 204
    topic_wide = {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 0,
                  "relativeToPublishRate": False, "ratePeriodInSecond": 1}  # fmt: skip
    assert (await admin_client.post(f"{TOPIC}/subscriptionDispatchRate", json=topic_wide)).status_code == 204
    assert (await admin_client.get(url, params={"applied": "true"})).json() == topic_wide
    own = {**topic_wide, "dispatchThrottlingRateInMsg": 7}
    assert (await admin_client.post(url, json=own)).status_code == 204
    assert (await admin_client.get(url)).json() == own
    assert (await admin_client.get(url, params={"applied": "true"})).json() == own
    # a rate limiting nothing is ignored, as Pulsar does
    assert (await admin_client.post(url, json={"dispatchThrottlingRateInMsg": -1})).status_code == 204
    assert (await admin_client.get(url)).json() == own
    assert (
        await post_raw(admin_client, url, '{"dispatchThrottlingRateInByte": 9223372036854775808}')
    ).status_code == 400
    assert (await admin_client.delete(url)).status_code == 204
    assert (await admin_client.get(url)).status_code == 204
    bad_name = await admin_client.post(f"{TOPIC}/%E2%80%AEsub/dispatchRate", json=own)
    assert bad_name.status_code == 412, bad_name.text
    assert (
        await admin_client.get("/admin/v2/persistent/public/default/none/sub1/dispatchRate")
    ).status_code == 404


async def test_full_policies_document_has_the_rates(admin_client: httpx.AsyncClient) -> None:
    body = BODIES["dispatch_rate"]
    assert (await admin_client.post(f"{NS}/subscriptionDispatchRate", json=body)).status_code == 204
    policies = (await admin_client.get(NS)).json()
    assert policies["subscription_dispatch_rate"] == body
    assert json.dumps(policies)  # serialisable as a whole
