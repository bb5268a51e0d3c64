"""Pulsar's batch wire form: a batch's payload as the admin API answers it (sans-IO, no protobuf library).

Pulsar stores a client-side batch as one entry: ``MessageMetadata`` (with ``num_messages_in_batch``), then for
each message a 4-byte big-endian length, that many bytes of ``SingleMessageMetadata`` (protobuf) and
``payload_size`` bytes of payload::

    batch   := message*
    message := metadata_len u32 (big-endian) | SingleMessageMetadata (metadata_len bytes) | payload

The admin API answers an entry holding a batch (``examinemessage``, ``position/{n}``,
``ledger/{l}/entry/{e}``) with that payload as the body and the header ``X-Pulsar-num-batch-message: N``; the
Java admin client (``TopicsImpl.getIndividualMsgsFromBatch``) then cuts the body into N messages with
``Commands.deSerializeSingleMessageInBatch`` and gives message ``i`` the id ``<X-Pulsar-Message-ID>:i``.
Magnetar batches on the broker (its entry format is its own), so the admin routes re-encode such an entry
in this form; :func:`decode_batch` is what ``magnetar admin`` reads it back with.

``SingleMessageMetadata`` (``PulsarApi.proto``, proto2), the fields written here::

    repeated KeyValue properties = 1;     // KeyValue: required string key = 1; required string value = 2;
    optional string partition_key = 2;
    required int32 payload_size = 3;
    optional uint64 event_time = 5;       // written only when set (0 means "none", as Pulsar)
    optional uint64 sequence_id = 8;

Fields are written in field-number order, as Pulsar's own serializer does; the decoder also reads
``compacted_out`` (4), ``partition_key_b64_encoded`` (6), ``ordering_key`` (7), ``null_value`` (9) and
``null_partition_key`` (10), and skips any other field by its wire type, as protobuf readers do. Malformed
input raises :class:`BatchFormatError`; nothing is allocated beyond the input's size.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
FIELD_PROPERTIES = 1
FIELD_PARTITION_KEY = 2
FIELD_PAYLOAD_SIZE = 3
FIELD_COMPACTED_OUT = 4
FIELD_EVENT_TIME = 5
FIELD_PARTITION_KEY_B64 = 6
FIELD_ORDERING_KEY = 7
FIELD_SEQUENCE_ID = 8
FIELD_NULL_VALUE = 9
FIELD_NULL_PARTITION_KEY = 10
KEY_VALUE_KEY, KEY_VALUE_VALUE = 1, 2
VARINT_BYTES_MAX = 10
BATCH_MESSAGES_MAX = 1_000_000
"""Most messages a decoder accepts in one batch (a header value beyond it is refused before any work)."""
_LENGTH = struct.Struct(">I")
_UINT64_MASK = (1 << 64) - 1


class BatchFormatError(ValueError):
    """Bytes that are not a batch in Pulsar's wire form (or not ``SingleMessageMetadata``)."""


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a batch: its ``SingleMessageMetadata`` fields and its payload."""

    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    event_time_ms: int = 0
    sequence_id: int | None = None
    partition_key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    compacted_out: bool = False
    null_value: bool = False
    null_partition_key: bool = False


# -- encoding ------------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint; a negative ``int32``/``int64`` is written as its 64-bit two's complement."""
    value &= _UINT64_MASK
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _length_delimited(number: int, data: bytes) -> bytes:
    return _tag(number, LENGTH_DELIMITED) + _varint(len(data)) + data


def encode_single_message_metadata(message: SingleMessage) -> bytes:
    """``SingleMessageMetadata`` of ``message`` (its ``payload_size`` is the payload's length)."""
    parts: list[bytes] = []
    for key, value in message.properties.items():
        pair = _length_delimited(KEY_VALUE_KEY, key.encode()) + _length_delimited(
            KEY_VALUE_VALUE, value.encode()
        )
        parts.append(_length_delimited(FIELD_PROPERTIES, pair))
    if message.partition_key is not None:
        parts.append(_length_delimited(FIELD_PARTITION_KEY, message.partition_key.encode()))
    parts.append(_tag(FIELD_PAYLOAD_SIZE, VARINT) + _varint(len(message.payload)))
    if message.compacted_out:
        parts.append(_tag(FIELD_COMPACTED_OUT, VARINT) + b"\x01")
    if message.event_time_ms:
        parts.append(_tag(FIELD_EVENT_TIME, VARINT) + _varint(message.event_time_ms))
    if message.partition_key_b64_encoded:
        parts.append(_tag(FIELD_PARTITION_KEY_B64, VARINT) + b"\x01")
    if message.ordering_key is not None:
        parts.append(_length_delimited(FIELD_ORDERING_KEY, message.ordering_key))
    if message.sequence_id is not None:
        parts.append(_tag(FIELD_SEQUENCE_ID, VARINT) + _varint(message.sequence_id))
    if message.null_value:
        parts.append(_tag(FIELD_NULL_VALUE, VARINT) + b"\x01")
    if message.null_partition_key:
        parts.append(_tag(FIELD_NULL_PARTITION_KEY, VARINT) + b"\x01")
    return b"".join(parts)


def encode_batch(messages: Sequence[SingleMessage]) -> bytes:
    """The batch payload: every message as length, ``SingleMessageMetadata`` and payload."""
    out = bytearray()
    for message in messages:
        metadata = encode_single_message_metadata(message)
        out += _LENGTH.pack(len(metadata))
        out += metadata
        out += message.payload
    return bytes(out)


# -- decoding ------------------------------------------------------------------------------------------


class _Reader:
    """Protobuf fields of one message, in order: ``(field number, wire type, value)``."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def done(self) -> bool:
        return self._pos >= len(self._data)

    def varint(self) -> int:
        result = shift = 0
        for _ in range(VARINT_BYTES_MAX):
            if self._pos >= len(self._data):
                raise BatchFormatError("truncated varint")
            byte = self._data[self._pos]
            self._pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result & _UINT64_MASK
            shift += 7
        raise BatchFormatError("varint longer than 10 bytes")

    def take(self, count: int) -> bytes:
        end = self._pos + count
        if count < 0 or end > len(self._data):
            raise BatchFormatError(f"field of {count} bytes runs past the end of the metadata")
        chunk = bytes(self._data[self._pos : end])
        self._pos = end
        return chunk

    def field(self) -> tuple[int, int, int | bytes]:
        key = self.varint()
        number, wire_type = key >> 3, key & 0x07
        if number == 0:
            raise BatchFormatError("field number 0")
        if wire_type == VARINT:
            return number, wire_type, self.varint()
        if wire_type == LENGTH_DELIMITED:
            return number, wire_type, self.take(self.varint())
        if wire_type == FIXED64:
            return number, wire_type, self.take(8)
        if wire_type == FIXED32:
            return number, wire_type, self.take(4)
        raise BatchFormatError(f"unsupported wire type {wire_type} (field {number})")


def _expect(number: int, wire_type: int, expected: int) -> None:
    if wire_type != expected:
        raise BatchFormatError(f"field {number} has wire type {wire_type}, expected {expected}")


def _text(value: int | bytes, what: str) -> str:
    assert isinstance(value, bytes)
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise BatchFormatError(f"{what} is not UTF-8") from None


def _key_value(data: bytes) -> tuple[str, str]:
    reader = _Reader(data)
    key: str | None = None
    value: str | None = None
    while not reader.done():
        number, wire_type, raw = reader.field()
        if number in (KEY_VALUE_KEY, KEY_VALUE_VALUE):
            _expect(number, wire_type, LENGTH_DELIMITED)
            if number == KEY_VALUE_KEY:
                key = _text(raw, "a property name")
            else:
                value = _text(raw, "a property value")
    if key is None or value is None:
        raise BatchFormatError("a property lacks its key or value (both are required)")
    return key, value


def decode_single_message_metadata(data: bytes) -> tuple[dict[str, object], int]:
    """The fields of one ``SingleMessageMetadata`` (by :class:`SingleMessage` attribute) and its
    ``payload_size``."""
    reader = _Reader(data)
    fields: dict[str, object] = {}
    properties: dict[str, str] = {}
    payload_size: int | None = None
    while not reader.done():
        number, wire_type, raw = reader.field()
        if number == FIELD_PROPERTIES:
            _expect(number, wire_type, LENGTH_DELIMITED)
            assert isinstance(raw, bytes)
            key, value = _key_value(raw)
            properties[key] = value
        elif number == FIELD_PARTITION_KEY:
            _expect(number, wire_type, LENGTH_DELIMITED)
            fields["partition_key"] = _text(raw, "the partition key")
        elif number == FIELD_ORDERING_KEY:
            _expect(number, wire_type, LENGTH_DELIMITED)
            fields["ordering_key"] = raw
        elif number in _VARINT_FIELDS:
            _expect(number, wire_type, VARINT)
            assert isinstance(raw, int)
            if number == FIELD_PAYLOAD_SIZE:
                payload_size = raw if raw < 2**63 else raw - 2**64
            else:
                name, as_bool = _VARINT_FIELDS[number]
                fields[name] = bool(raw) if as_bool else raw
    if payload_size is None:
        raise BatchFormatError("payload_size is missing (it is required)")
    if payload_size < 0:
        raise BatchFormatError(f"payload_size {payload_size} is negative")
    fields["properties"] = properties
    return fields, payload_size


_VARINT_FIELDS: dict[int, tuple[str, bool]] = {
    FIELD_PAYLOAD_SIZE: ("payload_size", False),
    FIELD_COMPACTED_OUT: ("compacted_out", True),
    FIELD_EVENT_TIME: ("event_time_ms", False),
    FIELD_PARTITION_KEY_B64: ("partition_key_b64_encoded", True),
    FIELD_SEQUENCE_ID: ("sequence_id", False),
    FIELD_NULL_VALUE: ("null_value", True),
    FIELD_NULL_PARTITION_KEY: ("null_partition_key", True),
}


def decode_batch(data: bytes, count: int) -> list[SingleMessage]:
    """The ``count`` messages of a batch payload (``X-Pulsar-num-batch-message``); bytes left over after
    them are an error, as is a batch shorter than ``count``."""
    if not 0 <= count <= BATCH_MESSAGES_MAX:
        raise BatchFormatError(f"a batch of {count} messages (at most {BATCH_MESSAGES_MAX})")
    view = memoryview(data)
    pos = 0
    messages = []
    for index in range(count):
        if pos + _LENGTH.size > len(view):
            raise BatchFormatError(f"message {index} of {count}: the batch ends before its metadata length")
        (metadata_len,) = _LENGTH.unpack_from(view, pos)
        pos += _LENGTH.size
        if pos + metadata_len > len(view):
            raise BatchFormatError(f"message {index}: metadata of {metadata_len} bytes runs past the end")
        fields, payload_size = decode_single_message_metadata(bytes(view[pos : pos + metadata_len]))
        pos += metadata_len
        if pos + payload_size > len(view):
            raise BatchFormatError(f"message {index}: payload of {payload_size} bytes runs past the end")
        payload = bytes(view[pos : pos + payload_size])
        pos += payload_size
        messages.append(SingleMessage(payload=payload, **fields))  # type: ignore[arg-type]
    if pos != len(view):
        raise BatchFormatError(f"{len(view) - pos} bytes left after the {count} messages of the batch")
    return messages
