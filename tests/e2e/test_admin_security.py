"""The admin API's security matrix on a real broker with authentication on: every admin route, called with
no token, an expired token, a token of a role without the permission and a token of the right role, answers
401 / 401 / 403 / success. Plus tenant isolation (a role with every permission on one tenant reads nothing
of another), the permission routes' Pulsar shapes, and the admin rate limit.

The routes come from the admin layer's own list (``admin_endpoints``), so a route added later without a case
here fails :func:`test_every_admin_route_is_in_the_matrix`.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket
from fixtures.admin import admin_extras
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.broker import Broker, Cluster, publish

from magnetar.admin.cli.admin_client import admin_main
from magnetar.admin.rest import OPENAPI_PATH, admin_endpoints
from magnetar.admin.rest.access import Kind, rule_for
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.broker.policies import CATALOGUE
from magnetar.broker.security.authorization import NamespaceOperation, TopicOperation

ROOT, ADMIN, CONSUMER, PRODUCER, OTHER = "root", "acme-admin", "consumer-role", "producer-role", "other-role"
NS = "/admin/v2/namespaces/{tenant}/{namespace}"
T = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
SUB = T + "/subscription/{subscription}"
RETENTION = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
QUOTA = {"limitSize": 1024 * 1024, "limitTime": -1, "policy": "producer_request_hold"}
TENANT = {"adminRoles": ["someone"], "allowedClusters": ["standalone"]}
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
STRING_SCHEMA = {"type": "STRING", "schema": "", "properties": {}}


@dataclass
class Case:
    """One route: path parameters and body of a request that succeeds for the right role."""

    params: dict[str, str] = field(default_factory=dict)
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    expect: int = 200
    """What the right role gets (200: any 2xx): a route that always refuses (compaction) still checks
    authorization first."""


# (method, path) -> the request; parameters not given default to DEFAULTS.
CASES: dict[tuple[str, str], Case] = {
    ("GET", OPENAPI_PATH): Case(),
    ("GET", "/admin/v2/clusters"): Case(),
    ("GET", "/admin/v2/clusters/{cluster}"): Case(),
    ("PUT", "/admin/v2/clusters/{cluster}"): Case({"cluster": "new-cluster"}, {"serviceUrl": "http://h:1"}),
    ("POST", "/admin/v2/clusters/{cluster}"): Case(body={"serviceUrl": "http://h:2"}),
    ("GET", "/admin/v2/brokers/health"): Case(),
    ("GET", "/admin/v2/brokers"): Case(),
    ("GET", "/admin/v2/brokers/{cluster}"): Case(),
    ("GET", "/admin/v2/brokers/version"): Case(),
    ("GET", "/admin/v2/brokers/ready"): Case(),
    ("GET", "/admin/v2/brokers/leaderBroker"): Case(),
    ("GET", "/admin/v2/brokers/configuration"): Case(),
    ("GET", "/admin/v2/brokers/configuration/values"): Case(),
    ("GET", "/admin/v2/brokers/configuration/runtime"): Case(),
    ("POST", "/admin/v2/brokers/configuration/{name}/{value}"): Case(
        {"name": "maxProducersPerTopic", "value": "1"}, expect=412
    ),
    ("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces"): Case(),
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}"): Case(),
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/partitioned"): Case(),
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{bundle}"): Case(
        {"bundle": "0x00000000_0xffffffff"}
    ),
    # a non-persistent topic exists while loaded: none is, so the right role gets 404 past authorization
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/stats"): Case(expect=404),
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/internalStats"): Case(expect=404),
    ("DELETE", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}"): Case(expect=404),
    ("GET", f"{T}/properties"): Case(),
    ("PUT", f"{T}/properties"): Case(body={"owner": "acme"}),
    ("DELETE", f"{T}/properties"): Case(query={"key": "owner"}),
    ("PUT", f"{T}/compaction"): Case(expect=405),
    ("GET", f"{T}/compaction"): Case(),
    ("POST", f"{SUB}/expireMessages"): Case(body={"ledgerId": -1, "entryId": -1, "excluded": False}),
    ("GET", "/admin/v2/tenants"): Case(),
    ("GET", "/admin/v2/tenants/{tenant}"): Case(),
    ("PUT", "/admin/v2/tenants/{tenant}"): Case({"tenant": "new-tenant"}, TENANT),
    ("POST", "/admin/v2/tenants/{tenant}"): Case(
        body={"adminRoles": [ADMIN], "allowedClusters": ["standalone"]}
    ),
    ("DELETE", "/admin/v2/tenants/{tenant}"): Case({"tenant": "doomed-tenant"}),
    ("GET", "/admin/v2/namespaces/{tenant}"): Case(),
    ("PUT", NS): Case({"namespace": "new-ns"}),
    ("GET", NS): Case(),
    ("DELETE", NS): Case({"namespace": "doomed-ns"}),
    ("GET", f"{NS}/topics"): Case(),
    ("GET", f"{NS}/bundles"): Case(),
    ("GET", f"{NS}/retention"): Case(),
    ("POST", f"{NS}/retention"): Case(body=RETENTION),
    ("DELETE", f"{NS}/retention"): Case({"namespace": "policies-ns"}),
    ("GET", f"{NS}/messageTTL"): Case(),
    ("POST", f"{NS}/messageTTL"): Case(body=60),
    ("DELETE", f"{NS}/messageTTL"): Case(),
    ("GET", f"{NS}/backlogQuotaMap"): Case(),
    ("POST", f"{NS}/backlogQuota"): Case(body=QUOTA),
    ("DELETE", f"{NS}/backlogQuota"): Case(),
    ("GET", f"{NS}/permissions"): Case(),
    ("POST", f"{NS}/permissions/{{role}}"): Case(body=["produce"]),
    ("DELETE", f"{NS}/permissions/{{role}}"): Case(),
    ("POST", f"{NS}/permissionOnSubscription/{{subscription}}"): Case(body=["matrix-role"]),
    ("DELETE", f"{NS}/permissionOnSubscription/{{subscription}}/{{role}}"): Case(),
    ("GET", f"{T}/permissions"): Case(),
    ("POST", f"{T}/permissions/{{role}}"): Case(body=["consume"]),
    ("DELETE", f"{T}/permissions/{{role}}"): Case(),
    ("GET", "/admin/v2/persistent/{tenant}/{namespace}"): Case(),
    ("GET", "/admin/v2/persistent/{tenant}/{namespace}/partitioned"): Case(),
    ("PUT", f"{T}/partitions"): Case({"topic": "new-parts"}, 2),
    ("GET", f"{T}/partitions"): Case({"topic": "parts"}),
    ("POST", f"{T}/partitions"): Case({"topic": "parts"}, 3),
    ("DELETE", f"{T}/partitions"): Case({"topic": "doomed-parts"}),
    ("GET", f"{T}/retention"): Case(),
    ("POST", f"{T}/retention"): Case(body=RETENTION),
    ("DELETE", f"{T}/retention"): Case(),
    ("GET", f"{T}/messageTTL"): Case(),
    ("POST", f"{T}/messageTTL"): Case(query={"messageTTL": "60"}),
    ("DELETE", f"{T}/messageTTL"): Case(),
    ("GET", f"{T}/backlogQuotaMap"): Case(),
    ("POST", f"{T}/backlogQuota"): Case(body=QUOTA),
    ("DELETE", f"{T}/backlogQuota"): Case(),
    ("PUT", T): Case({"topic": "new-topic"}),
    ("DELETE", T): Case({"topic": "doomed-topic"}),
    ("PUT", f"{T}/unload"): Case(),
    ("POST", f"{T}/terminate"): Case({"topic": "terminated-topic"}),
    ("DELETE", f"{T}/truncate"): Case(),
    ("GET", f"{T}/stats"): Case(),
    ("GET", f"{T}/internalStats"): Case(),
    ("GET", f"{T}/partitioned-stats"): Case({"topic": "parts"}),
    ("GET", f"{T}/partitioned-internalStats"): Case({"topic": "parts"}),
    ("GET", f"{T}/lastMessageId"): Case(),
    ("GET", f"{T}/subscriptions"): Case(),
    ("GET", f"{T}/ledger/{{ledger}}/entry/{{entry}}"): Case(),
    ("GET", f"{T}/examinemessage"): Case(query={"initialPosition": "earliest"}),
    ("GET", f"{T}/messageid/{{timestamp}}"): Case(),
    ("PUT", SUB): Case({"subscription": "new-sub"}, "earliest"),
    ("DELETE", SUB): Case({"subscription": "doomed-sub"}),
    ("POST", f"{SUB}/skip/{{count}}"): Case(),
    ("POST", f"{SUB}/skip_all"): Case(),
    ("POST", f"{SUB}/expireMessages/{{seconds}}"): Case(),
    ("POST", f"{T}/all_subscription/expireMessages/{{seconds}}"): Case(),
    ("POST", f"{SUB}/resetcursor/{{timestamp}}"): Case(),
    ("POST", f"{SUB}/resetcursor"): Case(body={"ledgerId": -1, "entryId": -1}),
    ("GET", f"{SUB}/position/{{n}}"): Case(),
    ("GET", f"{T}/entries"): Case(),
    ("GET", f"{SCHEMA}/schema"): Case(),
    ("GET", f"{SCHEMA}/schema/{{version}}"): Case({"version": "0"}),
    ("GET", f"{SCHEMA}/schemas"): Case(),
    ("POST", f"{SCHEMA}/schema"): Case(body=STRING_SCHEMA),
    ("DELETE", f"{SCHEMA}/schema"): Case({"topic": "doomed-topic"}),
    ("POST", f"{SCHEMA}/compatibility"): Case(body=STRING_SCHEMA),
    ("POST", f"{SCHEMA}/version"): Case(body=STRING_SCHEMA),
}

# The namespace and topic limit policies: their routes come from one table (the policy catalogue), and so do
# their cases here, each with a body that policy accepts.
POLICY_BODIES: dict[str, Any] = {
    "int": 5,
    "bool": True,
    "persistence": {
        "bookkeeperEnsemble": 1,
        "bookkeeperWriteQuorum": 1,
        "bookkeeperAckQuorum": 1,
        "managedLedgerMaxMarkDeleteRate": 1.0,
    },
    "inactive": {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 600,
        "deleteWhileInactive": False,
    },
    "auto_topic": {"allowAutoTopicCreation": True, "topicType": "non-partitioned"},
    "auto_subscription": {"allowAutoSubscriptionCreation": True},
    "delayed": {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0},
    "publish_rate": {"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1},
    "dispatch_rate": {"dispatchThrottlingRateInMsg": 1000, "ratePeriodInSecond": 1},
    "subscribe_rate": {"subscribeThrottlingRatePerConsumer": 100, "ratePeriodInSecond": 30},
}
for _spec in CATALOGUE:
    for _base, _segment in ((NS, _spec.ns_path), (T, _spec.topic_path)):
        if _segment is None:
            continue
        CASES[("GET", f"{_base}/{_segment}")] = Case()
        CASES[("POST", f"{_base}/{_segment}")] = Case(body=POLICY_BODIES[_spec.kind])
        CASES[("DELETE", f"{_base}/{_segment}")] = Case()
CASES[("GET", f"{T}/{{subscription}}/dispatchRate")] = Case()
CASES[("POST", f"{T}/{{subscription}}/dispatchRate")] = Case(body=POLICY_BODIES["dispatch_rate"])
CASES[("DELETE", f"{T}/{{subscription}}/dispatchRate")] = Case()
DEFAULTS = {
    "cluster": "standalone",
    "tenant": "acme",
    "namespace": "ns",
    "topic": "orders",
    "subscription": "sub",
    "role": "matrix-role",
    "count": "1",
    "seconds": "1",
    "timestamp": "0",
    "n": "1",
}


def secure_settings(token_keys: TokenKeys, **more: Any) -> dict[str, Any]:
    return {
        "authentication_enabled": True,
        "token_secret_key": token_keys.secret_setting,
        "super_user_roles": ROOT,
        **more,
    }


LOOKUP_OPERATIONS = {
    NamespaceOperation.GET_TOPICS,
    NamespaceOperation.GET_BUNDLE,
    TopicOperation.GET_STATS,
    TopicOperation.GET_METADATA,
    TopicOperation.LOOKUP,
}
CONSUME_OPERATIONS = {
    TopicOperation.SUBSCRIBE,
    TopicOperation.UNSUBSCRIBE,
    TopicOperation.GET_SUBSCRIPTIONS,
    TopicOperation.SKIP,
    TopicOperation.EXPIRE_MESSAGES,
    TopicOperation.PEEK_MESSAGES,
    TopicOperation.RESET_CURSOR,
}


def roles_for(method: str, path: str) -> tuple[str | None, list[str]]:
    """The role that may call the route, and the roles that may not (a role of another tenant always; a
    role of the same tenant without the needed grant when there is one)."""
    access = rule_for(method, path)
    if access.kind is Kind.OPEN:
        return None, []
    if access.kind is Kind.AUTHENTICATED:
        return OTHER, []
    if access.kind is Kind.SUPERUSER:
        return ROOT, [OTHER, ADMIN]
    operation = access.namespace_operation or access.topic_operation
    if operation in LOOKUP_OPERATIONS:
        return CONSUMER, [OTHER]
    if operation in CONSUME_OPERATIONS:
        return CONSUMER, [OTHER, PRODUCER]
    return ADMIN, [OTHER, CONSUMER]


class Admin:
    def __init__(self, broker: Broker, token_keys: TokenKeys) -> None:
        self.broker = broker
        self.keys = token_keys
        self.http = httpx.Client(base_url=broker.http_url, timeout=30)

    def call(
        self, method: str, url: str, role: str | None, *, expired: bool = False, **kwargs: Any
    ) -> httpx.Response:
        headers = {}
        if role is not None:
            token = self.keys.token(role, expires_in_s=60) if expired else self.keys.token(role)
            headers["Authorization"] = f"Bearer {token}"
        return self.http.request(method, url, headers=headers, **kwargs)

    def ok(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = self.call(method, url, ROOT, **kwargs)
        assert response.status_code < 300, (method, url, response.status_code, response.text)
        return response


def set_up(admin: Admin) -> dict[str, str]:
    for tenant, admin_role in (("acme", ADMIN), ("other", "other-admin"), ("doomed-tenant", ADMIN)):
        admin.ok(
            "PUT",
            f"/admin/v2/tenants/{tenant}",
            json={"adminRoles": [admin_role], "allowedClusters": ["standalone"]},
        )
    for namespace in ("acme/ns", "acme/doomed-ns", "acme/policies-ns", "other/ns"):
        admin.ok("PUT", f"/admin/v2/namespaces/{namespace}")
    admin.ok("POST", "/admin/v2/namespaces/acme/policies-ns/retention", json=RETENTION)
    admin.ok("POST", f"/admin/v2/namespaces/acme/ns/permissions/{CONSUMER}", json=["consume"])
    admin.ok("POST", f"/admin/v2/namespaces/acme/ns/permissions/{PRODUCER}", json=["produce"])
    admin.ok(
        "POST", f"/admin/v2/namespaces/other/ns/permissions/{OTHER}", json=["produce", "consume", "functions"]
    )
    admin.ok("POST", "/admin/v2/namespaces/acme/ns/permissions/matrix-role", json=["consume"])
    admin.ok(
        "POST",
        "/admin/v2/namespaces/acme/ns/permissionOnSubscription/sub",
        json=[CONSUMER, ADMIN, "matrix-role"],
    )
    for topic in ("orders", "doomed-topic", "terminated-topic"):
        admin.ok("PUT", f"/admin/v2/persistent/acme/ns/{topic}")
    for topic in ("parts", "doomed-parts"):
        admin.ok("PUT", f"/admin/v2/persistent/acme/ns/{topic}/partitions", json=2)
    admin.ok("PUT", "/admin/v2/persistent/acme/ns/parts-partition-0")  # its partitions have internal stats
    for subscription in ("sub", "doomed-sub"):
        admin.ok("PUT", f"/admin/v2/persistent/acme/ns/orders/subscription/{subscription}", json="earliest")
    admin.ok("POST", "/admin/v2/persistent/acme/ns/orders/permissions/matrix-role", json=["consume"])
    admin.ok("POST", "/admin/v2/schemas/acme/ns/orders/schema", json=STRING_SCHEMA)
    token = admin.keys.token(PRODUCER)
    producer = websocket.create_connection(
        f"{admin.broker.ws_url}/ws/v2/producer/persistent/acme/ns/orders",
        timeout=10,
        header=[f"Authorization: Bearer {token}"],
    )
    try:
        for i in range(5):
            assert publish(producer, f"m{i}")["result"] == "ok"
    finally:
        producer.close()
    last = admin.ok("GET", "/admin/v2/persistent/acme/ns/orders/lastMessageId").json()
    broker = admin.broker.http_url.removeprefix("http://")
    return {"ledger": str(last["ledgerId"]), "entry": str(last["entryId"]), "broker": broker}


@pytest.fixture
def secured(cluster: Cluster, token_keys: TokenKeys) -> Iterator[tuple[Admin, dict[str, str]]]:
    broker = cluster.start_broker(extras=admin_extras, **secure_settings(token_keys))
    admin = Admin(broker, token_keys)
    try:
        yield admin, set_up(admin)
    finally:
        admin.http.close()


def url_of(path: str, case: Case, extra: dict[str, str]) -> str:
    params = {**DEFAULTS, **extra, **case.params}
    url = path.format(**{name: urllib.parse.quote(value, safe="") for name, value in params.items()})
    return url + ("?" + urllib.parse.urlencode(case.query) if case.query else "")


def test_every_admin_route_is_in_the_matrix() -> None:
    routes = {(e.method, e.path) for e in admin_endpoints(with_topics=True)} | {("GET", OPENAPI_PATH)}
    assert routes == set(CASES)


def test_admin_security_matrix(secured: tuple[Admin, dict[str, str]]) -> None:
    admin, extra = secured
    failures = []
    for (method, path), case in CASES.items():
        url = url_of(path, case, extra)
        kwargs: dict[str, Any] = {} if case.body is None else {"json": case.body}
        right, wrong = roles_for(method, path)
        if right is None:  # open routes: health and the API document
            assert admin.call(method, url, None).status_code == 200, url
            continue
        seen = [
            admin.call(method, url, None, **kwargs).status_code,
            admin.call(method, url, right, expired=True, **kwargs).status_code,
            *(admin.call(method, url, role, **kwargs).status_code for role in wrong),
        ]
        expected = [401, 401, *(403 for _ in wrong)]
        success = admin.call(method, url, right, **kwargs)
        seen.append(200 if success.status_code < 300 else success.status_code)
        expected.append(case.expect)
        if seen != expected:
            failures.append(f"{method} {url} as {right}: {seen} != {expected} ({success.text[:200]})")
    assert not failures, "\n".join(failures)


def test_tenant_isolation(secured: tuple[Admin, dict[str, str]]) -> None:
    admin, _ = secured
    for method, url in (
        ("GET", "/admin/v2/persistent/acme/ns/orders/stats"),
        ("GET", "/admin/v2/persistent/acme/ns/orders/internalStats"),
        ("GET", "/admin/v2/persistent/acme/ns/orders/subscriptions"),
        ("GET", "/admin/v2/namespaces/acme/ns/topics"),
        ("GET", "/admin/v2/persistent/acme/ns"),
        ("GET", "/admin/v2/namespaces/acme/ns"),
        ("GET", "/admin/v2/tenants/acme"),
        ("GET", "/admin/v2/lookup-does-not-matter"),
    ):
        status = admin.call(method, url, OTHER).status_code
        assert status in (403, 404), (url, status)  # 404: no such route at all
    assert admin.call("GET", "/admin/v2/namespaces/other/ns/topics", OTHER).status_code == 200
    assert admin.call("GET", "/admin/v2/tenants/other", ADMIN).status_code == 403
    reason = admin.call("GET", "/admin/v2/persistent/acme/ns/orders/stats", OTHER).json()["reason"]
    assert reason == "Role 'other-role' is not authorized to get_stats on topic persistent://acme/ns/orders"


def test_permission_routes_have_pulsars_shapes(secured: tuple[Admin, dict[str, str]]) -> None:
    admin, _ = secured
    permissions = admin.ok("GET", "/admin/v2/namespaces/acme/ns/permissions").json()
    assert permissions[CONSUMER] == ["consume"]
    assert permissions[PRODUCER] == ["produce"]
    topic = admin.ok("GET", "/admin/v2/persistent/acme/ns/orders/permissions").json()
    assert topic["matrix-role"] == ["consume"]
    bad = admin.call("POST", "/admin/v2/namespaces/acme/ns/permissions/x", ROOT, json=["write"])
    assert bad.status_code == 400
    not_at_topic = admin.call("DELETE", f"/admin/v2/persistent/acme/ns/orders/permissions/{PRODUCER}", ROOT)
    assert (not_at_topic.status_code, not_at_topic.json()["reason"]) == (
        412,
        "Permissions are not set at the topic level",
    )
    # A grant takes effect at once: the producer role may now read stats of a topic it could not see.
    assert admin.call("GET", "/admin/v2/persistent/other/ns/x/stats", PRODUCER).status_code == 403
    admin.ok("POST", f"/admin/v2/namespaces/other/ns/permissions/{PRODUCER}", json=["consume"])
    assert admin.call("GET", "/admin/v2/persistent/other/ns/x/stats", PRODUCER).status_code != 403


def test_admin_rate_limit_per_role(cluster: Cluster, token_keys: TokenKeys) -> None:
    broker = cluster.start_broker(
        extras=admin_extras,
        **secure_settings(token_keys, admin_requests_per_role_per_s=0.001, admin_requests_burst=3),
    )
    admin = Admin(broker, token_keys)
    try:
        statuses = [admin.call("GET", "/admin/v2/clusters", "noisy").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited = admin.call("GET", "/admin/v2/clusters", "noisy")
        assert limited.json()["reason"].startswith("Too Many Requests: limit admin_requests_per_role_per_s")
        assert int(limited.headers["retry-after"]) >= 1
        assert admin.call("GET", "/admin/v2/clusters", "quiet").status_code == 200
    finally:
        admin.http.close()


def test_magnetar_admin_with_a_token_over_tls(
    cluster: Cluster, token_keys: TokenKeys, tls_files: TlsFiles, tmp_path: Path
) -> None:
    tls = {
        "http_port_tls": 0,
        "tls_certificate_file": tls_files.server_cert,
        "tls_key_file": tls_files.server_key,
    }
    broker = cluster.start_broker(extras=admin_extras, **secure_settings(token_keys, **tls))
    assert broker.handle is not None
    token_file = tmp_path / "token"
    token_file.write_text(token_keys.token(ROOT) + "\n")
    base = [
        "--admin-url",
        f"https://localhost:{broker.handle.tls_port}",
        "--tls-trust-certs-file",
        str(tls_files.ca_cert),
    ]

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main([*base, *argv], out, err)
        return code, out.getvalue(), err.getvalue()

    code, _, err = run("tenants", "list")
    assert code == 1
    assert "401 Authentication required: no token" in err
    auth = ("--auth-token", token_file.as_uri())
    assert run(*auth, "tenants", "create", "acme", "--admin-roles", ADMIN)[0] == 0
    assert run(*auth, "namespaces", "create", "acme/ns")[0] == 0
    assert (
        run(
            *auth,
            "namespaces",
            "grant-permission",
            "acme/ns",
            "--role",
            "app",
            "--actions",
            "produce,consume",
        )[0]
        == 0
    )
    code, out, _ = run(*auth, "namespaces", "permissions", "acme/ns")
    assert (code, json.loads(out)) == (0, {"app": ["produce", "consume"]})
    app = ("--auth-token", f"token:{token_keys.token('app')}")
    code, _, err = run(*app, "tenants", "list")
    assert code == 1
    assert "403 This operation requires super-user access" in err
    assert run(*auth, "topics", "create", "persistent://acme/ns/t")[0] == 0
    assert (
        run(
            *auth,
            "topics",
            "grant-permission",
            "persistent://acme/ns/t",
            "--role",
            "reader",
            "--actions",
            "consume",
        )[0]
        == 0
    )
    code, out, _ = run(*auth, "topics", "permissions", "persistent://acme/ns/t")
    assert json.loads(out) == {"app": ["produce", "consume"], "reader": ["consume"]}
    assert run(*auth, "topics", "revoke-permission", "persistent://acme/ns/t", "--role", "reader")[0] == 0
    assert run(*auth, "namespaces", "revoke-permission", "acme/ns", "--role", "app")[0] == 0
    code, out, _ = run(*auth, "namespaces", "permissions", "acme/ns")
    assert json.loads(out) == {}


def test_redirects_keep_tls_and_the_token(
    cluster: Cluster, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    tls = {
        "http_port_tls": 0,
        "tls_certificate_file": tls_files.server_cert,
        "tls_key_file": tls_files.server_key,
    }
    owner = cluster.start_broker(extras=admin_extras, **secure_settings(token_keys, **tls))
    other = cluster.start_broker(extras=admin_extras, **secure_settings(token_keys, **tls))
    assert owner.handle is not None
    assert other.handle is not None
    root = token_keys.token(ROOT)
    with httpx.Client(
        base_url=owner.http_url, timeout=30, headers={"Authorization": f"Bearer {root}"}
    ) as http:
        assert http.put("/admin/v2/persistent/public/default/owned").status_code == 204
    with httpx.Client(
        timeout=30,
        verify=client_ssl_context(trust_certs_file=tls_files.ca_cert),
        headers={"Authorization": f"Bearer {root}"},
    ) as http:
        redirect = http.get(
            f"https://127.0.0.1:{other.handle.tls_port}/admin/v2/persistent/public/default/owned/stats"
        )
    assert redirect.status_code == 307
    assert redirect.headers["location"].startswith(f"{owner.handle.http_url_tls}/admin/v2/persistent/")
    out, err = io.StringIO(), io.StringIO()
    code = admin_main(
        [
            "--admin-url", f"https://127.0.0.1:{other.handle.tls_port}",
            "--tls-trust-certs-file", str(tls_files.ca_cert),
            "--auth-token", f"token:{root}",
            "topics", "stats", "persistent://public/default/owned",
        ],
        out,
        err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    assert json.loads(out.getvalue())["msgInCounter"] == 0
