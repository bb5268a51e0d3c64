"""The bytes of one stored entry: one message, or a batch of messages with their own metadata.

Pulsar stores a message as ``MessageMetadata`` + payload, and a client-side batch as one entry whose
metadata says ``num_messages_in_batch`` followed by ``SingleMessageMetadata`` + payload per message; a
message in a batch is addressed by ``(ledger, entry, batch_index)``. Magnetar batches on the broker, so the
messages of one entry may come from different producers; this format carries each message's full metadata
and keeps the producer names in a small table at the head of the entry.

Layout (little-endian)::

    entry   := magic "Mg" | version u8 (=1) | kind u8 (1 = single message, 2 = batch)
               | name_count u16 | name_count * (len u16, UTF-8 bytes)        # producer names
               | message_count u32 | message_count * message
    message := producer u16 (index into the names) | flags u8 (bit 0: has key)
               | sequence_id i64 | publish_time_ms i64 | event_time_ms i64 (0 = none, as Pulsar)
               | key_len u16 | property_count u16 | payload_len u32
               | key bytes | property_count * (key_len u16, key, value_len u16, value) | payload

A single-message entry is the same structure with one message and ``kind = 1``; the kind matters to message
ids: a single message has ``batch_index = -1``, the ``i``-th message of a batch ``batch_index = i`` and
``batch_size = message_count``.

A *compact* batch (``kind = 3``) holds one producer's messages with consecutive sequence ids and one publish
time, each message laid out exactly as in a binary SEND frame (:mod:`.magnetar_v1`), so the broker stores
a frame's messages as they arrived - validated, not re-encoded::

    compact := magic "Mg" | version u8 (=1) | kind u8 (=3) | name_count u16 (=1) | len u16 | producer name
               | message_count u32 | first_sequence_id i64 | publish_time_ms i64 | message_count * cmessage
    cmessage := payload_len u32 | key_len u16 (0xFFFF: no key) | property_count u16 | event_time_ms i64
                | key bytes | property_count * (key_len u16, key, value_len u16, value) | payload

Message ``i`` has ``sequence_id = first_sequence_id + i`` and ``batch_index = i``; it decodes to the same
:class:`StoredMessage` as in a ``kind = 2`` batch.

**Delayed entries.** An entry whose messages are to be delivered no earlier than a given time (Pulsar's
``deliverAt``; the delay is per entry, as in Pulsar) has bit 7 of its kind byte set (:data:`DELAYED_FLAG`)
and an ``i64`` deliver-at time (epoch milliseconds, >= 0) right after the fixed head, before the name table::

    delayed := magic "Mg" | version u8 (=1) | kind u8 (1/2/3 | 0x80) | name_count u16 | deliver_at_ms i64
               | ... (the rest as the kind says)

Every entry written before has bit 7 clear and decodes unchanged; :attr:`DecodedEntry.deliver_at_ms` is 0
for it (and for every entry without a delay).

**Schema versions.** The messages of a producer that named a schema (Pulsar's ``schema_version``, one per
producer, so one per entry) are written with bit 6 of the kind byte set (:data:`SCHEMA_FLAG`) and an ``i64``
version (>= 0) after the fixed head and the deliver-at time if any; every message decoded from it carries
that version (:attr:`StoredMessage.schema_version`, -1 without). Other bits of the kind byte stay refused.

**Chunk entries.** A message larger than the broker's maximum message size reaches it as chunks (Pulsar's
chunking: each chunk a SEND of its own, the client reassembles). Each chunk is a compact entry of one message
with bit 5 of its kind byte set (:data:`CHUNK_FLAG`) and a chunk head after the fixed head (and after the
deliver-at time and the schema version, when the entry has them), before the name table::

    chunk := chunk_id u32 | num_chunks u32 | total_size u32 | uuid_len u16 | uuid (UTF-8)

The message decodes with :attr:`StoredMessage.chunk` set; every other message has None there. The fields are
checked when the chunk is published (:func:`check_chunk`) and again when decoded.

**What is stored is more than the entry.** The managed ledger writes its own message index prefix in front
of every entry it stores and removes it from every entry it reads
(``magnetar.managed_ledger.entry_prefix``, the one owner of those bytes): the decoders here see the entry
only, as the broker encoded it - a ``memoryview`` slice of the bytes read is decoded in place. A reader of
stored bytes that does not go through a managed ledger (the admin range read, the Spark source) skips the
prefix with that module first. :func:`entry_message_count` is what the managed ledger asks of this format.

There is no checksum here: the entry travels and rests inside a BookKeeper entry whose CRC32C digest is
verified on every read. Every length is bounded (see the ``*_MAX`` constants) and
checked against the bytes actually present, so corrupt or hostile input raises :class:`CorruptEntryError` and
never makes the decoder allocate more than the input's size.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from magnetar.broker.wire.errors import BrokerError

MAGIC = b"Mg"
VERSION = 1
KIND_SINGLE = 1
KIND_BATCH = 2
KIND_COMPACT = 3
DELAYED_FLAG = 0x80
"""Bit of the kind byte: a deliver-at time follows the fixed head (see the module docstring)."""
SCHEMA_FLAG = 0x40
"""Bit of the kind byte: the producer's schema version follows (after the deliver-at time, if any)."""
_KINDS = (KIND_SINGLE, KIND_BATCH, KIND_COMPACT)

PRODUCER_NAME_BYTES_MAX = 1024
KEY_BYTES_MAX = 65535
PROPERTIES_MAX = 1024
"""Properties per message."""
PROPERTY_BYTES_MAX = 65535
"""Each property name and each value, in UTF-8 bytes."""
PAYLOAD_BYTES_MAX = 64 * 1024 * 1024
"""One message's payload; the broker's own limit (Pulsar's ``maxMessageSize``, 5 MiB) is far below."""
BATCH_MESSAGES_MAX = 65535
PRODUCERS_PER_ENTRY_MAX = 65535
CHUNK_FLAG = 0x20
"""Bit of the kind byte: a chunk head follows the fixed head (and the deliver-at time and the schema version,
if any)."""
CHUNK_UUID_BYTES_MAX = 2048
"""A chunk's uuid, in UTF-8 bytes (Pulsar's clients write ``<producer name>-<sequence id>``)."""
CHUNKS_MAX = 2**31 - 1
"""Chunks of one message: Pulsar's ``int32`` field; the total size bounds them much lower in practice."""
CHUNK_TOTAL_BYTES_MAX = 2**31 - 1
"""The whole message of a chunk entry, in bytes (Pulsar's ``int32``); the broker's setting is lower."""
CHUNK_HEAD = struct.Struct("<IIIH")
"""A chunk entry's chunk head: chunk_id, num_chunks, total_size, uuid length (the uuid follows)."""

_HEAD = struct.Struct("<2sBBH")  # magic, version, kind, name_count
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_MESSAGE = struct.Struct("<HBqqqHHI")
COMPACT_HEAD = struct.Struct("<qq")
"""A compact batch's first sequence id and publish time (after the message count)."""
COMPACT_MESSAGE = struct.Struct("<IHHq")
"""A compact message's fixed part: payload length, key length, property count, event time (also SEND's)."""
COMPACT_NO_KEY = 0xFFFF
_HAS_KEY = 0x01
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class CorruptEntryError(BrokerError, ValueError):
    """The bytes are not an entry of this format (truncated, bad magic or version, a length out of bounds)."""


class ChunkInfo(NamedTuple):
    """What a chunk entry says of its chunk (Pulsar's ``uuid``, ``chunk_id``, ``num_chunks_from_msg``,
    ``total_chunk_msg_size``); checked when the chunk is published, and again when decoded."""

    uuid: str
    chunk_id: int
    num_chunks: int
    total_size: int
    """Bytes of the whole message (the chunks' payloads joined)."""


def check_chunk(chunk: ChunkInfo, payload_bytes: int, total_max: int) -> str | None:
    """What is wrong with ``chunk`` (a chunk of ``payload_bytes`` bytes, the whole message at most
    ``total_max`` bytes), or None when it is consistent: a uuid of 1..:data:`CHUNK_UUID_BYTES_MAX` bytes,
    ``0 <= chunk_id < num_chunks <= total_size <= total_max`` (every chunk holds a byte at least; one
    chunk of a message that fits one frame is allowed) and a chunk no larger than the whole."""
    uuid_bytes = len(chunk.uuid.encode("utf-8", "surrogatepass"))
    if not 1 <= uuid_bytes <= CHUNK_UUID_BYTES_MAX:
        return f"chunk uuid of {uuid_bytes} bytes (1 to {CHUNK_UUID_BYTES_MAX})"
    if not 1 <= chunk.num_chunks <= CHUNKS_MAX:
        return f"num_chunks_from_msg {chunk.num_chunks} out of range (1 to {CHUNKS_MAX})"
    if not 0 <= chunk.chunk_id < chunk.num_chunks:
        return (
            f"chunk_id {chunk.chunk_id} out of range (0 to num_chunks_from_msg - 1 = {chunk.num_chunks - 1})"
        )
    if not 0 <= chunk.total_size <= total_max:
        return f"total_chunk_msg_size {chunk.total_size} out of range (0 to {total_max} bytes)"
    if chunk.total_size < max(chunk.num_chunks, payload_bytes):
        return (
            f"total_chunk_msg_size {chunk.total_size} is less than this chunk's {payload_bytes} bytes or "
            f"than {chunk.num_chunks} chunks of one byte"
        )
    return None


class StoredMessage(NamedTuple):
    """One message with its metadata. A named tuple rather than a frozen dataclass: it is built for every
    message published and every message read, and a frozen dataclass costs ~3x as much to build here."""

    payload: bytes
    producer_name: str
    sequence_id: int
    publish_time_ms: int
    event_time_ms: int = 0
    key: str | None = None
    properties: Mapping[str, str] = MappingProxyType({})
    """Read-only; a decoded message has a dict of its own."""
    chunk: ChunkInfo | None = None
    """Set when the message is one chunk of a larger message (a chunk entry: see the module docstring)."""
    schema_version: int = -1
    """The version of its producer's schema (-1: none); see the module docstring."""


_new_message = tuple.__new__
"""``StoredMessage`` built from its fields in one C call: the decoders build one per message read, and a named
tuple's own constructor is a Python function (twice the cost)."""


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    batched: bool
    messages: list[StoredMessage]
    deliver_at_ms: int = 0
    """Epoch milliseconds before which the entry's messages are not to be delivered; 0: no delay."""


def _delayed_head(head: bytes, deliver_at_ms: int) -> bytes:
    """``head`` (the fixed head of an entry) marked delayed until ``deliver_at_ms``, with the time."""
    if not 0 < deliver_at_ms <= _INT64_MAX:
        raise ValueError(f"deliver_at_ms={deliver_at_ms} is not a time after the epoch in 64 bits")
    return head[:3] + bytes((head[3] | DELAYED_FLAG,)) + head[4:] + _I64.pack(deliver_at_ms)


def _check_int64(name: str, value: int) -> None:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name}={value} does not fit in 64 bits")


def _encode_str(name: str, value: str, limit: int) -> bytes:
    data = value.encode("utf-8")
    if len(data) > limit:
        raise ValueError(f"{name} is {len(data)} bytes, more than {limit}")
    return data


class MessageFields(Protocol):
    """What a client says of a message: a :class:`StoredMessage` has these, and so has a parsed publish
    request (the broker adds the producer name, sequence id and publish time when it stores it)."""

    @property
    def payload(self) -> bytes: ...

    @property
    def key(self) -> str | None: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    @property
    def event_time_ms(self) -> int: ...


def _encode_message(
    parts: list[bytes],
    message: MessageFields,
    producer_index: int,
    sequence_id: int,
    publish_time_ms: int,
) -> None:
    _check_int64("sequence_id", sequence_id)
    _check_int64("publish_time_ms", publish_time_ms)
    _check_int64("event_time_ms", message.event_time_ms)
    if len(message.payload) > PAYLOAD_BYTES_MAX:
        raise ValueError(f"payload is {len(message.payload)} bytes, more than {PAYLOAD_BYTES_MAX}")
    if len(message.properties) > PROPERTIES_MAX:
        raise ValueError(f"{len(message.properties)} properties, more than {PROPERTIES_MAX}")
    key = b"" if message.key is None else _encode_str("key", message.key, KEY_BYTES_MAX)
    parts.append(
        _MESSAGE.pack(
            producer_index,
            0 if message.key is None else _HAS_KEY,
            sequence_id,
            publish_time_ms,
            message.event_time_ms,
            len(key),
            len(message.properties),
            len(message.payload),
        )
    )
    parts.append(key)
    if message.properties:
        parts.append(encode_properties(message.properties))
    parts.append(message.payload)


def encode_entry(
    messages: Sequence[MessageFields],
    producer_names: Sequence[str],
    sequence_ids: Sequence[int],
    publish_times_ms: Sequence[int],
    *,
    batched: bool,
    deliver_at_ms: int = 0,
) -> bytes:
    """An entry of ``messages`` (``kind = 2`` when ``batched``, else ``kind = 1`` holding one message),
    message ``i`` stored with ``producer_names[i]``, ``sequence_ids[i]`` and ``publish_times_ms[i]``;
    delayed until ``deliver_at_ms`` when it is not 0."""
    if not 1 <= len(messages) <= BATCH_MESSAGES_MAX:
        raise ValueError(f"an entry holds 1..{BATCH_MESSAGES_MAX} messages, got {len(messages)}")
    if not batched and len(messages) != 1:
        raise ValueError("a single-message entry holds one message")
    names = {name: index for index, name in enumerate(dict.fromkeys(producer_names))}
    if len(names) > PRODUCERS_PER_ENTRY_MAX:
        raise ValueError(f"more than {PRODUCERS_PER_ENTRY_MAX} producers in one entry")
    parts = [_HEAD.pack(MAGIC, VERSION, KIND_BATCH if batched else KIND_SINGLE, len(names))]
    if deliver_at_ms:
        parts[0] = _delayed_head(parts[0], deliver_at_ms)
    for name in names:
        encoded = _encode_str("producer_name", name, PRODUCER_NAME_BYTES_MAX)
        parts.append(_U16.pack(len(encoded)))
        parts.append(encoded)
    parts.append(_U32.pack(len(messages)))
    append = parts.append
    pack = _MESSAGE.pack
    for message, name, sequence_id, publish_time_ms in zip(
        messages, producer_names, sequence_ids, publish_times_ms, strict=True
    ):
        payload = message.payload
        size = len(payload)
        if message.key is None and not message.properties and size <= PAYLOAD_BYTES_MAX:
            # The common message, in line: no key, no properties. The 64-bit fields are checked by the
            # packing; out of range, the general path says which one.
            try:
                append(pack(names[name], 0, sequence_id, publish_time_ms, message.event_time_ms, 0, 0, size))
            except struct.error:
                _encode_message(parts, message, names[name], sequence_id, publish_time_ms)
                raise
            append(payload)
        else:
            _encode_message(parts, message, names[name], sequence_id, publish_time_ms)
    return b"".join(parts)


def encode_message(message: StoredMessage, deliver_at_ms: int = 0) -> bytes:
    """One message in its own entry (a non-batched message: ``batch_index`` -1)."""
    return encode_entry(
        (message,),
        (message.producer_name,),
        (message.sequence_id,),
        (message.publish_time_ms,),
        batched=False,
        deliver_at_ms=deliver_at_ms,
    )


def encode_batch(messages: Sequence[StoredMessage], deliver_at_ms: int = 0) -> bytes:
    """Several messages in one entry; message ``i`` is addressed with ``batch_index = i``."""
    return encode_entry(
        messages,
        [m.producer_name for m in messages],
        [m.sequence_id for m in messages],
        [m.publish_time_ms for m in messages],
        batched=True,
        deliver_at_ms=deliver_at_ms,
    )


def encode_compact_batch(
    producer_name: str,
    first_sequence_id: int,
    publish_time_ms: int,
    count: int,
    bodies: Sequence[bytes | memoryview],
    deliver_at_ms: int = 0,
    chunk: ChunkInfo | None = None,
    schema_version: int = -1,
) -> bytes:
    """A compact batch entry (``kind = 3``) of ``count`` messages whose bytes - compact messages, validated by
    :func:`check_compact_messages` - are ``bodies`` joined, with consecutive sequence ids from
    ``first_sequence_id``; delayed until ``deliver_at_ms`` when it is not 0, with the producer's
    ``schema_version`` when it is not -1; a chunk entry (one message, checked by :func:`check_chunk` before)
    when ``chunk`` is given."""
    if not 1 <= count <= BATCH_MESSAGES_MAX:
        raise ValueError(f"an entry holds 1..{BATCH_MESSAGES_MAX} messages, got {count}")
    _check_int64("sequence_id", first_sequence_id + count)
    _check_int64("publish_time_ms", publish_time_ms)
    name = _encode_str("producer_name", producer_name, PRODUCER_NAME_BYTES_MAX)
    head = _HEAD.pack(MAGIC, VERSION, KIND_COMPACT, 1)
    if deliver_at_ms:
        head = _delayed_head(head, deliver_at_ms)
    if schema_version >= 0:
        _check_int64("schema_version", schema_version)
        head = head[:3] + bytes((head[3] | SCHEMA_FLAG,)) + head[4:] + _I64.pack(schema_version)
    if chunk is not None:
        if count != 1:
            raise ValueError("a chunk entry holds one message")
        uuid = _encode_str("chunk uuid", chunk.uuid, CHUNK_UUID_BYTES_MAX)
        chunk_head = CHUNK_HEAD.pack(chunk.chunk_id, chunk.num_chunks, chunk.total_size, len(uuid))
        head = head[:3] + bytes((head[3] | CHUNK_FLAG,)) + head[4:] + chunk_head + uuid
    head += _U16.pack(len(name)) + name + _U32.pack(count)
    return b"".join((head, COMPACT_HEAD.pack(first_sequence_id, publish_time_ms), *bodies))


def compact_entry_bytes(
    body_bytes: int, producer_name: str, *, delayed: bool, chunk: ChunkInfo | None, versioned: bool = False
) -> int:
    """The size of the compact entry :func:`encode_compact_batch` makes of ``body_bytes`` bytes of compact
    messages (a publish refused for its size is checked with this before the entry exists)."""
    size = _HEAD.size + 2 + len(producer_name.encode("utf-8", "surrogatepass")) + 4 + COMPACT_HEAD.size
    if delayed:
        size += _I64.size
    if versioned:  # the producer's schema version
        size += _I64.size
    if chunk is not None:
        size += CHUNK_HEAD.size + len(chunk.uuid.encode("utf-8", "surrogatepass"))
    return size + body_bytes


def check_compact_messages(data: bytes | memoryview, pos: int, count: int) -> tuple[int, bool]:
    """Validate ``count`` compact messages from ``pos`` to exactly the end of ``data`` (bounds, UTF-8 keys and
    properties); returns (payload bytes, whether any message has a key or properties), or raises
    :class:`CorruptEntryError`. The check of every binary SEND: one ``unpack`` per message without key or
    properties (a walk past the end shows as a failed ``unpack`` or a final position off the end)."""
    unpack = COMPACT_MESSAGE.unpack_from
    header = COMPACT_MESSAGE.size
    payload_bytes = 0
    extras = False
    try:
        for _ in range(count):
            payload_len, key_len, property_count, _event = unpack(data, pos)
            pos += header
            if key_len != COMPACT_NO_KEY or property_count or payload_len > PAYLOAD_BYTES_MAX:
                extras = True
                pos = _check_compact_extras(data, pos, key_len, property_count, payload_len)
            pos += payload_len
            payload_bytes += payload_len
    except struct.error:
        raise CorruptEntryError(f"messages truncated at offset {pos}") from None
    if pos != len(data):
        if pos > len(data):
            raise CorruptEntryError(f"messages truncated: the last needs {pos - len(data)} more bytes")
        raise CorruptEntryError(f"{len(data) - pos} bytes after the last message")
    return payload_bytes, extras


def _check_compact_extras(
    data: bytes | memoryview, pos: int, key_len: int, property_count: int, payload_len: int
) -> int:
    """A compact message's key and properties (validated) and payload size; returns the payload's offset."""
    if payload_len > PAYLOAD_BYTES_MAX:
        raise CorruptEntryError(f"payload of {payload_len} bytes, more than {PAYLOAD_BYTES_MAX}")
    if key_len != COMPACT_NO_KEY:
        if pos + key_len > len(data):
            raise CorruptEntryError("messages truncated in a key")
        _utf8(data[pos : pos + key_len], "key")
        pos += key_len
    if property_count > PROPERTIES_MAX:
        raise CorruptEntryError(f"{property_count} properties, more than {PROPERTIES_MAX}")
    return _read_properties(data, pos, property_count)[1] if property_count else pos


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Properties as an entry stores them: (name_len u16, name, value_len u16, value) each."""
    parts: list[bytes] = []
    for name, value in properties.items():
        name_bytes = _encode_str("property name", name, PROPERTY_BYTES_MAX)
        value_bytes = _encode_str("property value", value, PROPERTY_BYTES_MAX)
        parts.append(_U16.pack(len(name_bytes)))
        parts.append(name_bytes)
        parts.append(_U16.pack(len(value_bytes)))
        parts.append(value_bytes)
    return b"".join(parts)


class _Reader:
    """Bounds-checked cursor over the entry bytes."""

    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.data):
            raise CorruptEntryError(f"entry truncated: need {size} bytes at offset {self.pos}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        if self.pos + fmt.size > len(self.data):
            raise CorruptEntryError(f"entry truncated at offset {self.pos}")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def text(self, size: int, what: str) -> str:
        try:
            return str(self.take(size), "utf-8")
        except UnicodeDecodeError:
            raise CorruptEntryError(f"{what} is not valid UTF-8") from None


def _read_head(reader: _Reader) -> tuple[int, list[str], int, int, int, ChunkInfo | None]:
    """The kind (without :data:`DELAYED_FLAG`, :data:`SCHEMA_FLAG` and :data:`CHUNK_FLAG`), producer names,
    message count, deliver-at time (0: none), schema version (-1: none) and chunk (None: not a chunk entry)
    of an entry, leaving ``reader`` at its first message."""
    magic, version, kind, name_count = reader.unpack(_HEAD)
    if magic != MAGIC:
        raise CorruptEntryError("not a Magnetar entry (bad magic)")
    if version != VERSION:
        raise CorruptEntryError(f"unsupported entry format version {version}")
    deliver_at_ms = 0
    if kind & DELAYED_FLAG:
        kind &= ~DELAYED_FLAG
        (deliver_at_ms,) = reader.unpack(_I64)
        if deliver_at_ms <= 0:
            raise CorruptEntryError(f"deliver-at time {deliver_at_ms} is not after the epoch")
    schema_version = -1
    if kind & SCHEMA_FLAG:
        kind &= ~SCHEMA_FLAG
        (schema_version,) = reader.unpack(_I64)
        if schema_version < 0:
            raise CorruptEntryError(f"schema version {schema_version} is negative")
    chunk = None
    if kind & CHUNK_FLAG:
        kind &= ~CHUNK_FLAG
        chunk = _read_chunk(reader)
    if kind not in _KINDS:
        raise CorruptEntryError(f"unknown entry kind {kind}")
    if kind == KIND_COMPACT and name_count != 1:
        raise CorruptEntryError(f"a compact batch names {name_count} producers, not 1")
    names = []
    for _ in range(name_count):
        (length,) = reader.unpack(_U16)
        if length > PRODUCER_NAME_BYTES_MAX:
            raise CorruptEntryError(f"producer name of {length} bytes")
        names.append(reader.text(length, "producer name"))
    (count,) = reader.unpack(_U32)
    if not 1 <= count <= BATCH_MESSAGES_MAX:
        raise CorruptEntryError(f"entry claims {count} messages")
    if kind == KIND_SINGLE and count != 1:
        raise CorruptEntryError("a single-message entry holds more than one message")
    if chunk is not None and (kind != KIND_COMPACT or count != 1):
        raise CorruptEntryError("a chunk entry holds one compact message")
    fixed = (
        COMPACT_HEAD.size + count * COMPACT_MESSAGE.size if kind == KIND_COMPACT else count * _MESSAGE.size
    )
    if fixed > len(reader.data) - reader.pos:
        raise CorruptEntryError(f"entry too short for {count} messages")
    return kind, names, count, deliver_at_ms, schema_version, chunk


def _read_chunk(reader: _Reader) -> ChunkInfo:
    """A chunk entry's chunk head (checked as when it was published, against the largest total)."""
    chunk_id, num_chunks, total_size, uuid_len = reader.unpack(CHUNK_HEAD)
    if uuid_len > CHUNK_UUID_BYTES_MAX:
        raise CorruptEntryError(f"chunk uuid of {uuid_len} bytes")
    chunk = ChunkInfo(reader.text(uuid_len, "chunk uuid"), chunk_id, num_chunks, total_size)
    fault = check_chunk(chunk, 0, CHUNK_TOTAL_BYTES_MAX)
    if fault is not None:
        raise CorruptEntryError(fault)
    return chunk


def _utf8(data: bytes | memoryview, what: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise CorruptEntryError(f"{what} is not valid UTF-8") from None


def _read_properties(data: bytes | memoryview, pos: int, count: int) -> tuple[dict[str, str], int]:
    properties: dict[str, str] = {}
    for _ in range(count):
        texts = []
        for what in ("property name", "property value"):
            if pos + 2 > len(data):
                raise CorruptEntryError(f"entry truncated at offset {pos}")
            (size,) = _U16.unpack_from(data, pos)
            pos += 2
            if pos + size > len(data):
                raise CorruptEntryError(f"entry truncated: need {size} bytes at offset {pos}")
            texts.append(_utf8(data[pos : pos + size], what))
            pos += size
        properties[texts[0]] = texts[1]
    return properties, pos


def _read_messages(
    data: bytes | memoryview, pos: int, count: int, names: list[str], schema_version: int
) -> list[StoredMessage]:
    """The ``count`` messages from ``pos`` on, to exactly the end of ``data`` (one inlined loop: this runs
    for every message a subscription reads)."""
    end = len(data)
    unpack = _MESSAGE.unpack_from
    header = _MESSAGE.size
    name_count = len(names)
    messages: list[StoredMessage] = []
    for _ in range(count):
        if pos + header > end:
            raise CorruptEntryError(f"entry truncated at offset {pos}")
        producer, flags, sequence_id, publish, event, key_len, prop_count, payload_len = unpack(data, pos)
        pos += header
        if producer >= name_count:
            raise CorruptEntryError(f"producer index {producer} outside the name table")
        if flags & ~_HAS_KEY:
            raise CorruptEntryError(f"unknown message flags {flags:#x}")
        if prop_count > PROPERTIES_MAX or payload_len > PAYLOAD_BYTES_MAX:
            raise CorruptEntryError("message field count or size out of bounds")
        key = None
        if flags:
            if pos + key_len > end:
                raise CorruptEntryError(f"entry truncated: need {key_len} bytes at offset {pos}")
            key = _utf8(data[pos : pos + key_len], "key")
            pos += key_len
        elif key_len:
            raise CorruptEntryError("key bytes without the has-key flag")
        properties: dict[str, str] = {}
        if prop_count:
            properties, pos = _read_properties(data, pos, prop_count)
        payload_end = pos + payload_len
        if payload_end > end:
            raise CorruptEntryError(f"entry truncated: need {payload_len} bytes at offset {pos}")
        payload = data[pos:payload_end]
        messages.append(
            _new_message(
                StoredMessage,
                (
                    payload if isinstance(payload, bytes) else payload.tobytes(),
                    names[producer],
                    sequence_id,
                    publish,
                    event,
                    key,
                    properties,
                    None,
                    schema_version,
                ),
            )
        )
        pos = payload_end
    if pos != end:
        raise CorruptEntryError(f"{end - pos} trailing bytes after the last message")
    return messages


def decode_entry(data: bytes | bytearray | memoryview) -> DecodedEntry:
    """All messages of an entry; :class:`CorruptEntryError` if the bytes are not a well-formed entry. A
    ``memoryview`` (the managed ledger's read, its prefix split off) is copied into ``bytes`` once and decoded
    from there: one memcpy of the entry costs less than slicing and unpacking a memoryview per message (a
    third of the decode of a batch of small messages), and each payload is then a slice of ``bytes``."""
    buffer = data if isinstance(data, bytes) else bytes(data)
    reader = _Reader(memoryview(buffer))
    kind, names, count, deliver_at_ms, schema, chunk = _read_head(reader)
    if kind == KIND_COMPACT:
        messages = _read_compact_messages(buffer, reader.pos, count, names[0], schema)
        if chunk is not None:
            if len(messages[0].payload) > chunk.total_size:
                raise CorruptEntryError(
                    f"a chunk of {len(messages[0].payload)} bytes, more than its message's total"
                )
            messages[0] = messages[0]._replace(chunk=chunk)
        return DecodedEntry(True, messages, deliver_at_ms)
    return DecodedEntry(
        kind == KIND_BATCH, _read_messages(buffer, reader.pos, count, names, schema), deliver_at_ms
    )


def _read_compact_messages(
    data: bytes | memoryview, pos: int, count: int, name: str, schema_version: int
) -> list[StoredMessage]:
    """A compact batch's messages, from its sequence and publish time at ``pos`` to exactly the end."""
    sequence_id, publish = COMPACT_HEAD.unpack_from(data, pos)
    pos += COMPACT_HEAD.size
    end = len(data)
    unpack = COMPACT_MESSAGE.unpack_from
    header = COMPACT_MESSAGE.size
    messages: list[StoredMessage] = []
    for _ in range(count):
        if pos + header > end:
            raise CorruptEntryError(f"entry truncated at offset {pos}")
        payload_len, key_len, prop_count, event = unpack(data, pos)
        pos += header
        key = None
        properties: dict[str, str] = {}
        if key_len != COMPACT_NO_KEY:
            if pos + key_len > end:
                raise CorruptEntryError(f"entry truncated: need {key_len} bytes at offset {pos}")
            key = _utf8(data[pos : pos + key_len], "key")
            pos += key_len
        if prop_count:
            if prop_count > PROPERTIES_MAX:
                raise CorruptEntryError(f"{prop_count} properties, more than {PROPERTIES_MAX}")
            properties, pos = _read_properties(data, pos, prop_count)
        payload_end = pos + payload_len
        if payload_end > end or payload_len > PAYLOAD_BYTES_MAX:
            raise CorruptEntryError(f"entry truncated or too large: {payload_len} bytes at offset {pos}")
        payload = data[pos:payload_end]
        messages.append(
            _new_message(
                StoredMessage,
                (
                    payload if isinstance(payload, bytes) else payload.tobytes(),
                    name,
                    sequence_id,
                    publish,
                    event,
                    key,
                    properties,
                    None,
                    schema_version,
                ),
            )
        )
        sequence_id += 1
        pos = payload_end
    if pos != end:
        raise CorruptEntryError(f"{end - pos} trailing bytes after the last message")
    return messages


def entry_message_count(data: bytes | bytearray | memoryview) -> int:
    """How many messages an entry holds, reading only its head (for permits and backlog counts)."""
    return _read_head(_Reader(memoryview(data)))[2]


def entry_deliver_at(data: bytes | bytearray | memoryview) -> int:
    """The deliver-at time of an entry (epoch ms; 0 when it has no delay), reading only its head."""
    return _read_head(_Reader(memoryview(data)))[3]
