"""``magnetar admin topics peek-messages|get-message-by-id|examine-message`` print each message's id, publish
time, key, properties and payload (UTF-8 text when it is text, else base64; ``--payload-format`` chooses),
from the forms the admin API answers: one message with ``X-Pulsar-*`` headers, an entry holding a batch in
Pulsar's batch wire form with ``X-Pulsar-num-batch-message``, and (older brokers) a JSON list for a batch."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
import trio
from fixtures.admin import TopicServer

from magnetar.admin.cli.admin_client import admin_main
from magnetar.admin.cli.admin_client.messages import (
    AdminMessage,
    MessageFormatError,
    parse_message_response,
    render_payload,
)
from magnetar.admin.pulsar_batch import SingleMessage
from magnetar.admin.pulsar_batch import encode_batch as pulsar_batch
from magnetar.broker.wire.entry_format import StoredMessage, encode_batch, encode_message
from magnetar.broker.wire.topic_name import TopicName
from magnetar.managed_ledger.position import Position

T0 = 1_700_000_000_000
BINARY = bytes(range(256))
TOPIC = "persistent://public/default/printed"


async def cli(server: TopicServer, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = ["--admin-url", server.server.base_url, *argv]
    code = await trio.to_thread.run_sync(lambda: admin_main(args, out, err))
    return code, out.getvalue(), err.getvalue()


async def cli_json(server: TopicServer, *argv: str) -> Any:
    code, out, err = await cli(server, *argv)
    assert code == 0, err
    return json.loads(out)


async def _stored(server: TopicServer) -> list[Position]:
    ml = await server.factory.open(TopicName.of("public", "default", "printed").managed_ledger_name)
    await ml.open_cursor("sub", start_at_earliest=True)
    text = StoredMessage("héllo wörld\n".encode(), "prod", 0, T0, key="k1", properties={"Color": "blue"})
    binary = StoredMessage(BINARY, "prod", 1, T0 + 1)
    batch = [StoredMessage(b"b0", "prod", 2, T0 + 2), StoredMessage(b"\x00\xff", "prod", 3, T0 + 2, key="kb")]
    return [
        await ml.add_entry(encode_message(text)),
        await ml.add_entry(encode_message(binary)),
        await ml.add_entry(encode_batch(batch)),
    ]


async def test_peek_prints_ids_times_keys_properties_and_payloads(topic_server: TopicServer) -> None:
    text, binary, batch = await _stored(topic_server)
    peeked = await cli_json(topic_server, "topics", "peek-messages", TOPIC, "-s", "sub", "-n", "4")
    assert [m["messageId"] for m in peeked] == [
        f"{text.ledger_id}:{text.entry_id}",
        f"{binary.ledger_id}:{binary.entry_id}",
        f"{batch.ledger_id}:{batch.entry_id}:0",
        f"{batch.ledger_id}:{batch.entry_id}:1",
    ]
    first, second, third, fourth = peeked
    assert (first["payloadFormat"], first["payload"]) == ("text", "héllo wörld\n")
    assert first["key"] == "k1"
    assert first["properties"] == {"Color": "blue"}
    assert first["publishTime"].startswith("2023-11-14T")
    assert (second["payloadFormat"], base64.b64decode(second["payload"])) == ("base64", BINARY)
    assert second["key"] is None
    assert (third["payload"], fourth["key"]) == ("b0", "kb")
    assert base64.b64decode(fourth["payload"]) == b"\x00\xff"
    fewer = await cli_json(topic_server, "topics", "peek-messages", TOPIC, "-s", "sub", "-n", "10")
    assert len(fewer) == 4  # the backlog holds 4 messages: peek stops at the first position not found
    two = await cli_json(topic_server, "topics", "peek-messages", TOPIC, "-s", "sub", "-n", "3")
    assert [m["messageId"] for m in two] == [m["messageId"] for m in peeked[:3]]


async def test_payload_format_and_the_other_verbs(topic_server: TopicServer) -> None:
    _, binary, batch = await _stored(topic_server)
    by_id = [TOPIC, "-l", str(binary.ledger_id), "-e", str(binary.entry_id)]
    hexed = await cli_json(topic_server, "topics", "get-message-by-id", *by_id, "--payload-format", "hex")
    assert (hexed[0]["payloadFormat"], hexed[0]["payload"]) == ("hex", BINARY.hex())
    assert hexed[0]["messageId"] == f"{binary.ledger_id}:{binary.entry_id}"
    forced = await cli_json(topic_server, "topics", "get-message-by-id", *by_id, "--payload-format", "text")
    assert forced[0]["payload"].startswith("\x00\x01\x02")
    assert "\\xff" in forced[0]["payload"]  # invalid UTF-8 is escaped, never mangled silently
    latest = await cli_json(topic_server, "topics", "examine-message", TOPIC, "-i", "latest")
    assert [m["messageId"] for m in latest] == [
        f"{batch.ledger_id}:{batch.entry_id}:0",
        f"{batch.ledger_id}:{batch.entry_id}:1",
    ]
    earliest = ["topics", "examine-message", TOPIC, "-i", "earliest"]
    code, out, _ = await cli(topic_server, "-o", "table", *earliest)
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["MESSAGEID", "PUBLISHTIME", "KEY"]
    assert "héllo wörld" in out


async def test_peek_of_a_missing_subscription_is_an_error(topic_server: TopicServer) -> None:
    await _stored(topic_server)
    code, _, err = await cli(topic_server, "topics", "peek-messages", TOPIC, "-s", "nobody")
    assert code == 1
    assert "404" in err


@pytest.mark.parametrize(
    ("payload", "shown"),
    [
        (b"plain", ("plain", "text")),
        (b"tab\tand\r\nlines", ("tab\tand\r\nlines", "text")),
        (b"\x00nul", ("AG51bA==", "base64")),
        (b"\x1b[31mred", (base64.b64encode(b"\x1b[31mred").decode(), "base64")),
        ("\u0085".encode(), ("woU=", "base64")),  # a C1 control
        (b"\xff\xfe", ("//4=", "base64")),
        (b"", ("", "text")),
    ],
)
def test_auto_shows_text_only_when_it_is_text(payload: bytes, shown: tuple[str, str]) -> None:
    assert render_payload(payload, "auto") == shown


def test_the_header_form_keeps_property_names_as_sent() -> None:
    headers = [
        ("Content-Type", "application/octet-stream"),
        ("X-Pulsar-Message-ID", "7:3"),
        ("X-Pulsar-PROPERTY-TraceId", "abc"),
        ("x-pulsar-property-lower", "x"),
        ("X-Pulsar-sequence-id", "12"),
    ]
    (message,) = parse_message_response("application/octet-stream", headers, b"p")
    assert message.message_id == "7:3"
    assert message.properties == {"TraceId": "abc", "lower": "x"}
    assert message.sequence_id == 12
    with pytest.raises(MessageFormatError):
        parse_message_response("application/octet-stream", [], b"p")
    with pytest.raises(MessageFormatError):
        parse_message_response("application/json", [], b'[{"payload": "x"}]')


def test_the_batch_form_gives_each_message_its_own_id_and_metadata() -> None:
    body = pulsar_batch([
        SingleMessage(b"a", {"n": "0"}, partition_key="k0", sequence_id=7, event_time_ms=T0),
        SingleMessage(b"bb", {}, sequence_id=8),
    ])  # fmt: skip
    headers = [
        ("X-Pulsar-Message-ID", "4:9"),
        ("X-Pulsar-publish-time", "2023-11-14T22:13:20Z"),
        ("X-Pulsar-producer-name", "p"),
        ("X-Pulsar-sequence-id", "7"),
        ("X-Pulsar-num-batch-message", "2"),
        ("X-Pulsar-batch-size", str(len(body))),
    ]
    first, second = parse_message_response("application/octet-stream", headers, body)
    assert first == AdminMessage(
        "4:9:0", b"a", "2023-11-14T22:13:20Z", "2023-11-14T22:13:20Z", "k0", {"n": "0"}, "p", 7
    )
    assert (second.message_id, second.payload, second.key, second.sequence_id) == ("4:9:1", b"bb", None, 8)
    assert second.properties == {}
    for bad_count in ("3", "x"):
        wrong = [(k, bad_count if k == "X-Pulsar-num-batch-message" else v) for k, v in headers]
        with pytest.raises(MessageFormatError):
            parse_message_response("application/octet-stream", wrong, body)


def test_the_json_list_of_older_brokers_is_still_read() -> None:
    item = {"messageId": {"ledgerId": 1, "entryId": 2, "batchIndex": 1}, "payload": "eA==", "key": "k"}
    (message,) = parse_message_response("application/json", [], json.dumps([item]).encode())
    assert (message.message_id, message.payload, message.key) == ("1:2:1", b"x", "k")
