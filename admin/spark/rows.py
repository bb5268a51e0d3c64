"""The source's row schema, and range-read responses decoded straight into Arrow record batches.

Columns (one row per message; Pulsar's connector names them ``__key``, ``__topic``, ... - §7.3):

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
conversion, which is most of the cost of a read. :func:`decode_batch` walks one response body (frame
version 2, :mod:`magnetar.admin.range_frames`) with ``unpack_from`` at offsets, appending to column lists,
and builds the batch with the Arrow types Spark expects (taken from Spark's own ``to_arrow_schema`` so they
match what the engine checks).
"""

from __future__ import annotations

import functools
import struct
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
    KEY_LEN,
    KIND_END,
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
from magnetar.broker.message_id import write_varint

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
    properties: list[list[tuple[str, str]]] = field(default_factory=list)
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


class _Names:
    """Producer names decoded once per response (a response repeats a handful of them)."""

    def __init__(self) -> None:
        self._known: dict[bytes, str] = {}

    def get(self, body: bytes, start: int, size: int) -> str:
        raw = body[start : start + size]
        name = self._known.get(raw)
        if name is None:
            name = self._known[raw] = _text(body, start, size)
        return name


def _append_message(
    out: Columns, body: bytes, start: int, stop: int, names: _Names
) -> tuple[int, int, int, int]:
    """Decode the message frame ``body[start:stop]`` into ``out`` (all but the message id); returns its
    ledger, entry, batch index and batch size."""
    if body[start] == KIND_MESSAGE_V2:
        _, ledger, entry, index, batch_size, published, event, _, name_len = MESSAGE_V2_HEAD.unpack_from(
            body, start
        )
        cursor = start + MESSAGE_V2_HEAD.size
        out.producers.append(names.get(body, cursor, name_len))
        cursor += name_len
    elif body[start] == KIND_MESSAGE:
        _, ledger, entry, index, batch_size, published, event = MESSAGE_HEAD.unpack_from(body, start)
        cursor = start + MESSAGE_HEAD.size
        out.producers.append("")
    else:
        raise FrameError(f"unknown frame kind {body[start]}")
    (key_len,) = KEY_LEN.unpack_from(body, cursor)
    cursor += 4
    out.keys.append(None if key_len == -1 else body[cursor : cursor + key_len])
    cursor += max(key_len, 0)
    (count,) = U16.unpack_from(body, cursor)
    cursor += 2
    props: list[tuple[str, str]] = []
    for _ in range(count):
        (name_size,) = U16.unpack_from(body, cursor)
        prop_name = _text(body, cursor + 2, name_size)
        cursor += 2 + name_size
        (value_size,) = U32.unpack_from(body, cursor)
        props.append((prop_name, _text(body, cursor + 4, value_size)))
        cursor += 4 + value_size
    (payload_len,) = U32.unpack_from(body, cursor)
    cursor += 4
    if cursor + payload_len != stop:
        raise FrameError("message frame length does not match its fields")
    out.values.append(body[cursor:stop])
    out.ledgers.append(ledger)
    out.entries.append(entry)
    out.publish_us.append(published * 1000)
    out.event_us.append(event * 1000 if event else None)
    out.properties.append(props)
    return ledger, entry, index, batch_size


def decode_body(body: bytes, partition: int) -> Decoded:
    """Decode one complete range-read response (message frames, then the end frame)."""
    out = Columns()
    names = _Names()
    current: tuple[int, int] | None = None
    first: tuple[int, int] | None = None
    prefix = b""
    pos, size = 0, len(body)
    while pos + LENGTH.size < size:
        (length,) = LENGTH.unpack_from(body, pos)
        start, stop = pos + LENGTH.size, pos + LENGTH.size + length
        if length == 0 or stop > size:
            raise FrameError(f"bad or truncated frame of {length} bytes")
        if body[start] == KIND_END:
            if length != END.size or stop != size:
                raise FrameError("malformed end frame or data after it")
            _, ledger, entry, sent, complete = END.unpack_from(body, start)
            return Decoded(out, RangeEnd((ledger, entry), sent, bool(complete)), first)
        try:
            ledger, entry, index, batch_size = _append_message(out, body, start, stop, names)
        except struct.error:
            raise FrameError("truncated message frame") from None
        if (ledger, entry) != current:
            current = (ledger, entry)
            prefix = message_id_prefix(ledger, entry, partition)
            first = first or current
        out.message_ids.append(prefix + (_SINGLE if index == -1 else _batch_fields(index, batch_size)))
        pos = stop
    raise FrameError("the response ended without an end frame")


def record_batch(columns: Columns, topic: str, partition: int) -> Any:
    """The columns as a ``pyarrow.RecordBatch`` in the schema Spark expects."""
    schema = arrow_schema()
    rows = len(columns)
    data = [columns.keys, columns.values, [topic] * rows, [partition] * rows, columns.message_ids,
            columns.ledgers, columns.entries, columns.publish_us, columns.event_us, columns.properties,
            columns.producers]  # fmt: skip
    arrays = [pa.array(values, type=schema.field(i).type) for i, values in enumerate(data)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
