"""The framing of range reads (``GET .../entries``), shared by the admin endpoint and the Spark source.

Sans-IO and light (no trio, no pydantic, no managed ledger; only the broker's entry format), so a Spark
worker imports it cheaply.
All integers are big-endian::

    stream  := frame* end
    frame   := length u32 | kind u8 | body            # length counts kind + body
    message := kind 1 | ledger i64 | entry i64 | batch_index i32 | batch_size i32
               | publish_time_ms i64 | event_time_ms i64 (0 = none)
               | key_len i32 (-1 = no key) | key (UTF-8)
               | property_count u16 | property_count * (name_len u16, name, value_len u32, value)
               | payload_len u32 | payload
    message_v2 := kind 3 | ledger i64 | entry i64 | batch_index i32 | batch_size i32
               | publish_time_ms i64 | event_time_ms i64 (0 = none) | sequence_id i64
               | producer_len u16 | producer_name (UTF-8)
               | key_len i32 (-1 = no key) | key (UTF-8)
               | property_count u16 | property_count * (name_len u16, name, value_len u32, value)
               | payload_len u32 | payload
    entry   := kind 4 | ledger i64 | entry i64 | stored entry bytes
               # the entry exactly as stored: the managed ledger's message index prefix when it has one
               # (magnetar.managed_ledger.entry_prefix), then the broker's entry
               # (magnetar.broker.wire.entry_format: its own magic and version byte, a producer-name
               # table, then every message with all its metadata)
    end     := kind 2 | next_ledger i64 | next_entry i64 | entries_sent u32 | complete u8
               # complete = 1: the range is exhausted; else continue with from=next_ledger:next_entry

Versions. Version 1 (the default of the endpoint) sends ``message`` frames; a client asks for version 2 with
``frameVersion=2`` and then receives ``message_v2`` frames, which add the producer name and the sequence id;
with ``frameVersion=3`` it receives ``entry`` frames: the broker forwards each stored entry untouched and does
no per-message work (the Spark source uses it, so that decoding scales out with its executors). A server
never sends a kind the client did not ask for, so a version-1 decoder keeps working; this decoder reads every
kind (a version-1 message decodes with ``producer_name=""`` and ``sequence_id=-1``; an entry frame yields one
message per message of the entry). Future versions add new kinds the same way.

``batch_index`` is -1 and ``batch_size`` 0 for an entry holding one message; a broker-side batch entry yields
one frame per message with ``batch_index`` 0..n-1 and ``batch_size`` n.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from magnetar.broker.wire import CorruptEntryError, decode_entry
from magnetar.managed_ledger.entry_prefix import split

FRAME_VERSION_MAX = 3
FRAME_BYTES_MAX = 128 * 1024 * 1024
"""Largest frame a decoder accepts (a message is bounded by the entry format far below this)."""

KIND_MESSAGE = 1
KIND_END = 2
KIND_MESSAGE_V2 = 3
KIND_ENTRY = 4
ENTRY_HEAD = struct.Struct(">Bqq")  # kind, ledger, entry
LENGTH = struct.Struct(">I")
MESSAGE_HEAD = struct.Struct(">Bqqiiqq")  # kind, ledger, entry, batch index, batch size, publish, event
MESSAGE_V2_HEAD = struct.Struct(">BqqiiqqqH")  # ... + sequence id, producer name length
KEY_LEN = struct.Struct(">i")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
END = struct.Struct(">BqqIB")


class FrameError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RangeMessage:
    ledger_id: int
    entry_id: int
    batch_index: int
    batch_size: int
    publish_time_ms: int
    event_time_ms: int
    key: str | None
    properties: Mapping[str, str] = field(default_factory=dict)
    payload: bytes = b""
    producer_name: str = ""
    sequence_id: int = -1


@dataclass(frozen=True, slots=True)
class RangeEnd:
    next_position: tuple[int, int]
    entries_sent: int
    complete: bool


# -- encoding --------------------------------------------------------------------------------------------


def encode_message_frame(m: RangeMessage, version: int = 1) -> bytes:
    """One message frame of framing ``version`` (1: no producer name or sequence id; 2: with both)."""
    key = b"" if m.key is None else m.key.encode()
    if version == 1:
        head = MESSAGE_HEAD.pack(KIND_MESSAGE, m.ledger_id, m.entry_id, m.batch_index, m.batch_size,
                                 m.publish_time_ms, m.event_time_ms)  # fmt: skip
        parts = [head]
    elif version == 2:
        producer = m.producer_name.encode()
        head = MESSAGE_V2_HEAD.pack(
            KIND_MESSAGE_V2, m.ledger_id, m.entry_id, m.batch_index, m.batch_size,
            m.publish_time_ms, m.event_time_ms, m.sequence_id, len(producer),
        )  # fmt: skip
        parts = [head, producer]
    else:
        raise ValueError(f"unknown frame version {version}")
    parts += [KEY_LEN.pack(-1 if m.key is None else len(key)), key, U16.pack(len(m.properties))]
    for name, value in m.properties.items():
        name_bytes, value_bytes = name.encode(), value.encode()
        parts += [U16.pack(len(name_bytes)), name_bytes, U32.pack(len(value_bytes)), value_bytes]
    parts += [U32.pack(len(m.payload)), m.payload]
    body = b"".join(parts)
    return LENGTH.pack(len(body)) + body


def encode_entry_frame(ledger_id: int, entry_id: int, data: bytes) -> bytes:
    """A version-3 frame: one stored entry as it is."""
    return LENGTH.pack(ENTRY_HEAD.size + len(data)) + ENTRY_HEAD.pack(KIND_ENTRY, ledger_id, entry_id) + data


def _decode_entry(body: memoryview) -> list[RangeMessage]:
    if len(body) < ENTRY_HEAD.size:
        raise FrameError("truncated entry frame")
    _, ledger, entry = ENTRY_HEAD.unpack_from(body)
    try:
        decoded = decode_entry(split(body[ENTRY_HEAD.size :])[1])  # the stored bytes: skip the index prefix
    except (CorruptEntryError, ValueError) as exc:
        raise FrameError(f"entry {ledger}:{entry} cannot be decoded: {exc}") from None
    size = len(decoded.messages) if decoded.batched else 0
    return [
        RangeMessage(ledger, entry, i if decoded.batched else -1, size, m.publish_time_ms, m.event_time_ms,
                     m.key, m.properties, m.payload, m.producer_name, m.sequence_id)
        for i, m in enumerate(decoded.messages)
    ]  # fmt: skip


def encode_end_frame(end: RangeEnd) -> bytes:
    body = END.pack(KIND_END, end.next_position[0], end.next_position[1], end.entries_sent, int(end.complete))
    return LENGTH.pack(len(body)) + body


# -- decoding --------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise FrameError("truncated frame")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))

    def text(self, size: int) -> str:
        try:
            return bytes(self.take(size)).decode()
        except UnicodeDecodeError as exc:
            raise FrameError(f"invalid UTF-8 in a frame: {exc}") from None


def _decode_message(body: memoryview) -> RangeMessage:
    r = _Reader(body)
    producer, sequence_id = "", -1
    if body[0] == KIND_MESSAGE:
        _, ledger, entry, index, size, published, event = r.unpack(MESSAGE_HEAD)
    else:
        _, ledger, entry, index, size, published, event, sequence_id, producer_len = r.unpack(MESSAGE_V2_HEAD)
        producer = r.text(producer_len)
    (key_len,) = r.unpack(KEY_LEN)
    key = None if key_len == -1 else r.text(key_len)
    (count,) = r.unpack(U16)
    properties = {}
    for _ in range(count):
        (name_len,) = r.unpack(U16)
        name = r.text(name_len)
        (value_len,) = r.unpack(U32)
        properties[name] = r.text(value_len)
    (payload_len,) = r.unpack(U32)
    payload = bytes(r.take(payload_len))
    if r.pos != len(body):
        raise FrameError("trailing bytes in a message frame")
    return RangeMessage(ledger, entry, index, size, published, event, key, properties, payload, producer,
                        sequence_id)  # fmt: skip


class FrameDecoder:
    """Feed bytes as they arrive; iterate the complete frames (``RangeMessage`` / ``RangeEnd``)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.ended = False

    def feed(self, data: bytes) -> Iterator[RangeMessage | RangeEnd]:
        self._buffer += data
        while len(self._buffer) >= LENGTH.size:
            (length,) = LENGTH.unpack_from(self._buffer)
            if not 0 < length <= FRAME_BYTES_MAX:
                raise FrameError(f"bad frame length {length}")
            if len(self._buffer) < LENGTH.size + length:
                return
            body = memoryview(bytes(self._buffer[LENGTH.size : LENGTH.size + length]))
            del self._buffer[: LENGTH.size + length]
            if self.ended:
                raise FrameError("data after the end frame")
            if body[0] in (KIND_MESSAGE, KIND_MESSAGE_V2):
                yield _decode_message(body)
            elif body[0] == KIND_ENTRY:
                yield from _decode_entry(body)
            elif body[0] == KIND_END and len(body) == END.size:
                _, ledger, entry, sent, complete = END.unpack(body)
                self.ended = True
                yield RangeEnd((ledger, entry), sent, bool(complete))
            else:
                raise FrameError(f"unknown frame kind {body[0]}")
