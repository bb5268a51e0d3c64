"""Pulsar's message metadata as the producer writes it - ``MessageMetadata``, ``SingleMessageMetadata`` - and
the batch payload layout (``size u32 | SingleMessageMetadata | payload`` per message), as frozen, validated
values: what the broker reads of a SEND's payload section and writes into a consumer's MESSAGE. The command
around them is :mod:`.commands`, the frame :mod:`.framing`."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from magnetar.broker.protocols.pulsar_binary.commands import (
    BATCH_MESSAGES_MAX,
    PROPERTIES_MAX,
    CompressionType,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, ProtobufError, Writer, parse_message
from magnetar.broker.wire import ChunkInfo


@dataclass(frozen=True, slots=True)
class MessageMetadata:
    """What the broker reads of a producer's ``MessageMetadata`` (and writes for a consumer)."""

    producer_name: str
    sequence_id: int
    publish_time_ms: int
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    event_time_ms: int = 0
    compression: int = CompressionType.NONE
    uncompressed_size: int = 0
    num_messages_in_batch: int | None = None
    """Present (even 1) when the payload is a batch."""
    ordering_key: bytes | None = None
    deliver_at_time_ms: int | None = None
    chunk: ChunkInfo | None = None
    """Set when any of the chunk fields is present (``uuid``, ``num_chunks_from_msg``,
    ``total_chunk_msg_size``, ``chunk_id``): what they say, unchecked (missing ones as 0, -1 or "")."""
    encrypted: bool = False
    null_value: bool = False
    schema_version: int = -1
    """The producer's schema version, written as field 16 (8 big-endian bytes) when >= 0."""


_SCHEMA_VERSION = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a client batch: its ``SingleMessageMetadata`` and its payload."""

    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    event_time_ms: int = 0
    null_value: bool = False


def _properties(fields: Fields, number: int) -> Mapping[str, str]:
    out: dict[str, str] = {}
    for count, kv in enumerate(fields.repeated_messages(number, "KeyValue")):
        if count >= PROPERTIES_MAX:
            raise ProtobufError(f"{fields.name}: more than {PROPERTIES_MAX} properties")
        out[kv.required_string(1)] = kv.required_string(2)
    return out


def _chunk(f: Fields) -> ChunkInfo:
    return ChunkInfo(f.string(26), f.int32(29, -1), f.int32(27, 0), f.int32(28, -1))


def decode_metadata(data: bytes | memoryview) -> MessageMetadata:
    f = parse_message(data, "MessageMetadata")
    batch = f.int32(11) if f.has(11) else None
    if batch is not None and not 0 <= batch <= BATCH_MESSAGES_MAX:
        raise ProtobufError(f"MessageMetadata: num_messages_in_batch {batch} out of range")
    compression = f.uint(8)
    return MessageMetadata(
        producer_name=f.required_string(1),
        sequence_id=f.required_uint(2),
        publish_time_ms=f.required_uint(3),
        properties=_properties(f, 4),
        partition_key=f.optional_string(6),
        event_time_ms=f.uint(12),
        compression=compression,
        uncompressed_size=f.uint32(9),
        num_messages_in_batch=batch,
        ordering_key=f.bytes_(18) if f.has(18) else None,
        deliver_at_time_ms=f.int64(19) if f.has(19) else None,
        chunk=_chunk(f) if f.has(26) or f.has(27) or f.has(28) or f.has(29) else None,
        encrypted=f.has(13),
        null_value=f.boolean(25),
    )


def _key_values(w: Writer, number: int, properties: Mapping[str, str]) -> None:
    for key, value in properties.items():
        w.data(number, Writer().string(1, key).string(2, value).bytes())


def encode_metadata(meta: MessageMetadata) -> bytes:
    w = Writer().string(1, meta.producer_name).uint(2, meta.sequence_id).uint(3, meta.publish_time_ms)
    _key_values(w, 4, meta.properties)
    if meta.partition_key is not None:
        w.string(6, meta.partition_key)
    if meta.compression:
        w.uint(8, meta.compression)
    if meta.uncompressed_size:
        w.uint(9, meta.uncompressed_size)
    if meta.num_messages_in_batch is not None:
        w.sint(11, meta.num_messages_in_batch)
    if meta.event_time_ms:
        w.uint(12, meta.event_time_ms)
    if meta.ordering_key is not None:
        w.data(18, meta.ordering_key)
    if meta.deliver_at_time_ms is not None:
        w.sint(19, meta.deliver_at_time_ms)
    if meta.schema_version >= 0:
        w.data(16, _SCHEMA_VERSION.pack(meta.schema_version))
    if meta.null_value:
        w.boolean(25, True)
    chunk = meta.chunk
    if chunk is not None:
        w.string(26, chunk.uuid).sint(27, chunk.num_chunks).sint(28, chunk.total_size).sint(
            29, chunk.chunk_id
        )
    return w.bytes()


_U32 = struct.Struct(">I")


def decode_batch(payload: bytes | memoryview, claimed: int) -> list[SingleMessage]:
    """A batch payload's messages, counted from the bytes: exactly ``claimed`` of them, each whole, and
    nothing after the last (else :class:`ProtobufError`)."""
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    if not 1 <= claimed <= BATCH_MESSAGES_MAX:
        raise ProtobufError(f"batch of {claimed} messages")
    out: list[SingleMessage] = []
    pos = 0
    end = len(view)
    while pos < end:
        if len(out) >= claimed:
            raise ProtobufError(f"batch holds more than the {claimed} messages its metadata claims")
        if end - pos < 4:
            raise ProtobufError("batch: truncated metadata size")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if size > end - pos:
            raise ProtobufError(f"batch: metadata of {size} bytes, {end - pos} remain")
        f = parse_message(view[pos : pos + size], "SingleMessageMetadata")
        pos += size
        length = f.int32(3, -1) if f.has(3) else -1
        if length < 0:
            raise ProtobufError("SingleMessageMetadata: payload_size missing or negative")
        if length > end - pos:
            raise ProtobufError(f"batch: payload of {length} bytes, {end - pos} remain")
        out.append(
            SingleMessage(
                payload=bytes(view[pos : pos + length]),
                properties=_properties(f, 1),
                partition_key=f.optional_string(2),
                event_time_ms=f.uint(5),
                null_value=f.boolean(9),
            )
        )
        pos += length
    if len(out) != claimed:
        raise ProtobufError(f"batch holds {len(out)} messages, its metadata claims {claimed}")
    return out


def encode_single(message: SingleMessage) -> bytes:
    """One message of a batch payload: size, ``SingleMessageMetadata``, payload."""
    w = Writer()
    _key_values(w, 1, message.properties)
    if message.partition_key is not None:
        w.string(2, message.partition_key)
    w.sint(3, len(message.payload))
    if message.event_time_ms:
        w.uint(5, message.event_time_ms)
    if message.null_value:
        w.boolean(9, True)
    meta = w.bytes()
    return _U32.pack(len(meta)) + meta + message.payload


def encode_batch(messages: Sequence[SingleMessage]) -> bytes:
    return b"".join(encode_single(m) for m in messages)
