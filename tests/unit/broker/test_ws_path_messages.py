"""What a WebSocket upgrade with a malformed path is told: what is wrong, and the path expected."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.protocols.params import (
    PATH_FORMS,
    ProducerParams,
    WsKind,
    parse_ws_path,
)
from magnetar.broker.protocols.ws_errors import WsUpgradeError

CONSUMER_FORM = PATH_FORMS[WsKind.CONSUMER]


def refusal(path: str) -> str:
    with pytest.raises(WsUpgradeError) as err:
        parse_ws_path(path)
    assert err.value.status == 400
    assert err.value.reason.startswith("Invalid WebSocket path: ")
    return err.value.reason


@pytest.mark.parametrize(
    "path",
    [
        "/ws/v2/consumer/persistent/public/default/t",  # a producer's or reader's path on the consumer
        "/ws/v2/consumer/persistent/public/default/t/",  # trailing slash, no subscription
        "/ws/v2/consumer/non-persistent/public/default/t",
    ],
)
def test_a_consumer_path_without_subscription_names_the_subscription(path: str) -> None:
    reason = refusal(path)
    assert "Missing subscription name" in reason
    assert CONSUMER_FORM in reason
    assert "Invalid topic name format" not in reason


@pytest.mark.parametrize(
    ("path", "says", "form"),
    [
        ("/ws/consumer/persistent/prop/cluster/ns/t/sub", "Only the v2 WebSocket paths", WsKind.CONSUMER),
        ("/ws/producer/persistent/prop/cluster/ns/t", "not /ws/producer/", WsKind.PRODUCER),
        ("/ws/v2/consumers/persistent/public/default/t/s", "Unknown WebSocket endpoint 'consumers'", None),
        ("/ws/v3/reader/persistent/public/default/t", "Unknown WebSocket API version 'v3'", None),
        ("/ws/v2/producer/persistant/public/default/t", "Invalid topic domain 'persistant'", WsKind.PRODUCER),
        ("/ws/v2/producer/persistent/public/default", "Too few path segments", WsKind.PRODUCER),
        ("/ws/v2/reader/persistent/public/default/", "Missing topic name", WsKind.READER),
        ("/ws/v2/reader", "Missing topic", WsKind.READER),
        ("/ws/v2/consumer/persistent/public/default/a/b/s", "Too many path segments for a consumer", None),
        ("/ws", "Not a WebSocket API path", None),
    ],
)
def test_each_malformed_path_says_what_is_wrong_and_shows_the_form(
    path: str, says: str, form: WsKind | None
) -> None:
    reason = refusal(path)
    assert says in reason
    if form is not None:
        assert PATH_FORMS[form] in reason


def test_a_name_refused_in_the_path_is_a_path_error() -> None:
    assert "Invalid tenant name" in refusal("/ws/v2/producer/persistent//default/t")


def test_good_paths_still_parse() -> None:
    target = parse_ws_path("/ws/v2/consumer/persistent/public/default/t/sub")
    assert (target.kind, str(target.topic), target.subscription) == (
        WsKind.CONSUMER,
        "persistent://public/default/t",
        "sub",
    )
    assert str(parse_ws_path("/ws/v2/producer/persistent/public/default/t/").topic).endswith("/t")


@given(
    st.text(
        alphabet=st.sampled_from("/wsv2producerconsumerreaderpersistentnon-ab%2F+ \u202e\x00"), max_size=80
    )
)
def test_any_path_is_parsed_or_refused_with_400(tail: str) -> None:
    for path in (tail, "/ws/" + tail, "/ws/v2/" + tail):
        outcome: object
        try:
            outcome = parse_ws_path(path)
        except WsUpgradeError as exc:
            outcome = (exc.status, exc.reason.split(":")[0])
        assert not isinstance(outcome, tuple) or outcome == (400, "Invalid WebSocket path")


@pytest.mark.parametrize(
    ("value", "form"),
    [
        ("k1,k2", "does not support encryption;"),
        ("", "does not support encryption;"),
        (
            base64.b64encode(json.dumps({"k": {"keyValue": "AAE=", "metadata": {}}}).encode()).decode(),
            "client-side",
        ),
        (base64.b64encode(b"[1]").decode(), "does not support encryption;"),
        ("!!not base64", "does not support encryption;"),
    ],
)
def test_encryption_keys_are_refused_as_pulsar_without_a_key_reader(value: str, form: str) -> None:
    """Pulsar answers 500 with this reason when its WebSocket service has no key reader; the reason here
    also says Magnetar has no such setting and what to do."""
    with pytest.raises(WsUpgradeError) as err:
        ProducerParams.parse({"encryptionKeys": value})
    assert err.value.status == 500
    reason = err.value.reason
    assert reason.startswith(
        "Failed to create producer/consumer: "
        "Can't add encryption key without configuring cryptoKeyReaderFactoryClassName"
    )
    assert form in reason
    assert "publish without encryptionKeys" in reason
