"""The consumer-side commands of Pulsar's binary protocol that move or query a subscription: SEEK and
GET_LAST_MESSAGE_ID (with its response), as frozen, validated values; :mod:`.commands` decodes them with
the rest.

Message ids in these commands are Java ``long``s on the wire (uint64 varints): Pulsar's
``MessageId.earliest`` is ``-1:-1`` (sent as 2^64-1), ``MessageId.latest`` is ``Long.MAX_VALUE`` twice. They
are read as signed 64-bit values (:func:`signed_id`); which of them name a real position is the broker's
question, not the codec's.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, ProtobufError, Writer

SEEK = 28
GET_LAST_MESSAGE_ID = 29
GET_LAST_MESSAGE_ID_RESPONSE = 30
_U64 = 2**64
_I64_MAX = 2**63 - 1
ID_LATEST = _I64_MAX
"""Ledger and entry id of ``MessageId.latest``."""


def signed_id(value: int) -> int:
    """A ledger or entry id as the Java ``long`` the client meant."""
    return value - _U64 if value > _I64_MAX else value


def _request_id(fields: Fields, number: int) -> int:
    value = fields.required_uint(number)
    if value > _I64_MAX:
        raise ProtobufError(f"{fields.name}: id field {number} = {value} is out of range")
    return value


@dataclass(frozen=True, slots=True)
class Seek:
    """SEEK: reset the consumer's subscription to a message id or to a publish time."""

    consumer_id: int
    request_id: int
    message_id: tuple[int, int] | None
    """``(ledgerId, entryId)`` as signed values (see the module docstring)."""
    publish_time_ms: int | None


@dataclass(frozen=True, slots=True)
class GetLastMessageId:
    consumer_id: int
    request_id: int


def decode_seek(f: Fields) -> Seek:
    message_id = None
    data = f.message(3, "MessageIdData")
    if data is not None:
        message_id = (signed_id(data.required_uint(1)), signed_id(data.required_uint(2)))
    publish_time = f.uint(4) if f.has(4) else None
    if publish_time is not None and publish_time > _I64_MAX:
        publish_time = _I64_MAX  # a time past every message: the end of the topic
    return Seek(_request_id(f, 1), _request_id(f, 2), message_id, publish_time)


def decode_get_last_message_id(f: Fields) -> GetLastMessageId:
    return GetLastMessageId(_request_id(f, 1), _request_id(f, 2))


def _message_id(ledger_id: int, entry_id: int, partition: int, batch_index: int) -> bytes:
    w = Writer().sint(1, ledger_id).sint(2, entry_id).sint(3, partition)
    if batch_index >= 0:
        w.sint(4, batch_index)
    return w.bytes()


def encode_get_last_message_id_response(
    request_id: int,
    last: tuple[int, int],
    partition: int,
    batch_index: int,
    mark_delete: tuple[int, int] | None,
) -> bytes:
    """GET_LAST_MESSAGE_ID_RESPONSE: the topic's last message (``entry -1``: none in the current ledger) and,
    for a durable subscription, its mark-delete position."""
    w = Writer().data(1, _message_id(last[0], last[1], partition, batch_index)).uint(2, request_id)
    if mark_delete is not None:
        w.data(3, _message_id(mark_delete[0], mark_delete[1], partition, -1))
    sub = w.bytes()
    return Writer().uint(1, GET_LAST_MESSAGE_ID_RESPONSE).data(GET_LAST_MESSAGE_ID_RESPONSE, sub).bytes()


def encode_seek(
    consumer_id: int,
    request_id: int,
    *,
    message_id: tuple[int, int] | None = None,
    publish_time_ms: int | None = None,
) -> bytes:
    """SEEK (what a client sends; the tests' raw client uses it)."""
    w = Writer().uint(1, consumer_id).uint(2, request_id)
    if message_id is not None:
        ledger_id, entry_id = (value % _U64 for value in message_id)  # as the uint64 a client writes
        w.data(3, Writer().uint(1, ledger_id).uint(2, entry_id).bytes())
    if publish_time_ms is not None:
        w.uint(4, publish_time_ms)
    return Writer().uint(1, SEEK).data(SEEK, w.bytes()).bytes()


def encode_get_last_message_id(consumer_id: int, request_id: int) -> bytes:
    """GET_LAST_MESSAGE_ID (what a client sends; the tests' raw client uses it)."""
    w = Writer().uint(1, consumer_id).uint(2, request_id)
    return Writer().uint(1, GET_LAST_MESSAGE_ID).data(GET_LAST_MESSAGE_ID, w.bytes()).bytes()
