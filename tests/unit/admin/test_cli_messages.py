"""``magnetar admin topics peek-messages|get-message-by-id|examine-message`` print each message's id, publish
time, key, properties and payload (UTF-8 text when it is text, else base64; ``--payload-format`` chooses),
from both forms the admin API answers: one message with ``X-Pulsar-*`` headers, or a JSON list for an entry
holding a broker-side batch."""

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
    MessageFormatError,
    parse_message_response,
    render_payload,
)
from magnetar.broker.entry_format import StoredMessage, encode_batch, encode_message
from magnetar.broker.topic_name import TopicName
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
