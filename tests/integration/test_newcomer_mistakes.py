"""What a new user's mistakes get from a real ``magnetar standalone`` with authentication on (shipped
settings otherwise): every answer names the thing that is wrong and the fix, in the protocol's own terms.

WebSocket upgrades with a malformed path (a consumer path without its subscription, with a trailing slash,
a v1 path, an unknown endpoint or domain), ``encryptionKeys`` on a producer, an HTTP request without the
upgrade on a WebSocket endpoint, an unknown path, a wrong method, JSON of the wrong types to the admin API -
each asked without a token, with an ordinary role's token and with a superuser's: a malformed path is the
same 400 for every caller (it says nothing about the cluster), the others need the token first.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess, ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
CONSUMER_FORM = "/ws/v2/consumer/persistent/{tenant}/{namespace}/{topic}/{subscription}"
PRODUCER_FORM = "/ws/v2/producer/persistent/{tenant}/{namespace}/{topic}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, token_keys: TokenKeys) -> Iterator[MagnetarProcess]:
    tmp = tmp_path_factory.mktemp("newcomer")
    key = tmp / "secret.key"
    key.write_bytes(token_keys.secret)
    (tmp / "logs").mkdir()
    group = ProcessGroup(tmp / "logs")
    try:
        yield group.add(
            "standalone",
            [
                "standalone", "--data-dir", str(tmp / "data"), "--http-port", "0",
                "--bookie-port", str(free_port()),
                "--authentication-enabled", "--token-secret-key", key.as_uri(), "--super-user-roles", "admin",
            ],
        )  # fmt: skip
    finally:
        group.stop_all()


@pytest.fixture
def http(standalone: MagnetarProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=str(standalone.ready["httpUrl"]), timeout=30) as client:
        yield client


def callers(token_keys: TokenKeys) -> dict[str, dict[str, str]]:
    return {
        "none": {},
        "app": {"Authorization": f"Bearer {token_keys.token('app')}"},
        "admin": {"Authorization": f"Bearer {token_keys.token('admin')}"},
    }


def upgrade(http: httpx.Client, path: str, headers: dict[str, str]) -> httpx.Response:
    return http.get(path, headers={**UPGRADE, **headers})


@pytest.mark.parametrize(
    ("path", "says", "form"),
    [
        ("/ws/v2/consumer/persistent/public/default/orders", "Missing subscription name", CONSUMER_FORM),
        ("/ws/v2/consumer/persistent/public/default/orders/", "Missing subscription name", CONSUMER_FORM),
        ("/ws/consumer/persistent/public/default/orders/sub", "Only the v2 WebSocket paths", CONSUMER_FORM),
        (
            "/ws/v2/producers/persistent/public/default/orders",
            "Unknown WebSocket endpoint 'producers'",
            PRODUCER_FORM,
        ),
        (
            "/ws/v2/producer/persistant/public/default/orders",
            "Invalid topic domain 'persistant'",
            PRODUCER_FORM,
        ),
        ("/ws/v2/producer/persistent/public/default", "Too few path segments", PRODUCER_FORM),
    ],
)
def test_a_malformed_websocket_path_says_what_is_wrong_and_the_expected_path(
    http: httpx.Client, token_keys: TokenKeys, path: str, says: str, form: str
) -> None:
    for who, headers in callers(token_keys).items():
        answer = upgrade(http, path, headers)
        assert answer.status_code == 400, (who, answer.text)
        reason = answer.json()["reason"]
        assert reason.startswith("Invalid WebSocket path: "), (who, reason)
        assert says in reason, (who, reason)
        assert form in reason, (who, reason)
        assert "Invalid topic name format" not in reason


def test_encryption_keys_get_pulsars_answer_with_what_to_do(
    http: httpx.Client, token_keys: TokenKeys
) -> None:
    client_side = base64.b64encode(json.dumps({"k": {"keyValue": "AAE=", "metadata": {}}}).encode()).decode()
    headers = callers(token_keys)
    for value, form in (("k1,k2", "does not support encryption;"), (client_side, "client-side encryption")):
        path = f"/ws/v2/producer/persistent/public/default/encrypted?encryptionKeys={value}"
        assert upgrade(http, path, headers["none"]).status_code == 401  # the token is checked first
        answer = upgrade(http, path, headers["admin"])
        assert answer.status_code == 500, answer.text  # Pulsar's status without a key reader
        reason = answer.json()["reason"]
        assert "Can't add encryption key without configuring cryptoKeyReaderFactoryClassName" in reason
        assert form in reason
        assert "publish without encryptionKeys" in reason
    plain = upgrade(http, "/ws/v2/producer/persistent/public/default/encrypted", headers["admin"])
    assert plain.status_code == 101


def test_http_mistakes_name_the_path_the_method_and_the_fix(
    http: httpx.Client, token_keys: TokenKeys
) -> None:
    admin = callers(token_keys)["admin"]
    not_upgraded = http.get("/ws/v2/producer/persistent/public/default/orders", headers=admin)
    assert not_upgraded.status_code == 426
    assert "is a WebSocket endpoint; connect with a WebSocket client" in not_upgraded.json()["reason"]
    typo = http.get("/admin/v2/tenantz", headers=admin)
    assert (typo.status_code, typo.json()["reason"]) == (
        404,
        "Not Found: nothing is served at /admin/v2/tenantz",
    )
    wrong = http.delete("/admin/v2/clusters", headers=admin)
    assert wrong.status_code == 405
    assert wrong.json()["reason"] == "Method Not Allowed: DELETE /admin/v2/clusters - it takes GET, HEAD"
    assert wrong.headers["allow"] == "GET, HEAD"
    spoof = http.get("/admin/v2/\u202etenants", headers=admin)
    assert spoof.status_code == 404
    assert "\u202e" not in spoof.json()["reason"]
    typed = http.put("/admin/v2/tenants/newcomer", headers=admin, json={"adminRoles": "app"})
    assert typed.status_code == 400
    reason = typed.json()["reason"]
    assert reason == 'Invalid request body: adminRoles: Input should be a valid list (got "app")'
    anonymous = http.get("/admin/v2/tenants")
    assert anonymous.status_code == 401
    assert "send an 'Authorization: Bearer <token>' header" in anonymous.json()["reason"]
    assert http.get("/admin/v2/tenants", headers=admin).status_code == 200  # still serving
