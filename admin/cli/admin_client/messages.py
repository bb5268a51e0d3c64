"""Messages as ``magnetar admin topics peek-messages|get-message-by-id|examine-message`` print them.

The admin API answers a stored entry in one of two forms, and :func:`parse_message_response` is the one
place that reads them (a new form of the answer changes this function only):

* one message: its payload as the body (``application/octet-stream``), its metadata in headers -
  ``X-Pulsar-Message-ID`` (``ledger:entry``), ``X-Pulsar-publish-time``, ``X-Pulsar-event-time``,
  ``X-Pulsar-partition-key``, ``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id`` and one
  ``X-Pulsar-PROPERTY-<name>`` per property (header names compared without case, property names kept as
  sent);
* an entry holding several messages (a broker-side batch): a JSON list of messages with ``messageId``
  (``ledgerId``, ``entryId``, ``partitionIndex``, ``batchIndex``), base64 ``payload``, ``properties``,
  ``publishTime``, ``eventTime``, ``key``, ``producerName``, ``sequenceId``.

Each message is printed (:func:`message_view`) as pulsar-admin shows it - id ``ledger:entry`` (plus
``:batchIndex`` inside a batch), publish time, key, properties, payload - as JSON or a table row. The payload
is text when it is UTF-8 without control characters (tab and line breaks allowed), otherwise base64
(``--payload-format auto``); ``text`` (invalid bytes as ``\\xNN``), ``base64`` or ``hex`` force one.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PAYLOAD_FORMATS = ("auto", "text", "base64", "hex")
PROPERTY_HEADER_PREFIX = "x-pulsar-property-"
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Control characters that make a payload binary for ``auto`` (tab, line feed, carriage return do not)."""


class MessageFormatError(ValueError):
    """An answer that is neither form of a stored entry."""


@dataclass(frozen=True, slots=True)
class AdminMessage:
    message_id: str
    """``ledger:entry``, or ``ledger:entry:batchIndex`` for a message inside a batch."""
    payload: bytes
    publish_time: str | None = None
    event_time: str | None = None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    producer_name: str | None = None
    sequence_id: int | None = None


def parse_message_response(
    content_type: str, raw_headers: Sequence[tuple[str, str]], body: bytes
) -> list[AdminMessage]:
    """The messages of one answer of ``.../ledger/{l}/entry/{e}``, ``.../examinemessage`` or
    ``.../subscription/{s}/position/{n}``."""
    if content_type.split(";", maxsplit=1)[0].strip().lower() == "application/json":
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise MessageFormatError(f"the answer is not JSON: {exc}") from None
        items = document if isinstance(document, list) else [document]
        return [_from_json(item) for item in items]
    return [_from_headers(raw_headers, body)]


def _from_headers(raw_headers: Sequence[tuple[str, str]], body: bytes) -> AdminMessage:
    headers: dict[str, str] = {}
    properties: dict[str, str] = {}
    for name, value in raw_headers:
        lowered = name.lower()
        if lowered.startswith(PROPERTY_HEADER_PREFIX):
            properties[name[len(PROPERTY_HEADER_PREFIX) :]] = value
        else:
            headers[lowered] = value
    message_id = headers.get("x-pulsar-message-id")
    if message_id is None:
        raise MessageFormatError("the answer carries no X-Pulsar-Message-ID header")
    sequence = headers.get("x-pulsar-sequence-id")
    return AdminMessage(
        message_id=message_id,
        payload=body,
        publish_time=headers.get("x-pulsar-publish-time"),
        event_time=headers.get("x-pulsar-event-time"),
        key=headers.get("x-pulsar-partition-key"),
        properties=properties,
        producer_name=headers.get("x-pulsar-producer-name"),
        sequence_id=int(sequence) if sequence is not None and sequence.lstrip("-").isdigit() else None,
    )


def _from_json(item: Any) -> AdminMessage:
    if not isinstance(item, dict) or not isinstance(item.get("messageId"), dict):
        raise MessageFormatError(f"not a message: {item!r:.200}")
    ids = item["messageId"]
    message_id = f"{ids.get('ledgerId')}:{ids.get('entryId')}"
    if isinstance(ids.get("batchIndex"), int) and ids["batchIndex"] >= 0:
        message_id += f":{ids['batchIndex']}"
    try:
        payload = base64.b64decode(str(item.get("payload", "")), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MessageFormatError(f"message {message_id}: payload is not base64: {exc}") from None
    properties = item.get("properties") or {}
    return AdminMessage(
        message_id=message_id,
        payload=payload,
        publish_time=_text(item.get("publishTime")),
        event_time=_text(item.get("eventTime")),
        key=_text(item.get("key")),
        properties={str(k): str(v) for k, v in properties.items()} if isinstance(properties, dict) else {},
        producer_name=_text(item.get("producerName")),
        sequence_id=item.get("sequenceId") if isinstance(item.get("sequenceId"), int) else None,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def render_payload(payload: bytes, payload_format: str) -> tuple[str, str]:
    """``(text, format used)`` for ``--payload-format`` (:data:`PAYLOAD_FORMATS`)."""
    if payload_format == "hex":
        return payload.hex(), "hex"
    if payload_format == "base64":
        return base64.b64encode(payload).decode("ascii"), "base64"
    if payload_format == "text":
        return payload.decode("utf-8", errors="backslashreplace"), "text"
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode("ascii"), "base64"
    if _CONTROL.search(text):
        return base64.b64encode(payload).decode("ascii"), "base64"
    return text, "text"


def message_view(message: AdminMessage, payload_format: str) -> dict[str, Any]:
    """One message as printed: id, times, key, properties, producer, payload and the form it is shown in."""
    payload, shown_as = render_payload(message.payload, payload_format)
    view: dict[str, Any] = {
        "messageId": message.message_id,
        "publishTime": message.publish_time,
    }
    if message.event_time is not None:
        view["eventTime"] = message.event_time
    view |= {
        "key": message.key,
        "properties": dict(message.properties),
        "producerName": message.producer_name,
        "sequenceId": message.sequence_id,
        "payloadFormat": shown_as,
        "payload": payload,
    }
    return view


def views(messages: Sequence[AdminMessage], payload_format: str) -> list[dict[str, Any]]:
    return [message_view(m, payload_format) for m in messages]
