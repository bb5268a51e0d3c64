"""No route answers 5xx to bad input: every admin route, lookup and the WebSocket endpoints, each path part
replaced by malformed values, and every route that takes a body given malformed bodies, against a real broker
(raw HTTP over a socket, so nothing normalizes the path on the way).

The audit found tenant names ``..`` or 7,000 characters answered 500 (the metadata store refused the path
they made), and so did some subscription and topic names on the WebSocket API. Bad input is the client's
fault: it gets a 4xx with a ``{"reason"}`` naming what is wrong. The sweep runs with authentication off (every
request reaches its handler) and on (as a superuser: the authorization checks read the names too).
"""

from __future__ import annotations

import base64
import http.client
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from fixtures.admin import admin_extras
from fixtures.auth import TokenKeys
from fixtures.broker import Cluster

from magnetar.admin.rest import admin_endpoints

ROOT = "root"
PLACEHOLDER = re.compile(r"\{(\w+)(?::path)?\}")
VALID = {
    "cluster": "standalone",
    "tenant": "public",
    "namespace": "default",
    "topic": "sweep-topic",
    "subscription": "sweep-sub",
    "role": "sweep-role",
    "count": "1",
    "seconds": "1",
    "timestamp": "0",
    "n": "1",
    "ledger": "1",
    "entry": "0",
    "domain": "persistent",
    "bundle": "0x00000000_0xffffffff",
    "broker": "127.0.0.1:8080",
    "name": "maxProducersPerTopic",
    "value": "1",
    "version": "0",
}
NAMES = (
    "cluster",
    "tenant",
    "namespace",
    "topic",
    "subscription",
    "role",
    "domain",
    "broker",
    "name",
    "value",
)
BAD_NAMES = (
    ".", "..", "%2E", "%2E%2E", "%2e%2E", "...",
    "a" * 7000, "%41" * 2000, "%C3%A9" * 1000, "%F0%9F%98%80" * 500,
    "%00", "a%00b", "%01", "%0A", "%7F", "%C2%80", "%EF%BF%BF", "%F0%9F%98%80",
    "%FF", "%C3%28", "%ED%A0%80", "%ZZ", "%", "%2",
    "+", "%20", "%2F", "a%2Fb", "%5C", "*", "%2A", "%3F", "%23",
    "x-partition-2147483648", "x-partition-99999999999999999999", "-partition-1", "x-partition-",
)  # fmt: skip
BAD_NUMBERS = ("-1", "-0", "99999999999999999999999", "1e3", "0x10", "NaN", "%00", "%E2%80%89", "", "1.5")
BAD_BODIES = (
    b"{", b"[", b"nul", b'"x', b"\xff\xfe", b"[]", b"{}", b"null", b"0", b"-1", b'"x"', b"true",
    b"1e999", b"-1e999", b"99999999999999999999999999", b'{"a": 1e999}', b"[" * 100_000 + b"]" * 100_000,
    b'{"retentionTimeInMinutes": 99999999999999999999, "retentionSizeInMB": 1}',
    b'{"ledgerId": 1e400, "entryId": 1}', b'{"adminRoles": ["' + b"r" * 5000 + b'"], "allowedClusters": []}',
    b'["produce", "consume", "' + b"x" * 5000 + b'"]', b'{"serviceUrl": "' + b"\x00" * 10 + b'"}',
)  # fmt: skip
ROUTES_OUTSIDE_ADMIN = [
    ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"),
    ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle"),
    ("WS", "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}"),
    ("WS", "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}"),
    ("WS", "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}"),
]
WS_HEADERS = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(),
    "Sec-WebSocket-Version": "13",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def __str__(self) -> str:
        return f"{self.status} {self.body[:200]!r}"


class RawClient:
    def __init__(self, url: str, token: str | None) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.token = token

    def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if method == "WS":
            method, headers = "GET", {**headers, **WS_HEADERS}
        if body is not None:
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            try:
                data = b"" if response.status == 101 else response.read()
            finally:
                response.close()
            return Answer(response.status, data)
        finally:
            connection.close()


def routes() -> list[tuple[str, str]]:
    return sorted({(e.method, e.path) for e in admin_endpoints(with_topics=True)}) + ROUTES_OUTSIDE_ADMIN


def fill(path: str, **values: str) -> str:
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), VALID[m.group(1)]), path)


def wrong(answer: Answer) -> bool:
    """A 5xx, or a refusal without Pulsar's ``{"reason"}`` body."""
    return answer.status >= 500 or (answer.status >= 400 and b'"reason"' not in answer.body)


def problems_of(client: RawClient) -> list[str]:
    problems = []
    for method, template in routes():
        for name in PLACEHOLDER.findall(template):
            bad_values = BAD_NAMES if name in NAMES else BAD_NUMBERS
            for bad in bad_values:
                answer = client.request(method, fill(template, **{name: bad}))
                if wrong(answer):
                    problems.append(f"{method} {template} {name}={bad[:40]!r}: {answer}")
    for endpoint in admin_endpoints(with_topics=True):
        if endpoint.body is None:
            continue
        for body in BAD_BODIES:
            answer = client.request(endpoint.method, fill(endpoint.path), body)
            if wrong(answer):
                problems.append(f"{endpoint.method} {endpoint.path} body {body[:40]!r}: {answer}")
    return problems


def prepare(client: RawClient) -> None:
    """The valid names exist, so a bad part is the only thing wrong with a request."""
    for method, path, body in (
        ("PUT", "/admin/v2/persistent/public/default/sweep-topic", None),
        ("PUT", "/admin/v2/persistent/public/default/sweep-topic/subscription/sweep-sub", b'"earliest"'),
    ):
        answer = client.request(method, path, body)
        assert answer.status < 300, (path, answer)


def test_no_route_answers_5xx_to_bad_input(cluster: Cluster) -> None:
    broker = cluster.start_broker(extras=admin_extras)
    client = RawClient(broker.http_url, None)
    prepare(client)
    problems = problems_of(client)
    assert not problems, f"{len(problems)} answers:\n" + "\n".join(problems[:80])


def test_no_route_answers_5xx_to_bad_input_with_authentication_on(
    cluster: Cluster, token_keys: TokenKeys
) -> None:
    broker = cluster.start_broker(
        extras=admin_extras,
        authentication_enabled=True,
        token_secret_key=token_keys.secret_setting,
        super_user_roles=ROOT,
    )
    client = RawClient(broker.http_url, token_keys.token(ROOT))
    prepare(client)
    problems = problems_of(client)
    assert not problems, f"{len(problems)} answers:\n" + "\n".join(problems[:80])
