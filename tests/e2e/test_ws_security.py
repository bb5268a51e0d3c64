"""Security of the WebSocket API and lookup on a real broker: for every endpoint, a request without a token,
with an expired token, with a token of a role without the permission and with the right role (401 / 401 /
403 / success); tenant isolation; the publish rate limits and the topics-per-namespace limit; and the same
endpoints over TLS (``wss://``, ``https://``) with websocket-client and httpx verifying the test CA."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websocket
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.broker import Broker, Cluster, publish, recv_json

from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.broker.policies.store import Policies, TenantInfo
from magnetar.broker.security.authorization import AuthAction
from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL, encode_send, parse_receipt
from magnetar.broker.wire.topic_name import NamespaceName

TOPIC = "persistent/acme/ns/orders"
ENDPOINTS = {
    "producer": (f"/ws/v2/producer/{TOPIC}", "producer-role"),
    "consumer": (f"/ws/v2/consumer/{TOPIC}/sub", "consumer-role"),
    "reader": (f"/ws/v2/reader/{TOPIC}", "consumer-role"),
}


def secure_settings(token_keys: TokenKeys, **more: Any) -> dict[str, Any]:
    return {
        "authentication_enabled": True,
        "token_secret_key": token_keys.secret_setting,
        "super_user_roles": "root",
        **more,
    }


def set_up_tenants(broker: Broker) -> None:
    service = broker.service

    async def setup() -> None:
        policies = service.policies
        for tenant in ("acme", "other"):
            await policies.create_tenant(tenant, TenantInfo(adminRoles=[f"{tenant}-admin"]))
            await policies.create_namespace(f"{tenant}/ns", Policies())
        authz = service.security.authorization
        acme = NamespaceName("acme", "ns")
        await authz.grant_namespace_permission(acme, "producer-role", [AuthAction.PRODUCE])
        await authz.grant_namespace_permission(acme, "consumer-role", [AuthAction.CONSUME])
        await authz.grant_namespace_permission(NamespaceName("other", "ns"), "other-role", list(AuthAction))

    broker.call(setup)


@pytest.fixture
def secure_broker(cluster: Cluster, token_keys: TokenKeys) -> Broker:
    broker = cluster.start_broker(**secure_settings(token_keys))
    set_up_tenants(broker)
    return broker


def bearer(token: str) -> list[str]:
    return [f"Authorization: Bearer {token}"]


def upgrade_status(url: str, header: list[str] | None = None) -> int:
    """101 when the upgrade is accepted (the session is closed at once), else the refusal's status."""
    try:
        ws = websocket.create_connection(url, timeout=10, header=header or [])
    except websocket.WebSocketBadStatusException as exc:
        return int(exc.status_code)
    ws.close()
    return 101


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_websocket_matrix(secure_broker: Broker, token_keys: TokenKeys, endpoint: str) -> None:
    path, allowed_role = ENDPOINTS[endpoint]
    url = secure_broker.ws_url + path
    expired = token_keys.token(allowed_role, expires_in_s=60)  # expired long ago (fake-clock epoch)
    assert upgrade_status(url) == 401
    assert upgrade_status(url, bearer(expired)) == 401
    assert upgrade_status(url, bearer(token_keys.token("other-role"))) == 403
    assert upgrade_status(url, bearer(token_keys.token(allowed_role))) == 101
    # Browsers cannot set headers: the token query parameter works the same way.
    separator = "&" if "?" in url else "?"
    assert upgrade_status(f"{url}{separator}token={expired}") == 401
    assert upgrade_status(f"{url}{separator}token={token_keys.token('other-role')}") == 403
    assert upgrade_status(f"{url}{separator}token={token_keys.token(allowed_role)}") == 101
    for privileged in ("root", "acme-admin"):
        assert upgrade_status(url, bearer(token_keys.token(privileged))) == 101


def test_refusals_carry_reasons(secure_broker: Broker, token_keys: TokenKeys) -> None:
    url = secure_broker.ws_url + ENDPOINTS["producer"][0]
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(url, timeout=10, header=bearer(token_keys.token("x", expires_in_s=1)))
    assert caught.value.resp_body is not None
    assert b"Failed to authenticate: token expired at 2023-11-14T22:13:21Z" in caught.value.resp_body
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(url, timeout=10, header=bearer(token_keys.token("consumer-role")))
    assert caught.value.resp_body is not None
    assert b"'consumer-role' is not authorized to produce on topic persistent://acme/ns/orders" in (
        caught.value.resp_body
    )


def test_lookup_matrix(secure_broker: Broker, token_keys: TokenKeys) -> None:
    url = f"{secure_broker.http_url}/lookup/v2/topic/{TOPIC}"
    with httpx.Client(timeout=10) as client:
        response = client.get(url)
        assert response.status_code == 401
        assert response.json()["reason"].startswith("Authentication required: no token")
        assert response.headers["www-authenticate"] == 'Bearer realm="magnetar"'
        expired = token_keys.token("consumer-role", expires_in_s=60)
        assert client.get(url, headers={"Authorization": f"Bearer {expired}"}).status_code == 401
        other = client.get(url, headers={"Authorization": f"Bearer {token_keys.token('other-role')}"})
        assert other.status_code == 403
        for role in ("producer-role", "consumer-role", "root", "acme-admin"):
            allowed = client.get(url, headers={"Authorization": f"Bearer {token_keys.token(role)}"})
            assert allowed.status_code == 200, allowed.text
            assert allowed.json()["httpUrl"] == secure_broker.service.http_url


def test_tenant_isolation(
    secure_broker: Broker, token_keys: TokenKeys, ws_connect: Callable[..., Any]
) -> None:
    """A role with every permission on tenant ``other`` gets nothing of tenant ``acme``, and back."""
    other_token = token_keys.token("other-role")
    for path, _ in ENDPOINTS.values():
        assert upgrade_status(secure_broker.ws_url + path, bearer(other_token)) == 403
    assert (
        upgrade_status(secure_broker.ws_url + "/ws/v2/producer/persistent/other/ns/t", bearer(other_token))
        == 101
    )
    acme_admin = token_keys.token("acme-admin")
    assert (
        upgrade_status(secure_broker.ws_url + "/ws/v2/reader/persistent/other/ns/t", bearer(acme_admin))
        == 403
    )
    with httpx.Client(timeout=10) as client:
        lookup = f"{secure_broker.http_url}/lookup/v2/topic/persistent/acme/ns/orders"
        assert client.get(lookup, headers={"Authorization": f"Bearer {other_token}"}).status_code == 403


def test_metrics_and_health(cluster: Cluster, token_keys: TokenKeys) -> None:
    open_metrics = cluster.start_broker(**secure_settings(token_keys))
    closed_metrics = cluster.start_broker(**secure_settings(token_keys, authenticate_metrics_endpoint=True))
    with httpx.Client(timeout=10) as client:
        for broker in (open_metrics, closed_metrics):
            assert client.get(f"{broker.http_url}/admin/v2/brokers/health").text == "ok"
        assert client.get(f"{open_metrics.http_url}/metrics").status_code == 200
        url = f"{closed_metrics.http_url}/metrics"
        assert client.get(url).status_code == 401
        assert (
            client.get(url, headers={"Authorization": f"Bearer {token_keys.token('alice')}"}).status_code
            == 403
        )
        assert (
            client.get(url, headers={"Authorization": f"Bearer {token_keys.token('root')}"}).status_code
            == 200
        )


def test_publish_rate_limits(cluster: Cluster, token_keys: TokenKeys, ws_connect: Callable[..., Any]) -> None:
    broker = cluster.start_broker(
        **secure_settings(token_keys, publish_messages_per_connection_per_s=0.001, publish_messages_burst=2)
    )
    set_up_tenants(broker)
    url = broker.ws_url + ENDPOINTS["producer"][0]
    token = token_keys.token("producer-role")
    noisy = ws_connect(url, header=bearer(token))
    assert [publish(noisy, f"m{i}", context=str(i))["result"] for i in range(2)] == ["ok", "ok"]
    refused = publish(noisy, "m2", context="2")
    assert refused["result"] == "send-error:8"
    assert refused["context"] == "2"
    assert "publish_messages_per_connection_per_s" in refused["errorMsg"]
    quiet = ws_connect(url, header=bearer(token))  # another connection has its own budget
    assert publish(quiet, "q0")["result"] == "ok"
    assert publish(noisy, "m3")["result"] == "send-error:8"  # the noisy session is still open


def test_publish_rate_limits_count_every_message_of_a_binary_send(
    cluster: Cluster, token_keys: TokenKeys, ws_connect: Callable[..., Any]
) -> None:
    broker = cluster.start_broker(
        **secure_settings(token_keys, publish_messages_per_connection_per_s=0.001, publish_messages_burst=3)
    )
    set_up_tenants(broker)
    url = broker.ws_url + ENDPOINTS["producer"][0]
    producer = ws_connect(url, header=bearer(token_keys.token("producer-role")), subprotocols=[SUBPROTOCOL])
    assert producer.getsubprotocol() == SUBPROTOCOL

    def send(request_id: int, count: int) -> Any:
        producer.send_binary(encode_send(request_id, [b"m"] * count))
        return parse_receipt(producer.recv())

    assert send(1, 2).ok
    refused = send(2, 2)  # one token left: a frame of two messages is refused whole
    assert not refused.ok
    assert refused.request_id == 2
    assert refused.error_code == 8
    assert "publish_messages_per_connection_per_s" in refused.reason
    assert send(3, 1).ok  # the session goes on with what the budget allows


def test_topics_per_namespace_limit(cluster: Cluster, ws_connect: Callable[..., Any]) -> None:
    broker = cluster.start_broker(topics_per_namespace_max=2)
    for name in ("a", "b"):
        producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/persistent/public/default/{name}")
        assert publish(producer, "x")["result"] == "ok"
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(f"{broker.ws_url}/ws/v2/producer/persistent/public/default/c", timeout=10)
    assert caught.value.status_code == 412
    assert caught.value.resp_body is not None
    assert b"Exceed maximum number of topics in namespace public/default" in caught.value.resp_body
    again = ws_connect(f"{broker.ws_url}/ws/v2/producer/persistent/public/default/a")  # existing: fine
    assert publish(again, "y")["result"] == "ok"


@pytest.fixture
def tls_broker(cluster: Cluster, token_keys: TokenKeys, tls_files: TlsFiles) -> Broker:
    broker = cluster.start_broker(
        **secure_settings(
            token_keys,
            http_port_tls=0,
            tls_certificate_file=tls_files.server_cert,
            tls_key_file=tls_files.server_key,
        )
    )
    set_up_tenants(broker)
    return broker


def test_tls_end_to_end(tls_broker: Broker, token_keys: TokenKeys, tls_files: TlsFiles) -> None:
    handle = tls_broker.handle
    assert handle is not None
    assert handle.tls_port is not None
    base = f"localhost:{handle.tls_port}"
    ssl_options = {"ca_certs": str(tls_files.ca_cert)}
    producer_token, consumer_token = token_keys.token("producer-role"), token_keys.token("consumer-role")
    consumer = websocket.create_connection(
        f"wss://{base}/ws/v2/consumer/{TOPIC}/tls-sub",
        timeout=10,
        sslopt=ssl_options,
        header=bearer(consumer_token),
    )
    producer = websocket.create_connection(
        f"wss://{base}/ws/v2/producer/{TOPIC}?token={producer_token}", timeout=10, sslopt=ssl_options
    )
    try:
        assert publish(producer, "over tls")["result"] == "ok"
        assert recv_json(consumer)["payload"] == "b3ZlciB0bHM="
    finally:
        producer.close()
        consumer.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(f"wss://{base}/ws/v2/producer/{TOPIC}", timeout=10, sslopt=ssl_options)
    assert caught.value.status_code == 401
    with httpx.Client(verify=client_ssl_context(trust_certs_file=tls_files.ca_cert), timeout=10) as client:
        lookup = client.get(
            f"https://{base}/lookup/v2/topic/{TOPIC}", headers={"Authorization": f"Bearer {consumer_token}"}
        )
        assert lookup.status_code == 200
        assert lookup.json()["httpUrlTls"] == handle.http_url_tls
    with pytest.raises(httpx.ConnectError), httpx.Client(timeout=10) as untrusting:
        untrusting.get(f"https://{base}/admin/v2/brokers/health")


def test_a_tls_client_is_redirected_to_the_owners_tls_port_when_the_proxy_is_off(
    cluster: Cluster, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    tls = {
        "http_port_tls": 0,
        "tls_certificate_file": tls_files.server_cert,
        "tls_key_file": tls_files.server_key,
        "ws_proxy_enabled": False,
    }
    first = cluster.start_broker(**secure_settings(token_keys, **tls))
    second = cluster.start_broker(**secure_settings(token_keys, **tls))
    set_up_tenants(first)
    ssl_options = {"ca_certs": str(tls_files.ca_cert)}
    assert first.handle is not None
    assert second.handle is not None
    token = token_keys.token("root")
    producer = websocket.create_connection(
        f"wss://127.0.0.1:{first.handle.tls_port}/ws/v2/producer/{TOPIC}?token={token}",
        timeout=10,
        sslopt=ssl_options,
    )
    try:
        assert publish(producer, "moved")["result"] == "ok"
        reader = websocket.create_connection(
            f"wss://127.0.0.1:{second.handle.tls_port}/ws/v2/reader/{TOPIC}?messageId=earliest&token={token}",
            timeout=10,
            sslopt=ssl_options,
        )
        try:
            assert recv_json(reader)["payload"] == "bW92ZWQ="  # served by the owner, reached over TLS
            assert not second.service.topics
        finally:
            reader.close()
        with pytest.raises(websocket.WebSocketException, match="Redirect limit exhausted"):  # a 307
            websocket.create_connection(
                f"wss://127.0.0.1:{second.handle.tls_port}/ws/v2/reader/{TOPIC}?token={token}",
                timeout=10,
                sslopt=ssl_options,
                redirect_limit=0,
            )
    finally:
        producer.close()


def test_a_session_on_a_non_owner_is_checked_at_the_edge_and_again_by_the_owner_over_tls(
    cluster: Cluster, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    """The client's role is checked by the broker it reached, and again by the owner: the hop carries the
    client's own token (header or query) and nothing of the broker's - no broker role is a superuser here -
    and, with ``broker_client_tls_enabled``, goes over TLS."""
    tls = {
        "http_port_tls": 0,
        "tls_certificate_file": tls_files.server_cert,
        "tls_key_file": tls_files.server_key,
        "broker_client_tls_enabled": True,
        "broker_client_tls_trust_certs_file": tls_files.ca_cert,
    }
    first = cluster.start_broker(**secure_settings(token_keys, **tls))
    second = cluster.start_broker(**secure_settings(token_keys, **tls))
    set_up_tenants(first)
    assert first.handle is not None
    assert second.handle is not None
    producer = websocket.create_connection(
        f"ws://127.0.0.1:{first.handle.port}/ws/v2/producer/{TOPIC}?token={token_keys.token('producer-role')}",
        timeout=10,
    )
    try:
        assert publish(producer, "proxied")["result"] == "ok"
        base = f"ws://127.0.0.1:{second.handle.port}/ws/v2/reader/{TOPIC}?messageId=earliest&token="
        with pytest.raises(websocket.WebSocketBadStatusException) as caught:  # the edge checks the client
            websocket.create_connection(
                base + token_keys.token("producer-role"), timeout=10, redirect_limit=0
            )
        assert caught.value.status_code == 403
        reader = websocket.create_connection(
            base + token_keys.token("consumer-role"), timeout=10, redirect_limit=0
        )
        try:
            assert recv_json(reader)["payload"] == "cHJveGllZA=="  # relayed from the owner
            assert not second.service.topics  # not served by the broker the client reached
        finally:
            reader.close()
        reader = websocket.create_connection(  # the token in the header this time
            base.removesuffix("&token="),
            timeout=10,
            redirect_limit=0,
            header=bearer(token_keys.token("consumer-role")),
        )
        try:
            assert recv_json(reader)["payload"] == "cHJveGllZA=="
        finally:
            reader.close()
    finally:
        producer.close()


def test_perf_tools_authenticate_with_a_token(
    secure_broker: Broker, token_keys: TokenKeys, capsys: pytest.CaptureFixture[str]
) -> None:
    from magnetar.admin.cli.main import main

    common = ["perf", "produce", "--url", secure_broker.http_url, "--topic", "persistent://acme/ns/perf"]
    token = ["--auth-token", f"token:{token_keys.token('producer-role')}"]
    assert main([*common, "--messages", "20", "--duration-s", "20", *token]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["messages"] == 20


@pytest.mark.parametrize(
    ("command", "role", "status", "reason"),
    [
        ("produce", None, 401, "Failed to authenticate"),
        ("produce", "consumer-role", 403, "is not authorized to produce"),
        ("consume", None, 401, "Failed to authenticate"),
        ("consume", "producer-role", 403, "is not authorized to consume"),
    ],
)
def test_perf_tools_stop_at_once_when_refused_for_authentication_or_authorization(
    secure_broker: Broker,
    token_keys: TokenKeys,
    capsys: pytest.CaptureFixture[str],
    command: str,
    role: str | None,
    status: int,
    reason: str,
) -> None:
    from magnetar.admin.cli.main import main

    argv = ["perf", command, "--url", secure_broker.http_url, "--topic", "persistent://acme/ns/perf"]
    argv += ["--messages", "20", "--duration-s", "120"]
    if role is not None:
        argv += ["--auth-token", f"token:{token_keys.token(role)}"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert f"refused the connection: {status} " in captured.err
    assert reason in captured.err
    assert "retrying" not in captured.out
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert (summary["messages"], summary["outcome"]) == (0, "failed")
    assert summary["elapsed_s"] < 60  # stopped at once, not retried until the duration ended
