"""The upstream upgrade of the owner proxy carries the client's own target and credentials (sans-IO)."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from magnetar.bookkeeper.runtime.http import QueryParams, RequestHead
from magnetar.bookkeeper.runtime.http.request_target import target_error
from magnetar.broker.owner_proxy.upstream import client_credentials, upstream_target
from magnetar.broker.settings import BrokerSettings

names = st.text(min_size=1, max_size=12)
values = st.text(max_size=12)


def encoded(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


def head(target: str, headers: tuple[tuple[str, str], ...] = ()) -> RequestHead:
    path, _, query = target.partition("?")
    return RequestHead("GET", target, path, QueryParams.parse(query), headers, {}, None)


@given(st.lists(st.tuples(names, values), max_size=6))
def test_without_overrides_the_client_target_is_sent_byte_for_byte(pairs: list[tuple[str, str]]) -> None:
    path = "/ws/v2/consumer/persistent/t/ns/topic/" + quote("locked#x", safe="")
    target = f"{path}?{encoded(pairs)}" if pairs else path
    assert upstream_target(path, target, {}) == target


@given(st.lists(st.tuples(names, values), max_size=6), st.dictionaries(names, values, max_size=3))
def test_overrides_replace_every_value_of_their_names_and_keep_the_rest(
    pairs: list[tuple[str, str]], overrides: dict[str, str]
) -> None:
    path = "/ws/v2/reader/persistent/t/ns/topic"
    target = f"{path}?{encoded(pairs)}"
    sent = upstream_target(path, target, overrides)
    assert target_error(sent.encode()) is None
    sent_path, _, query = sent.partition("?")
    assert sent_path == path
    expected = [(k, v) for k, v in pairs if k not in overrides] + list(overrides.items())
    assert parse_qsl(query, keep_blank_values=True) == expected


def test_a_partition_path_keeps_the_client_query_and_token() -> None:
    target = "/ws/v2/consumer/persistent/t/ns/topic/sub?token=abc&pullMode=true"
    assert upstream_target("/ws/v2/consumer/persistent/t/ns/topic-partition-1/sub", target, {}) == (
        "/ws/v2/consumer/persistent/t/ns/topic-partition-1/sub?token=abc&pullMode=true"
    )


def test_the_credentials_forwarded_are_the_clients_own_and_nothing_else() -> None:
    bearer = ("authorization", "Bearer client-token")
    assert client_credentials(head("/ws/x", (bearer, ("authorization", "Bearer second")))) == [bearer]
    assert client_credentials(head("/ws/x?token=t", (("cookie", "c"),))) == []


def test_a_broker_whose_proxy_could_not_reach_the_owners_refuses_to_start_naming_the_settings() -> None:
    mutual = {
        "http_port_tls": 0,
        "tls_certificate_file": "/c.pem",
        "tls_key_file": "/k.pem",
        "tls_trust_certs_file": "/ca.pem",
        "tls_require_trusted_client_cert": True,
    }
    with pytest.raises(ValidationError, match="broker_client_tls_enabled=false") as refused:
        BrokerSettings(**mutual, broker_client_tls_enabled=True)
    assert "tls_require_trusted_client_cert" in str(refused.value)
    BrokerSettings(**mutual)  # the hop uses the owners' plain port
    BrokerSettings(**mutual, broker_client_tls_enabled=True, ws_proxy_enabled=False)
