"""Range reads for pipelines: ``GET /admin/v2/persistent/{t}/{ns}/{topic}/entries``.

Query: ``from=L:E`` (first entry, inclusive; default the earliest stored), ``to=L:E`` (last entry, inclusive;
default the last confirmed entry), ``maxEntries=N`` (default and bound ``RANGE_ENTRIES_MAX``). The owning
broker answers (307 otherwise) with a chunked ``application/x-magnetar-entries`` stream of the messages of
the entries in the range, in order, ending with one *end frame*. At most ``maxEntries`` entries and about
``RANGE_BYTES_MAX`` bytes are sent per request (the entry that crosses the byte budget is the last one); the
end frame says where to continue.

Framing (all integers big-endian)::

    stream  := frame* end
    frame   := length u32 | kind u8 | body            # length counts kind + body
    message := kind 1 | ledger i64 | entry i64 | batch_index i32 | batch_size i32
               | publish_time_ms i64 | event_time_ms i64 (0 = none)
               | key_len i32 (-1 = no key) | key (UTF-8)
               | property_count u16 | property_count * (name_len u16, name, value_len u32, value)
               | payload_len u32 | payload
    end     := kind 2 | next_ledger i64 | next_entry i64 | entries_sent u32 | complete u8
               # complete = 1: the range is exhausted; else continue with from=next_ledger:next_entry

``batch_index`` is -1 and ``batch_size`` 0 for an entry holding one message; a broker-side batch entry yields
one frame per message with ``batch_index`` 0..n-1 and ``batch_size`` n. :func:`encode_message_frame`,
:func:`encode_end_frame` and :class:`FrameDecoder` are sans-IO and shared with the Spark source.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field

from pydantic import Field

from magnetar.admin.rest.framework import AdminError, Call, Endpoint, QueryModel
from magnetar.admin.rest.served import served_topic
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.entry_format import CorruptEntryError, decode_entry
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import InvalidPositionError, Position

CONTENT_TYPE = "application/x-magnetar-entries"
RANGE_ENTRIES_MAX = 10_000
RANGE_BYTES_MAX = 16 * 1024 * 1024
READ_BATCH_ENTRIES = 100
FRAME_BYTES_MAX = 128 * 1024 * 1024
"""Largest frame a decoder accepts (a message is bounded by the entry format far below this)."""

KIND_MESSAGE = 1
KIND_END = 2
_LENGTH = struct.Struct(">I")
_MESSAGE_HEAD = struct.Struct(">Bqqiiqq")  # kind, ledger, entry, batch index, batch size, publish, event
_KEY_LEN = struct.Struct(">i")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_END = struct.Struct(">BqqIB")


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


@dataclass(frozen=True, slots=True)
class RangeEnd:
    next_position: tuple[int, int]
    entries_sent: int
    complete: bool


# -- codec ---------------------------------------------------------------------------------------------


def encode_message_frame(m: RangeMessage) -> bytes:
    key = b"" if m.key is None else m.key.encode()
    parts = [
        _MESSAGE_HEAD.pack(KIND_MESSAGE, m.ledger_id, m.entry_id, m.batch_index, m.batch_size,
                    m.publish_time_ms, m.event_time_ms),
        _KEY_LEN.pack(-1 if m.key is None else len(key)),
        key,
        _U16.pack(len(m.properties)),
    ]  # fmt: skip
    for name, value in m.properties.items():
        name_bytes, value_bytes = name.encode(), value.encode()
        parts += [_U16.pack(len(name_bytes)), name_bytes, _U32.pack(len(value_bytes)), value_bytes]
    parts += [_U32.pack(len(m.payload)), m.payload]
    body = b"".join(parts)
    return _LENGTH.pack(len(body)) + body


def encode_end_frame(end: RangeEnd) -> bytes:
    body = _END.pack(
        KIND_END, end.next_position[0], end.next_position[1], end.entries_sent, int(end.complete)
    )
    return _LENGTH.pack(len(body)) + body


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


def _decode_message(body: memoryview) -> RangeMessage:
    r = _Reader(body)
    _, ledger, entry, index, size, published, event = r.unpack(_MESSAGE_HEAD)
    (key_len,) = r.unpack(_KEY_LEN)
    key = None if key_len == -1 else bytes(r.take(key_len)).decode()
    (count,) = r.unpack(_U16)
    properties = {}
    for _ in range(count):
        (name_len,) = r.unpack(_U16)
        name = bytes(r.take(name_len)).decode()
        (value_len,) = r.unpack(_U32)
        properties[name] = bytes(r.take(value_len)).decode()
    (payload_len,) = r.unpack(_U32)
    payload = bytes(r.take(payload_len))
    if r.pos != len(body):
        raise FrameError("trailing bytes in a message frame")
    return RangeMessage(ledger, entry, index, size, published, event, key, properties, payload)


class FrameDecoder:
    """Feed bytes as they arrive; iterate the complete frames (``RangeMessage`` / ``RangeEnd``)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.ended = False

    def feed(self, data: bytes) -> Iterator[RangeMessage | RangeEnd]:
        self._buffer += data
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if not 0 < length <= FRAME_BYTES_MAX:
                raise FrameError(f"bad frame length {length}")
            if len(self._buffer) < _LENGTH.size + length:
                return
            body = memoryview(bytes(self._buffer[_LENGTH.size : _LENGTH.size + length]))
            del self._buffer[: _LENGTH.size + length]
            if self.ended:
                raise FrameError("data after the end frame")
            if body[0] == KIND_MESSAGE:
                yield _decode_message(body)
            elif body[0] == KIND_END and len(body) == _END.size:
                _, ledger, entry, sent, complete = _END.unpack(body)
                self.ended = True
                yield RangeEnd((ledger, entry), sent, bool(complete))
            else:
                raise FrameError(f"unknown frame kind {body[0]}")


# -- the endpoint --------------------------------------------------------------------------------------


POSITION_PATTERN = r"^(-1|[0-9]{1,18}):(-1|[0-9]{1,18})$"


class RangeQuery(QueryModel):
    from_: str | None = Field(default=None, alias="from", pattern=POSITION_PATTERN)
    to: str | None = Field(default=None, pattern=POSITION_PATTERN)
    maxEntries: int = Field(default=RANGE_ENTRIES_MAX, ge=1, le=RANGE_ENTRIES_MAX)
    authoritative: bool = False


def _parse(text: str | None, name: str) -> Position | None:
    if text is None:
        return None
    try:
        return Position.parse(text)
    except InvalidPositionError:
        raise AdminError(400, f"Invalid query parameter '{name}': expected ledgerId:entryId") from None


def _frames_of(ledger: int, entry: int, data: bytes) -> list[bytes]:
    try:
        decoded = decode_entry(data)
    except CorruptEntryError as exc:
        raise FrameError(f"entry {ledger}:{entry} cannot be decoded: {exc}") from exc
    size = len(decoded.messages) if decoded.batched else 0
    index = (lambda i: i) if decoded.batched else (lambda i: -1)
    return [
        encode_message_frame(RangeMessage(ledger, entry, index(i), size, m.publish_time_ms, m.event_time_ms,
                                          m.key, dict(m.properties), m.payload))
        for i, m in enumerate(decoded.messages)
    ]  # fmt: skip


async def stream_range(
    ml: ManagedLedger, start: Position, last: Position, max_entries: int
) -> AsyncIterator[bytes]:
    position, sent, sent_bytes = ml.ledgers.normalize(start), 0, 0
    while sent < max_entries and sent_bytes < RANGE_BYTES_MAX and position <= last:
        batch = await ml.read_entries(position, min(READ_BATCH_ENTRIES, max_entries - sent))
        batch = [e for e in batch if e.position <= last]
        if not batch:
            break
        for entry in batch:
            frames = b"".join(_frames_of(entry.position.ledger_id, entry.position.entry_id, entry.data))
            sent += 1
            sent_bytes += len(frames)
            position = ml.ledgers.next_position(entry.position)
            yield frames
            if sent_bytes >= RANGE_BYTES_MAX:
                break
    complete = position > last or position > ml.last_confirmed
    yield encode_end_frame(RangeEnd((position.ledger_id, position.entry_id), sent, complete))


async def read_range(call: Call) -> HttpResponse:
    query = call.query_as(RangeQuery)
    start = _parse(query.from_, "from")
    end = _parse(query.to, "to")
    _, ml = await served_topic(call)
    first = ml.ledgers.first_position() or ml.ledgers.next_position(ml.last_confirmed)
    start = max(start or first, first)
    last = min(end, ml.last_confirmed) if end is not None else ml.last_confirmed
    body = stream_range(ml, start, last, query.maxEntries)
    return HttpResponse(200, (("content-type", CONTENT_TYPE),), body)


def endpoints() -> list[Endpoint]:
    return [
        Endpoint("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/entries", read_range,
                 "Stream a range of entries (framing in the module docs)", "topics", query=RangeQuery,
                 status=200, content_type=CONTENT_TYPE,
                 errors={307: "Redirect to the owning broker", 404: "Topic not found"}),
    ]  # fmt: skip
