"""``POST .../all_subscription/expireMessages/{seconds}`` with authentication on: it needs ``consume`` on
every subscription it touches, or a tenant admin.

The audit emptied a subscription restricted to another role (``permissionOnSubscription``) through this route,
while the per-subscription route refused the same role. Pulsar has the same gap; Magnetar checks every
subscription before moving any cursor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.auth import TokenKeys
from fixtures.broker import Cluster, publish

ROOT, TENANT_ADMIN, APP, BILLING = "root", "acme-admin", "app", "billing-role"
TOPIC = "/admin/v2/persistent/acme/ns/orders"
MESSAGES = 5


class Admin:
    def __init__(self, url: str, keys: TokenKeys) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.keys = keys

    def call(self, method: str, url: str, role: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys.token(role)}"}
        return self.http.request(method, url, headers=headers, **kwargs)

    def ok(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = self.call(method, url, ROOT, **kwargs)
        assert response.status_code < 300, (method, url, response.status_code, response.text)
        return response

    def backlogs(self) -> dict[str, int]:
        subscriptions = self.ok("GET", f"{TOPIC}/stats").json()["subscriptions"]
        return {name: stats["msgBacklog"] for name, stats in sorted(subscriptions.items())}


@pytest.fixture
def admin(cluster: Cluster, token_keys: TokenKeys) -> Iterator[Admin]:
    broker = cluster.start_broker(
        extras=admin_extras,
        authentication_enabled=True,
        token_secret_key=token_keys.secret_setting,
        super_user_roles=ROOT,
    )
    admin = Admin(broker.http_url, token_keys)
    admin.ok(
        "PUT",
        "/admin/v2/tenants/acme",
        json={"adminRoles": [TENANT_ADMIN], "allowedClusters": ["standalone"]},
    )
    admin.ok("PUT", "/admin/v2/namespaces/acme/ns")
    for role in (APP, BILLING):
        admin.ok("POST", f"/admin/v2/namespaces/acme/ns/permissions/{role}", json=["produce", "consume"])
    admin.ok("POST", "/admin/v2/namespaces/acme/ns/permissionOnSubscription/billing", json=[BILLING])
    admin.ok("PUT", TOPIC)
    for subscription in ("billing", "app-sub"):
        admin.ok("PUT", f"{TOPIC}/subscription/{subscription}", json="earliest")
    producer = websocket.create_connection(
        f"{broker.ws_url}/ws/v2/producer/persistent/acme/ns/orders",
        timeout=10,
        header=[f"Authorization: Bearer {token_keys.token(APP)}"],
    )
    try:
        for i in range(MESSAGES):
            assert publish(producer, f"m{i}")["result"] == "ok"
    finally:
        producer.close()
    try:
        yield admin
    finally:
        admin.http.close()


def test_a_role_may_not_expire_a_subscription_it_may_not_consume(admin: Admin) -> None:
    assert admin.backlogs() == {"app-sub": MESSAGES, "billing": MESSAGES}
    per_subscription = admin.call("POST", f"{TOPIC}/subscription/billing/expireMessages/0", APP)
    assert per_subscription.status_code == 403
    refused = admin.call("POST", f"{TOPIC}/all_subscription/expireMessages/0", APP)
    assert refused.status_code == 403
    assert refused.json()["reason"] == (
        "Role 'app' is not authorized to expire_messages on topic persistent://acme/ns/orders "
        "with subscription 'billing'"
    )
    # All or nothing: not even the subscription the role may consume moved.
    assert admin.backlogs() == {"app-sub": MESSAGES, "billing": MESSAGES}


def test_a_role_that_may_consume_every_subscription_or_a_tenant_admin_may(admin: Admin) -> None:
    assert admin.call("POST", f"{TOPIC}/all_subscription/expireMessages/3600", BILLING).status_code == 204
    assert admin.backlogs() == {"app-sub": MESSAGES, "billing": MESSAGES}  # nothing is an hour old
    assert admin.call("POST", f"{TOPIC}/all_subscription/expireMessages/0", BILLING).status_code == 204
    assert admin.backlogs() == {"app-sub": 0, "billing": 0}


def test_a_tenant_admin_may_expire_every_subscription(admin: Admin) -> None:
    assert admin.call("POST", f"{TOPIC}/all_subscription/expireMessages/0", TENANT_ADMIN).status_code == 204
    assert admin.backlogs() == {"app-sub": 0, "billing": 0}
