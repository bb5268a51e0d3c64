"""Reading messages through the admin API: by ledger/entry, examine, peek, id by time, last id.

A stored entry is answered as Pulsar's broker answers it (``PersistentTopicsBase.generateResponseWithEntry``),
which is what the Java admin client parses (``TopicsImpl.getMessagesFromHttpResponse``):

* one message: its payload as the body (``application/octet-stream``), its metadata in headers spelled as
  Pulsar spells them - ``X-Pulsar-Message-ID`` (``ledger:entry``), ``X-Pulsar-publish-time``,
  ``X-Pulsar-event-time``, ``X-Pulsar-producer-name``, ``X-Pulsar-sequence-id``, ``X-Pulsar-partition-key``
  and one ``X-Pulsar-PROPERTY-<name>`` per property (the Java client finds properties by that exact,
  case-sensitive prefix);
* a chunk of a larger message (Pulsar's chunking) is answered as one message, with the chunk's bytes as the
  body and its chunk fields in ``X-Pulsar-uuid``, ``X-Pulsar-num-chunks-from-msg``,
  ``X-Pulsar-total-chunk-msg-size`` and ``X-Pulsar-chunk-id``, as Pulsar does;
* an entry holding a broker-side batch: the batch in Pulsar's wire form (:mod:`magnetar.admin.pulsar_batch`:
  ``SingleMessageMetadata`` + payload per message, carrying each message's properties, key, event time and
  sequence id) with ``X-Pulsar-num-batch-message: N`` and ``X-Pulsar-batch-size``; the client cuts it into N
  messages with ids ``ledger:entry:i``. The entry-level headers (publish time, producer name, sequence id)
  are those of the batch's first message: Pulsar's batch format has one publish time and one producer per
  entry, Magnetar's broker-side batches may hold several (a difference the README lists).

A header Pulsar would send but HTTP cannot carry (a property name that is not an HTTP token, a value with a
control character or outside Latin-1) is left out rather than failing the answer.

Message ids by time use the entries' publish times: the first entry published at or after the time
(binary search, as Pulsar's ``findMessageIdByPublishTime``).
"""

from __future__ import annotations

import re

from magnetar.admin.pulsar_batch import SingleMessage, encode_batch
from magnetar.admin.rest.framework import AdminError
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.wire import CorruptEntryError, MessageId, StoredMessage, decode_entry, format_timestamp
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.ledger import ManagedLedger

HEADER_MESSAGE_ID = "X-Pulsar-Message-ID"
HEADER_PUBLISH_TIME = "X-Pulsar-publish-time"
HEADER_EVENT_TIME = "X-Pulsar-event-time"
HEADER_PRODUCER_NAME = "X-Pulsar-producer-name"
HEADER_SEQUENCE_ID = "X-Pulsar-sequence-id"
HEADER_PARTITION_KEY = "X-Pulsar-partition-key"
HEADER_BATCH_COUNT = "X-Pulsar-num-batch-message"
HEADER_BATCH_SIZE = "X-Pulsar-batch-size"
PROPERTY_HEADER_PREFIX = "X-Pulsar-PROPERTY-"
HEADER_CHUNK_UUID = "X-Pulsar-uuid"
HEADER_CHUNK_COUNT = "X-Pulsar-num-chunks-from-msg"
HEADER_CHUNK_TOTAL_SIZE = "X-Pulsar-total-chunk-msg-size"
HEADER_CHUNK_ID = "X-Pulsar-chunk-id"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP header name (RFC 9110 ``token``)."""


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""What an HTTP header value cannot hold (RFC 9110 ``field-value``: no control characters but tab)."""


def _sendable(name: str, value: str) -> bool:
    if not _TOKEN.fullmatch(name) or _CONTROL.search(value):
        return False
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _entry_headers(message: StoredMessage, message_id: str) -> list[tuple[str, str]]:
    return [
        ("Content-Type", "application/octet-stream"),
        (HEADER_MESSAGE_ID, message_id),
        (HEADER_PUBLISH_TIME, format_timestamp(message.publish_time_ms)),
        (HEADER_PRODUCER_NAME, message.producer_name),
        (HEADER_SEQUENCE_ID, str(message.sequence_id)),
    ]


def _single_headers(message: StoredMessage, message_id: str) -> list[tuple[str, str]]:
    headers = _entry_headers(message, message_id)
    if message.event_time_ms:
        headers.append((HEADER_EVENT_TIME, format_timestamp(message.event_time_ms)))
    if message.key is not None:
        headers.append((HEADER_PARTITION_KEY, message.key))
    headers.extend((PROPERTY_HEADER_PREFIX + name, value) for name, value in message.properties.items())
    chunk = message.chunk
    if chunk is not None:
        headers.append((HEADER_CHUNK_UUID, chunk.uuid))
        headers.append((HEADER_CHUNK_COUNT, str(chunk.num_chunks)))
        headers.append((HEADER_CHUNK_TOTAL_SIZE, str(chunk.total_size)))
        headers.append((HEADER_CHUNK_ID, str(chunk.chunk_id)))
    return headers


def batch_wire_form(messages: list[StoredMessage]) -> bytes:
    """A broker-side batch in Pulsar's batch wire form (one ``SingleMessageMetadata`` + payload each)."""
    return encode_batch([
        SingleMessage(
            m.payload,
            dict(m.properties),
            partition_key=m.key,
            event_time_ms=m.event_time_ms,
            sequence_id=m.sequence_id,
        )
        for m in messages
    ])  # fmt: skip


def entry_response(entry: Entry) -> HttpResponse:
    """One stored entry as Pulsar's admin API answers it (see the module docstring)."""
    try:
        decoded = decode_entry(entry.data)
    except CorruptEntryError as exc:
        raise AdminError(500, f"Entry {entry.position} cannot be decoded: {exc}") from None
    message_id = f"{entry.position.ledger_id}:{entry.position.entry_id}"
    first = decoded.messages[0]
    if not decoded.batched or first.chunk is not None:  # a chunk: its own message, as Pulsar stores it
        headers = _single_headers(first, message_id)
        body = first.payload
    else:
        body = batch_wire_form(list(decoded.messages))
        headers = _entry_headers(first, message_id)
        headers.append((HEADER_BATCH_COUNT, str(len(decoded.messages))))
        headers.append((HEADER_BATCH_SIZE, str(len(body))))
    return HttpResponse(200, [(k, v) for k, v in headers if _sendable(k, v)], body)


def message_response(entry: Entry, offset: int, indexed_messages: int) -> HttpResponse:
    """Message ``offset`` of a stored entry as the admin API answers a message peeked by its place in the
    backlog: counted in messages, the ``n``-th message is answered alone, as Pulsar answers it when every
    message is its own entry (an entry holding one message: as :func:`entry_response`). Its id
    ``ledger:entry:batchIndex`` names its place in the entry (the Java client's ``MessageImpl`` reads the
    third part as the batch index), so a client that peeks positions 1, 2, ... until it has N messages gets
    the same N messages, with their own ids, whatever the batching.

    An entry the message index counts as ``indexed_messages`` other than the messages it holds (a batch
    written before entries carried their index counts as one message) is answered whole."""
    try:
        decoded = decode_entry(entry.data)
    except CorruptEntryError as exc:
        raise AdminError(500, f"Entry {entry.position} cannot be decoded: {exc}") from None
    count = len(decoded.messages)
    chunk = decoded.messages[0].chunk
    if not decoded.batched or chunk is not None or count != indexed_messages or not 0 <= offset < count:
        return entry_response(entry)
    message = decoded.messages[offset]
    headers = _single_headers(message, f"{entry.position.ledger_id}:{entry.position.entry_id}:{offset}")
    return HttpResponse(200, [(k, v) for k, v in headers if _sendable(k, v)], message.payload)


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
