"""Numbers and names read strictly, against a real broker with authentication on.

Numbers in admin paths, queries and bodies are read as Java reads a ``long`` (``skip/1_0`` used to skip 10,
Arabic-Indic digits and surrounding spaces were numbers, 2^63 was taken): anything else is a 400 naming the
parameter and the value. A name a client gives - consumer, producer, reader, subscription, topic, role -
holding a control or bidirectional formatting character is refused, naming the character as U+XXXX: a 400 on
the WebSocket upgrade; on the admin API a name in the path keeps Pulsar's status for an invalid name (412).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.auth import TokenKeys
from fixtures.broker import Broker, Cluster

from magnetar.broker.policies.store import Policies, TenantInfo
from magnetar.broker.security.authorization import AuthAction
from magnetar.broker.wire.topic_name import NamespaceName

NS = "acme/ns"
TOPIC = f"persistent/{NS}/orders"
SUB = f"/admin/v2/{TOPIC}/subscription/sub"


@pytest.fixture
def secure_broker(cluster: Cluster, token_keys: TokenKeys) -> Broker:
    broker = cluster.start_broker(
        extras=admin_extras,
        authentication_enabled=True,
        token_secret_key=token_keys.secret_setting,
        super_user_roles="root",
    )
    service = broker.service

    async def setup() -> None:
        await service.policies.create_tenant("acme", TenantInfo(adminRoles=["acme-admin"]))
        await service.policies.create_namespace(NS, Policies())
        await service.security.authorization.grant_namespace_permission(
            NamespaceName("acme", "ns"), "consumer-role", [AuthAction.CONSUME, AuthAction.PRODUCE]
        )

    broker.call(setup)
    return broker


def admin(broker: Broker, token_keys: TokenKeys, method: str, path: str, **options: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token_keys.token('root')}"}
    with httpx.Client(timeout=10) as client:
        return client.request(method, broker.http_url + path, headers=headers, **options)


def refusal(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    reason: str = response.json()["reason"]
    return reason


def upgrade_refusal(url: str, token: str) -> tuple[int, str]:
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(url, timeout=10, header=[f"Authorization: Bearer {token}"])
    return caught.value.status_code, (caught.value.resp_body or b"").decode()


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        ("1_0", "1_0"),
        ("%D9%A1%D9%A0", "\\u0661\\u0660"),  # Arabic-Indic 10, shown escaped
        ("%EF%BC%91%EF%BC%90", "\\uff11\\uff10"),  # fullwidth 10
        ("%2010", " 10"),
        ("10%20", "10 "),
        ("9223372036854775808", "9223372036854775808"),  # 2^63
        ("0x10", "0x10"),
    ],
)
def test_admin_path_numbers_are_java_longs(
    secure_broker: Broker, token_keys: TokenKeys, count: str, shown: str
) -> None:
    assert admin(secure_broker, token_keys, "PUT", f"/admin/v2/{TOPIC}").status_code == 204
    assert admin(secure_broker, token_keys, "PUT", SUB).status_code == 204
    reason = refusal(admin(secure_broker, token_keys, "POST", f"{SUB}/skip/{count}"))
    assert reason.startswith(f'Invalid count "{shown}"'), reason
    assert admin(secure_broker, token_keys, "POST", f"{SUB}/skip/10").status_code == 204


def test_admin_query_and_body_numbers_are_java_longs(secure_broker: Broker, token_keys: TokenKeys) -> None:
    assert admin(secure_broker, token_keys, "PUT", f"/admin/v2/{TOPIC}").status_code == 204
    reason = refusal(
        admin(secure_broker, token_keys, "GET", f"/admin/v2/{TOPIC}/examinemessage?messagePosition=1_0")
    )
    assert reason.startswith("Invalid query parameter 'messagePosition': Invalid messagePosition \"1_0\"")
    reason = refusal(
        admin(secure_broker, token_keys, "GET", f"/admin/v2/{TOPIC}/ledger/9223372036854775808/entry/0")
    )
    assert reason.startswith('Invalid ledger "9223372036854775808": out of the range of a 64-bit integer')
    retention = f"/admin/v2/namespaces/{NS}/retention"
    for body, expected in [
        ({"retentionTimeInMinutes": "1_0"}, 'retentionTimeInMinutes: Invalid retentionTimeInMinutes "1_0"'),
        ({"retentionTimeInMinutes": 2**31}, "retentionTimeInMinutes: Input should be less than or equal to"),
        ({"retentionSizeInMB": 2**63}, "(got 9223372036854775808)"),
        ({"retentionSizeInMB": True}, "retentionSizeInMB: Invalid retentionSizeInMB true"),
    ]:
        reason = refusal(admin(secure_broker, token_keys, "POST", retention, json=body))
        assert expected in reason, reason
    ttl = refusal(
        admin(secure_broker, token_keys, "POST", f"/admin/v2/namespaces/{NS}/messageTTL", json="\u0661\u0660")
    )
    assert 'Invalid number "\\u0661\\u0660"' in ttl


def test_client_names_with_control_or_bidi_characters_are_refused(
    secure_broker: Broker, token_keys: TokenKeys
) -> None:
    token = token_keys.token("consumer-role")
    ws = secure_broker.ws_url
    for name, char in [("a%00b", "U+0000"), ("a%0Ab", "U+000A"), ("evil%E2%80%AEgnp", "U+202E")]:
        status, body = upgrade_refusal(f"{ws}/ws/v2/consumer/{TOPIC}/sub?consumerName={name}", token)
        assert status == 400
        assert "Invalid consumer name" in body
        assert char in body
        status, body = upgrade_refusal(f"{ws}/ws/v2/producer/{TOPIC}?producerName={name}", token)
        assert status == 400
        assert char in body
    status, body = upgrade_refusal(f"{ws}/ws/v2/consumer/{TOPIC}/x%E2%80%AEy", token)
    assert status == 400
    assert "Invalid subscription name" in body
    assert "the bidirectional formatting character U+202E" in body
    status, body = upgrade_refusal(f"{ws}/ws/v2/producer/persistent/{NS}/o%E2%81%A6x", token)
    assert status == 400
    assert "Invalid topic name" in body
    assert "U+2066" in body
    assert admin(secure_broker, token_keys, "PUT", f"/admin/v2/{TOPIC}").status_code == 204
    # the admin API: Pulsar's status for an invalid name in the path, the character named
    reason = refusal(
        admin(secure_broker, token_keys, "PUT", f"/admin/v2/{TOPIC}/subscription/x%E2%80%AEy"), 412
    )
    assert "U+202E" in reason
    reason = refusal(
        admin(
            secure_broker,
            token_keys,
            "POST",
            f"/admin/v2/namespaces/{NS}/permissions/r%E2%80%8Fx",
            json=["consume"],
        ),
        412,
    )
    assert "role" in reason
    assert "U+200F" in reason
    tenant = {"adminRoles": ["a\u202eb"], "allowedClusters": ["standalone"]}
    reason = refusal(admin(secure_broker, token_keys, "PUT", "/admin/v2/tenants/spoof", json=tenant), 412)
    assert 'Invalid role name "a\\u202eb": it holds the bidirectional formatting character U+202E' in reason
    # the names without those characters still work
    consumer = websocket.create_connection(
        f"{ws}/ws/v2/consumer/{TOPIC}/sub?consumerName=plain-name", timeout=10,
        header=[f"Authorization: Bearer {token}"],
    )  # fmt: skip
    consumer.close()
