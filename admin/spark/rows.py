"""The source's row schema, and range-read responses decoded straight into Arrow record batches.

Columns (one row per message; Pulsar's connector names them ``__key``, ``__topic``, ... - docs/upstream.md,
Pulsar §7.3):

| column | type | content |
|---|---|---|
| ``key`` | binary | the message key (UTF-8 bytes), null without one |
| ``value`` | binary | the payload |
| ``topic`` | string | the topic's full name (a partitioned topic's own name, not ``-partition-N``) |
| ``partition`` | int | the partition index, -1 for a non-partitioned topic |
| ``messageId`` | binary | serialized Pulsar ``MessageIdData`` (the WebSocket ``messageId``, not base64) |
| ``ledgerId``, ``entryId`` | long | where the entry is stored (the offsets use them) |
| ``publishTime`` | timestamp | when the broker stored it |
| ``eventTime`` | timestamp | the producer's event time, null when unset (0) |
| ``properties`` | map<string,string> | the message properties |
| ``producerName`` | string | the producer's name |

A Python data source may return ``pyarrow.RecordBatch`` es instead of tuples; Spark then skips its per-row
conversion, which is most of the cost of a read. :func:`decode_body` walks one response body (entry frames,
version 3 of :mod:`magnetar.admin.range_frames`, or message frames) with ``unpack_from`` at offsets, appending
to column lists,
and builds the batch with the Arrow types Spark expects (taken from Spark's own ``to_arrow_schema`` so they
match what the engine checks).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.admin.range_frames import (
    END,
    ENTRY_HEAD,
    KEY_LEN,
    KIND_END,
    KIND_ENTRY,
    KIND_MESSAGE,
    KIND_MESSAGE_V2,
    LENGTH,
    MESSAGE_HEAD,
    MESSAGE_V2_HEAD,
    U16,
    U32,
    FrameError,
    RangeEnd,
)
from magnetar.broker.wire import (
    CHUNK_FLAG,
    CHUNK_HEAD,
    COMPACT_HEAD,
    COMPACT_MESSAGE,
    COMPACT_NO_KEY,
    DELAYED_FLAG,
    write_varint,
)
from magnetar.broker.wire import KIND_BATCH as ENTRY_BATCH
from magnetar.broker.wire import KIND_COMPACT as ENTRY_COMPACT
from magnetar.broker.wire import KIND_SINGLE as ENTRY_SINGLE
from magnetar.broker.wire import MAGIC as ENTRY_MAGIC
from magnetar.broker.wire import VERSION as ENTRY_VERSION
from magnetar.managed_ledger.entry_prefix import MAGIC as PREFIX_MAGIC
from magnetar.managed_ledger.entry_prefix import SIZE as PREFIX_SIZE

COLUMNS = ("key", "value", "topic", "partition", "messageId", "ledgerId", "entryId", "publishTime",
           "eventTime", "properties", "producerName")  # fmt: skip
_U64 = 2**64 - 1


def spark_schema() -> StructType:
    """The ``StructType`` of the rows."""
    return StructType([
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("messageId", BinaryType(), False),
        StructField("ledgerId", LongType(), False),
        StructField("entryId", LongType(), False),
        StructField("publishTime", TimestampType(), False),
        StructField("eventTime", TimestampType(), True),
        StructField("properties", MapType(StringType(), StringType(), True), False),
        StructField("producerName", StringType(), False),
    ])  # fmt: skip


@functools.cache
def arrow_schema() -> Any:
    """The Arrow schema Spark checks a returned batch against (Spark's own conversion of the schema)."""
    return to_arrow_schema(spark_schema(), timezone="UTC")


def message_id_prefix(ledger_id: int, entry_id: int, partition: int) -> bytes:
    """``MessageIdData`` fields 1-3 (ledger, entry, partition) as ``MessageId.to_bytes`` writes them."""
    out = bytearray(b"\x08")
    write_varint(out, ledger_id & _U64)
    out.append(0x10)
    write_varint(out, entry_id & _U64)
    if partition >= 0:
        out.append(0x18)
        write_varint(out, partition)
    return bytes(out)


def _batch_fields(batch_index: int, batch_size: int) -> bytes:
    out = bytearray()
    if batch_index != -1:
        out.append(0x20)
        write_varint(out, batch_index & _U64)
    if batch_size > -1:
        out.append(0x30)
        write_varint(out, batch_size)
    return bytes(out)


_SINGLE = _batch_fields(-1, 0)


@dataclass
class Columns:
    """Column lists of the messages decoded so far (one split's worth, or one response's)."""

    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    message_ids: list[bytes] = field(default_factory=list)
    ledgers: list[int] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)
    publish_us: list[int] = field(default_factory=list)
    event_us: list[int | None] = field(default_factory=list)
    properties: list[Sequence[tuple[str, str]]] = field(default_factory=list)
    producers: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class Decoded:
    columns: Columns
    end: RangeEnd
    first_entry: tuple[int, int] | None
    """The position of the first entry in the response (None: it held none)."""


def _text(data: bytes, start: int, size: int) -> str:
    try:
        return data[start : start + size].decode()
    except UnicodeDecodeError as exc:
        raise FrameError(f"invalid UTF-8 in a frame: {exc}") from None


_KEY_COUNT_PAYLOAD = struct.Struct(">iHI")  # key length, property count, payload length: no key, no property
# The stored entry format (little-endian; layout in magnetar.broker.wire.entry_format, whose decoder the tests
# compare with): head, then per message producer index, flags, sequence id, publish, event, key length,
# property count, payload length.
_ENTRY_HEAD = struct.Struct("<2sBBH")
_ENTRY_MESSAGE = struct.Struct("<HBqqqHHI")
_LE_U16 = struct.Struct("<H")
_LE_U32 = struct.Struct("<I")


def _entry_properties(body: bytes, cursor: int, count: int) -> tuple[list[tuple[str, str]], int]:
    props: list[tuple[str, str]] = []
    for _ in range(count):
        (name_size,) = _LE_U16.unpack_from(body, cursor)
        name = _text(body, cursor + 2, name_size)
        cursor += 2 + name_size
        (value_size,) = _LE_U16.unpack_from(body, cursor)
        props.append((name, _text(body, cursor + 2, value_size)))
        cursor += 2 + value_size
    return props, cursor


def _properties(body: bytes, cursor: int, count: int) -> tuple[list[tuple[str, str]], int]:
    props: list[tuple[str, str]] = []
    for _ in range(count):
        (name_size,) = U16.unpack_from(body, cursor)
        name = _text(body, cursor + 2, name_size)
        cursor += 2 + name_size
        (value_size,) = U32.unpack_from(body, cursor)
        props.append((name, _text(body, cursor + 4, value_size)))
        cursor += 4 + value_size
    return props, cursor


class _Decoder:
    """One response's frames into :class:`Columns`. The loop is the source's hot path (every message of a
    read passes through it), so it binds what it calls to locals and takes a one-``unpack`` fast path for
    messages without key and properties."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.out = Columns()
        self.names: dict[bytes, str] = {}
        self.suffixes: dict[int, bytes] = {}
        self.first: tuple[int, int] | None = None

    def name(self, body: bytes, start: int, size: int) -> str:
        raw = body[start : start + size]
        name = self.names.get(raw)
        if name is None:
            name = self.names[raw] = _text(body, start, size)
        return name

    def suffix(self, index: int, batch_size: int) -> bytes:
        key = (index + 1) << 32 | batch_size
        suffix = self.suffixes.get(key)
        if suffix is None:
            suffix = self.suffixes[key] = _batch_fields(index, batch_size)
        return suffix

    def run(self, body: bytes) -> Decoded:  # noqa: PLR0915 - one loop on purpose (see the class docstring)
        out = self.out
        keys, values, ids = out.keys.append, out.values.append, out.message_ids.append
        ledgers, entries, producers = out.ledgers.append, out.entries.append, out.producers.append
        publish, event_times, properties = out.publish_us.append, out.event_us.append, out.properties.append
        length_of, v2_head, v1_head = (
            LENGTH.unpack_from,
            MESSAGE_V2_HEAD.unpack_from,
            MESSAGE_HEAD.unpack_from,
        )
        plain, key_len_of, u16, u32 = (
            _KEY_COUNT_PAYLOAD.unpack_from,
            KEY_LEN.unpack_from,
            U16.unpack_from,
            U32.unpack_from,
        )
        v2_size, v1_size = MESSAGE_V2_HEAD.size, MESSAGE_HEAD.size
        current, prefix, no_props = (-1, -1), b"", ()
        pos, size = 0, len(body)
        while pos + 4 < size:
            (length,) = length_of(body, pos)
            start = pos + 4
            stop = start + length
            if length == 0 or stop > size:
                raise FrameError(f"bad or truncated frame of {length} bytes")
            kind = body[start]
            if kind == KIND_ENTRY:
                self.entry(body, start, stop)
                pos = stop
                continue
            if kind == KIND_MESSAGE_V2:
                _, ledger, entry, index, batch_size, published, event, _, name_len = v2_head(body, start)
                cursor = start + v2_size
                producers(self.name(body, cursor, name_len))
                cursor += name_len
            elif kind == KIND_MESSAGE:
                _, ledger, entry, index, batch_size, published, event = v1_head(body, start)
                cursor = start + v1_size
                producers("")
            elif kind == KIND_END:
                return self.end(body, start, length, stop)
            else:
                raise FrameError(f"unknown frame kind {kind}")
            key_len, count, payload_len = plain(body, cursor)
            if key_len == -1 and count == 0:
                keys(None)
                properties(no_props)
                cursor += 10
            else:
                (key_len,) = key_len_of(body, cursor)
                cursor += 4
                keys(None if key_len == -1 else body[cursor : cursor + key_len])
                cursor += max(key_len, 0)
                (count,) = u16(body, cursor)
                props, cursor = _properties(body, cursor + 2, count)
                properties(props)
                (payload_len,) = u32(body, cursor)
                cursor += 4
            if cursor + payload_len != stop:
                raise FrameError("message frame length does not match its fields")
            values(body[cursor:stop])
            if ledger != current[0] or entry != current[1]:
                current = (ledger, entry)
                prefix = message_id_prefix(ledger, entry, self.partition)
                self.first = self.first or current
            ids(prefix + (_SINGLE if index == -1 else self.suffix(index, batch_size)))
            ledgers(ledger)
            entries(entry)
            publish(published * 1000)
            event_times(event * 1000 if event else None)
            pos = stop
        raise FrameError("the response ended without an end frame")

    def entry(self, body: bytes, start: int, stop: int) -> None:
        """An entry frame: the stored entry's layout (:mod:`magnetar.broker.wire.entry_format`) read in
        place."""
        _, ledger, entry = ENTRY_HEAD.unpack_from(body, start)
        cursor = start + ENTRY_HEAD.size
        if body[cursor : cursor + 2] == PREFIX_MAGIC:  # the managed ledger's message index prefix
            cursor += PREFIX_SIZE
        magic, version, kind, name_count = _ENTRY_HEAD.unpack_from(body, cursor)
        cursor += _ENTRY_HEAD.size
        if kind & DELAYED_FLAG:  # a delayed entry: its deliver-at time (i64) is not a column
            kind &= ~DELAYED_FLAG
            cursor += 8
        if kind & CHUNK_FLAG:  # one chunk of a larger message: a row of its own, with the chunk's bytes
            kind &= ~CHUNK_FLAG
            uuid_len = CHUNK_HEAD.unpack_from(body, cursor)[3]
            cursor += CHUNK_HEAD.size + uuid_len
        known = (ENTRY_SINGLE, ENTRY_BATCH, ENTRY_COMPACT)
        if magic != ENTRY_MAGIC or version != ENTRY_VERSION or kind not in known:
            raise FrameError(f"entry {ledger}:{entry} is not in a known entry format")
        names = []
        for _ in range(name_count):
            (size,) = _LE_U16.unpack_from(body, cursor)
            names.append(self.name(body, cursor + 2, size))
            cursor += 2 + size
        (count,) = _LE_U32.unpack_from(body, cursor)
        cursor += 4
        message_size = COMPACT_MESSAGE.size if kind == ENTRY_COMPACT else _ENTRY_MESSAGE.size
        if count * message_size > stop - cursor:
            raise FrameError(f"entry {ledger}:{entry} claims {count} messages")
        if self.first is None:
            self.first = (ledger, entry)
        if kind == ENTRY_COMPACT:
            cursor = self.compact_messages(body, cursor, count, (ledger, entry), names[0])
        else:
            cursor = self.messages(body, cursor, count, (ledger, entry), names, kind == ENTRY_BATCH)
        if cursor != stop:
            raise FrameError(f"entry {ledger}:{entry}: its messages do not fill the frame")

    def messages(
        self, body: bytes, cursor: int, count: int, where: tuple[int, int], names: list[str], batched: bool
    ) -> int:
        """The messages of a single-message or batch entry; returns the offset after them."""
        out = self.out
        keys, ids = out.keys.append, out.message_ids.append
        ledgers, entries, producers = out.ledgers.append, out.entries.append, out.producers.append
        publish, event_times = out.publish_us.append, out.event_us.append
        message_of = _ENTRY_MESSAGE.unpack_from
        ledger, entry = where
        prefix = message_id_prefix(ledger, entry, self.partition)
        for index in range(count):
            producer, flags, _, published, event, key_len, prop_count, payload_len = message_of(body, cursor)
            cursor += _ENTRY_MESSAGE.size
            keys(body[cursor : cursor + key_len] if flags & 1 else None)
            cursor = self.properties_and_value(body, cursor + key_len, prop_count, payload_len)
            producers(names[producer])
            ids(prefix + (self.suffix(index, count) if batched else _SINGLE))
            ledgers(ledger)
            entries(entry)
            publish(published * 1000)
            event_times(event * 1000 if event else None)
        return cursor

    def properties_and_value(self, body: bytes, cursor: int, prop_count: int, payload_len: int) -> int:
        """A stored message's properties and payload (the same layout in every entry kind); returns the offset
        after them."""
        if prop_count:
            props, cursor = _entry_properties(body, cursor, prop_count)
            self.out.properties.append(props)
        else:
            self.out.properties.append(())
        self.out.values.append(body[cursor : cursor + payload_len])
        return cursor + payload_len

    def compact_messages(
        self, body: bytes, cursor: int, count: int, where: tuple[int, int], name: str
    ) -> int:
        """The messages of a compact batch (one producer, one publish time); returns the offset after them."""
        out = self.out
        keys, ids, event_times = out.keys.append, out.message_ids.append, out.event_us.append
        message_of = COMPACT_MESSAGE.unpack_from
        ledger, entry = where
        prefix = message_id_prefix(ledger, entry, self.partition)
        _, published = COMPACT_HEAD.unpack_from(body, cursor)
        cursor += COMPACT_HEAD.size
        for index in range(count):
            payload_len, key_len, prop_count, event = message_of(body, cursor)
            cursor += COMPACT_MESSAGE.size
            if key_len == COMPACT_NO_KEY:
                keys(None)
            else:
                keys(body[cursor : cursor + key_len])
                cursor += key_len
            cursor = self.properties_and_value(body, cursor, prop_count, payload_len)
            ids(prefix + self.suffix(index, count))
            event_times(event * 1000 if event else None)
        out.producers.extend([name] * count)
        out.ledgers.extend([ledger] * count)
        out.entries.extend([entry] * count)
        out.publish_us.extend([published * 1000] * count)
        return cursor

    def end(self, body: bytes, start: int, length: int, stop: int) -> Decoded:
        if length != END.size or stop != len(body):
            raise FrameError("malformed end frame or data after it")
        _, ledger, entry, sent, complete = END.unpack_from(body, start)
        return Decoded(self.out, RangeEnd((ledger, entry), sent, bool(complete)), self.first)


def decode_body(body: bytes, partition: int) -> Decoded:
    """Decode one complete range-read response (message frames, then the end frame)."""
    try:
        return _Decoder(partition).run(body)
    except (struct.error, IndexError):
        raise FrameError("truncated frame or a producer outside the entry's name table") from None


def record_batch(columns: Columns, topic: str, partition: int) -> Any:
    """The columns as a ``pyarrow.RecordBatch`` in the schema Spark expects."""
    schema = arrow_schema()
    rows = len(columns)
    data = [columns.keys, columns.values, [topic] * rows, [partition] * rows, columns.message_ids,
            columns.ledgers, columns.entries, columns.publish_us, columns.event_us, columns.properties,
            columns.producers]  # fmt: skip
    arrays = [pa.array(values, type=schema.field(i).type) for i, values in enumerate(data)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
