"""Messages as ``magnetar admin topics peek-messages|get-message-by-id|examine-message`` print them.

The admin API answers a stored entry as Pulsar's does, and :func:`parse_message_response` is the one place
that reads it (a new form of the answer changes this function only):

* one message: its payload as the body (``application/octet-stream``), its metadata in headers -
  ``X-Pulsar-Message-ID`` (``ledger:entry``), ``X-Pulsar-publish-time``, ``X-Pulsar-event-time``,
  ``X-Pulsar-partition-key``, ``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id`` and one
  ``X-Pulsar-PROPERTY-<name>`` per property (header names compared without case, property names kept as
  sent);
* an entry holding several messages (a batch): the same headers for the entry, ``X-Pulsar-num-batch-message:
  N``, and the body in Pulsar's batch wire form (:mod:`magnetar.admin.pulsar_batch`), whose
  ``SingleMessageMetadata`` gives each message its properties, key, event time and sequence id; message
  ``i`` is ``ledger:entry:i``, as the Java admin client numbers them;
* the JSON list of messages that Magnetar brokers before this form answered for a batch (``messageId``,
  base64 ``payload``, ``properties``, ...) is still read, so the command works against them too.

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

from magnetar.admin.pulsar_batch import BatchFormatError, SingleMessage, decode_batch
from magnetar.broker.wire import format_timestamp

PAYLOAD_FORMATS = ("auto", "text", "base64", "hex")
PROPERTY_HEADER_PREFIX = "x-pulsar-property-"
BATCH_COUNT_HEADER = "x-pulsar-num-batch-message"
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
    entry = _from_headers(raw_headers, body)
    count = next((v for k, v in raw_headers if k.lower() == BATCH_COUNT_HEADER), None)
    if count is None:
        return [entry]
    if not count.strip().isdigit():
        raise MessageFormatError(f"X-Pulsar-num-batch-message is not a count: {count!r:.50}")
    try:
        batch = decode_batch(body, int(count))
    except BatchFormatError as exc:
        raise MessageFormatError(f"entry {entry.message_id}: {exc}") from None
    return [_batch_message(entry, index, message) for index, message in enumerate(batch)]


def _batch_message(entry: AdminMessage, index: int, message: SingleMessage) -> AdminMessage:
    """Message ``index`` of a batch: the entry's publish time and producer, its own metadata."""
    return AdminMessage(
        message_id=f"{entry.message_id}:{index}",
        payload=message.payload,
        publish_time=entry.publish_time,
        event_time=format_timestamp(message.event_time_ms) if message.event_time_ms else None,
        key=message.partition_key,
        properties=dict(message.properties),
        producer_name=entry.producer_name,
        sequence_id=message.sequence_id,
    )


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
