"""Advertised listeners (broker/wire/listeners.py): the setting as Pulsar writes it, refused with errors that
name the setting when hostile, and the listeners a broker's registration carries (ownership records and
load reports), bounded when read back."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, RequestHead
from magnetar.bookkeeper.runtime.http.types import QueryParams
from magnetar.broker.ownership.load_manager import Resolution
from magnetar.broker.ownership.load_report import LoadReport
from magnetar.broker.ownership.lookup import LookupHandlers
from magnetar.broker.ownership.manager import OwnerInfo
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.listeners import (
    LISTENERS_MAX,
    AdvertisedListener,
    listeners_from_json,
    parse_advertised_listeners,
    unknown_listener,
)


def settings(**given: Any) -> BrokerSettings:
    return BrokerSettings.model_validate({"metadata_url": "memory://", **given})


def test_pulsars_format_with_both_schemes_per_name() -> None:
    text = (
        "internal:pulsar://10.0.0.5:6650, external:pulsar://b0.example.com:16650,"
        "external:pulsar+ssl://b0.example.com:16651,v6:pulsar://[::1]:6650"
    )
    assert parse_advertised_listeners(text) == (
        AdvertisedListener("internal", "pulsar://10.0.0.5:6650"),
        AdvertisedListener("external", "pulsar://b0.example.com:16650", "pulsar+ssl://b0.example.com:16651"),
        AdvertisedListener("v6", "pulsar://[::1]:6650"),
    )


def test_off_by_default_and_the_internal_listener() -> None:
    assert settings().listeners() == ()
    assert settings().internal_listener() is None
    given = settings(advertised_listeners="a:pulsar://h:1,b:pulsar://h:2")
    assert given.internal_listener() == AdvertisedListener("a", "pulsar://h:1")
    named = settings(advertised_listeners="a:pulsar://h:1,b:pulsar://h:2", internal_listener_name="b")
    assert named.internal_listener() == AdvertisedListener("b", "pulsar://h:2")


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("external", "is not name:pulsar://host:port"),
        ("external:", "is not name:pulsar://host:port"),
        (":pulsar://h:1", "listener name '' is not"),
        ("ext\x00ernal:pulsar://h:1", "'ext\\\\x00ernal'"),
        ("ext\u202eernal:pulsar://h:1", "'ext\\\\u202eernal'"),
        ("\uff45xt:pulsar://h:1", "listener name"),
        ("x" * 10_000 + ":pulsar://h:1", "\\.\\.\\."),
        ("a:http://h:1", "is not a pulsar://host:port"),
        ("a:pulsar://h", "is not a pulsar://host:port"),
        ("a:pulsar://h:0", "is not a pulsar://host:port"),
        ("a:pulsar://h:65536", "is not a pulsar://host:port"),
        ("a:pulsar://h:2" + "0" * 20, "is not a pulsar://host:port"),
        ("a:pulsar://h:\uff16\uff16\uff15\uff10", "is not a pulsar://host:port"),
        ("a:pulsar://h\u202e:1", "is not a pulsar://host:port"),
        ("a:pulsar://h h:1", "is not a pulsar://host:port"),
        ("a:pulsar://" + "h" * 300 + ":1", "is not a pulsar://host:port"),
        ("a:pulsar://h:1,a:pulsar://h:2", "more than one pulsar:// URL"),
        (",".join(f"n{i}:pulsar://h:1" for i in range(LISTENERS_MAX + 1)), "more than 16 listener names"),
    ],
)
def test_hostile_values_are_refused_naming_the_setting(text: str, fault: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="advertised_listeners") as refused:
        settings(advertised_listeners=text)
    assert refused.match(fault)


def test_a_huge_value_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(pydantic.ValidationError, match="advertised_listeners"):
        settings(advertised_listeners="a:pulsar://h:1," * 100_000)


@pytest.mark.parametrize("name", ["nope", "", "a\x00", "x" * 10_000])
def test_the_internal_listener_must_be_one_of_them(name: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="internal_listener_name"):
        settings(advertised_listeners="a:pulsar://h:1", internal_listener_name=name)


def test_a_standalone_passes_them_to_its_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from magnetar.admin.processes.standalone_settings import StandaloneSettings

    monkeypatch.setenv("MAGNETAR_ADVERTISED_LISTENERS", "ext:pulsar://example.com:6650")
    standalone = StandaloneSettings.model_validate({"data_dir": tmp_path})
    assert standalone.broker.listeners() == (AdvertisedListener("ext", "pulsar://example.com:6650"),)


def test_unknown_listener_message_is_pulsars_and_escapes_hostile_names() -> None:
    assert unknown_listener("nope") == "the broker do not have nope listener"
    assert unknown_listener("a\u202eb") == "the broker do not have 'a\\u202eb' listener"
    assert len(unknown_listener("x" * 10_000)) < 120


def test_the_ownership_record_carries_the_listeners() -> None:
    owner = OwnerInfo(
        "http://b:8080",
        nativeUrl="pulsar://b:6650",
        advertisedListeners=(AdvertisedListener("ext", "pulsar://e:1", "pulsar+ssl://e:2"),),
    )
    raw = owner.encode()
    assert json.loads(raw)["advertisedListeners"] == {
        "ext": {"brokerServiceUrl": "pulsar://e:1", "brokerServiceUrlTls": "pulsar+ssl://e:2"}
    }
    assert OwnerInfo.decode(raw) == owner
    assert OwnerInfo.decode(b'{"httpUrl": "http://old:8080"}').advertisedListeners == ()


def test_the_load_report_carries_them_to_other_brokers() -> None:
    data = {
        "httpUrl": "http://b:8080",
        "advertisedListeners": {"ext": {"brokerServiceUrl": "pulsar://e:1", "brokerServiceUrlTls": ""}},
    }
    report = LoadReport.decode("b:8080", json.dumps(data).encode())
    assert listeners_from_json(report.extra["advertisedListeners"]) == (
        AdvertisedListener("ext", "pulsar://e:1"),
    )


@pytest.mark.parametrize(
    "stored",
    [
        None,
        [],
        "ext",
        {"ext": "pulsar://e:1"},
        {"ext": {"brokerServiceUrl": 7}},
        {"e\x00xt": {"brokerServiceUrl": "pulsar://e:1"}},
        {"x" * 1000: {"brokerServiceUrl": "pulsar://e:1"}},
        {"ext": {"brokerServiceUrl": "p" * 100_000}},
    ],
)
def test_a_hostile_stored_record_yields_no_listener(stored: Any) -> None:
    assert listeners_from_json(stored) == ()


def test_a_stored_record_is_held_to_the_bound_of_names() -> None:
    stored = {f"n{i}": {"brokerServiceUrl": f"pulsar://h:{i + 1}"} for i in range(1000)}
    assert len(listeners_from_json(stored)) == LISTENERS_MAX


class _RedirectingHost:
    """A lookup host whose answer is a redirect to another broker (the one that decides)."""

    security: Any = None

    async def check_partition_exists(self, topic: Any) -> None:
        return None

    async def lookup(self, topic: Any) -> Resolution:
        return Resolution(OwnerInfo("http://leader:8080"), redirect=True, authoritative=True)

    async def bundle_of(self, topic: Any) -> tuple[str, str]:
        raise NotImplementedError


def _request(query: str, headers: tuple[tuple[str, str], ...] = ()) -> HttpRequest:
    path = "/lookup/v2/topic/persistent/public/default/t"
    params = {"domain": "persistent", "tenant": "public", "namespace": "default", "topic": "t"}
    head = RequestHead("GET", f"{path}?{query}", path, QueryParams.parse(query), headers, params, None)
    return HttpRequest(head)


@pytest.mark.parametrize(
    ("query", "headers"),
    [("listenerName=external", ()), ("", (("x-pulsar-listenername", "external"),))],
)
async def test_a_redirect_carries_the_listener_name_on(
    query: str, headers: tuple[tuple[str, str], ...]
) -> None:
    handlers = LookupHandlers(_RedirectingHost())
    with pytest.raises(HttpError) as redirected:
        await handlers.lookup(_request(query, headers))
    assert redirected.value.status == 307
    location = dict(redirected.value.headers)["location"]
    assert location == (
        "http://leader:8080/lookup/v2/topic/persistent/public/default/t?authoritative=true&listenerName=external"
    )
