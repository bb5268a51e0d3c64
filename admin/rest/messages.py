"""Reading messages through the admin API: by ledger/entry, examine, peek, id by time, last id.

A stored entry holding one message is answered as Pulsar answers it (``generateResponseWithEntry``): the
payload as ``application/octet-stream``, the metadata in ``X-Pulsar-*`` headers (``X-Pulsar-Message-ID``,
``X-Pulsar-publish-time``, ``X-Pulsar-PROPERTY-<name>`` ...). An entry holding a broker-side batch (Magnetar's
own format, not Pulsar's client batches) is answered as a JSON list of its messages (``messageId``, base64
``payload``, ``properties``, ``publishTime`` ...) - a deviation: Pulsar's batch framing does not exist here.

Message ids by time use the entries' publish times: the first entry published at or after the time
(binary search, as Pulsar's ``findMessageIdByPublishTime``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from magnetar.admin.rest.framework import AdminError, ok
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.wire.date_format import format_timestamp
from magnetar.broker.wire.entry_format import CorruptEntryError, StoredMessage, decode_entry
from magnetar.broker.wire.message_id import MessageId
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

SEARCH_READS_MAX = 64
"""Entries read by one id-by-time search (a binary search needs ~log2(entries))."""


def _headers(message: StoredMessage, message_id: str, batch_size: int) -> list[tuple[str, str]]:
    headers = [
        ("content-type", "application/octet-stream"),
        ("x-pulsar-message-id", message_id),
        ("x-pulsar-publish-time", format_timestamp(message.publish_time_ms)),
        ("x-pulsar-producer-name", message.producer_name),
        ("x-pulsar-sequence-id", str(message.sequence_id)),
    ]
    if message.event_time_ms:
        headers.append(("x-pulsar-event-time", format_timestamp(message.event_time_ms)))
    if message.key is not None:
        headers.append(("x-pulsar-partition-key", message.key))
    if batch_size:
        headers.append(("x-pulsar-num-batch-message", str(batch_size)))
    headers.extend((f"x-pulsar-property-{name}", value) for name, value in message.properties.items())
    return [(k, v) for k, v in headers if v.isascii() and "\n" not in v and "\r" not in v]


def message_json(message: StoredMessage, message_id: MessageId) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messageId": message_id.to_admin_json() | {"batchIndex": message_id.batch_index},
        "payload": base64.b64encode(message.payload).decode("ascii"),
        "properties": dict(message.properties),
        "publishTime": format_timestamp(message.publish_time_ms),
        "producerName": message.producer_name,
        "sequenceId": message.sequence_id,
    }
    if message.key is not None:
        body["key"] = message.key
    if message.event_time_ms:
        body["eventTime"] = format_timestamp(message.event_time_ms)
    return body


def entry_response(entry: Entry, partition: int) -> HttpResponse:
    try:
        decoded = decode_entry(entry.data)
    except CorruptEntryError as exc:
        raise AdminError(500, f"Entry {entry.position} cannot be decoded: {exc}") from None
    ledger, entry_id = entry.position.ledger_id, entry.position.entry_id
    if not decoded.batched:
        message = decoded.messages[0]
        message_id = f"{ledger}:{entry_id}"
        return HttpResponse(200, _headers(message, message_id, 0), message.payload)
    size = len(decoded.messages)
    return ok([
        message_json(m, MessageId(ledger, entry_id, partition, index, size))
        for index, m in enumerate(decoded.messages)
    ])  # fmt: skip


def last_message_id(ml: ManagedLedger, partition: int) -> dict[str, int]:
    last = ml.last_confirmed
    return MessageId(last.ledger_id, last.entry_id, partition).to_admin_json()


async def last_message_id_with_batch(ml: ManagedLedger, partition: int) -> dict[str, int]:
    """As Pulsar: the last message's id, with its ``batchIndex`` when the last entry is a batch."""
    body = last_message_id(ml, partition)
    if ml.last_confirmed.entry_id < 0:
        return body
    entry = await ml.read_entry(ml.last_confirmed)
    if entry is not None:
        try:
            decoded = decode_entry(entry.data)
        except CorruptEntryError:
            return body
        if decoded.batched:
            body["batchIndex"] = len(decoded.messages) - 1
    return body


def publish_time(data: bytes) -> int:
    try:
        messages = decode_entry(data).messages
    except CorruptEntryError as exc:
        raise ValueError(str(exc)) from exc
    return max(m.publish_time_ms for m in messages)


async def first_at_or_after(
    ml: ManagedLedger, timestamp_ms: int, time_of: Callable[[bytes], int] = publish_time
) -> Position | None:
    """The first stored entry published at or after ``timestamp_ms`` (None if every entry is older)."""
    first = ml.ledgers.first_position()
    if first is None:
        return None
    before = ml.ledgers.previous_position(first)
    count = ml.ledgers.entries_between(before, ml.last_confirmed)
    low, high = 1, count + 1  # answer is the smallest k in [1, count] whose entry is new enough
    reads = 0
    while low < high and reads < SEARCH_READS_MAX:
        middle = (low + high) // 2
        reads += 1
        entry = await ml.read_entry(ml.ledgers.position_after_skipping(before, middle))
        try:
            new_enough = entry is not None and time_of(entry.data) >= timestamp_ms
        except ValueError:
            new_enough = False
        if new_enough:
            high = middle
        else:
            low = middle + 1
    if low > count:
        return None
    return ml.ledgers.position_after_skipping(before, low)
