"""Magnetar's binary WebSocket subprotocol ``magnetar.v1``, sans-IO: an optional, documented alternative to
Pulsar's JSON API for bulk producers and consumers.

Why. Pulsar's JSON API costs, per message and on both sides, a JSON document, base64 of the payload and of
the message id, and a frame each way (the message and its ack). A producer that sends many messages per
WebSocket frame and receives one receipt per frame, and a consumer that receives many messages per frame and
acknowledges a frame with one range, do that work once per frame instead.

Negotiation. The client offers ``Sec-WebSocket-Protocol: magnetar.v1`` on the usual endpoints
(``/ws/v2/producer/...``, ``/ws/v2/consumer/...``, ``/ws/v2/reader/...``) with the usual query parameters;
the upgrade is refused, redirected or accepted exactly as for the JSON API. When the broker accepts it
answers with the same header, and from then on the session carries binary frames in this format only (a
text frame is a malformed frame). Without the header the session is Pulsar's JSON API. Topics, subscriptions
and their types, flow control (``receiverQueueSize``, pull mode), ack timeouts, negative acks and redelivery
are the same for both, and messages published in one form are consumed in the other.

Encoding. Little-endian. Each WebSocket binary message is one frame, whose first byte is its type. Strings
are UTF-8. A message id (28 bytes) is ``partition i32 | ledger_id i64 | entry_id i64 | batch_index i32 |
batch_size i32`` - the fields of Pulsar's ``MessageId`` (``batch_index`` -1 and ``batch_size`` 0 for a
message stored alone, as the JSON API's base64 ids say).

Producer sessions::

    SEND        client 0x01  request_id u64 | count u32 | count x message
                message := payload_len u32 | key_len u16 (0xFFFF: no key) | property_count u16
                           | event_time_ms i64 (0: none) | key | property_count x (name_len u16, name,
                           value_len u16, value) | payload
    SEND_SEQ    client 0x02  request_id u64 | count u32 | first_sequence_id i64 | count x message
    RECEIPT     broker 0x81  request_id u64 | range_count u16 | range_count x (partition i32 | ledger_id i64
                           | entry_id i64 | first_index i32 | count u32 | batch_size i32)
    SEND_ERROR  broker 0x82  request_id u64 | code u16 | reason_len u16 | reason

SEND_SEQ is a SEND whose messages carry the client's sequence ids ``first_sequence_id + i`` (0 to 2^63 - 1):
on a topic that deduplicates (Pulsar's message deduplication, keyed by the ``producerName`` of the session) a
resend of stored messages is not stored again, and its RECEIPT range says ``ledger_id`` -1, ``entry_id`` -1.
A plain SEND's messages are numbered by the broker, on from the highest sequence id the topic accepted for the
producer's name.

A message of a SEND is laid out as a message of a compact batch entry (:mod:`.entry_format`, ``kind = 3``),
and the broker stores it as it arrived, after one validating pass over the frame. A SEND's messages are stored
in frame order in batch entries, each run of a frame within one entry: a frame
that fits the broker's batch limits (``publish_batch_messages_max``, ``publish_batch_bytes_max``) and goes to
one partition is one run. The broker batches runs as it batches JSON messages: a run that arrives while an
entry of its topic is in flight waits and is written with the runs of the same producer that arrived
meanwhile, in one entry. The RECEIPT lists the runs in frame order; message ``i`` of a range has the id
``(partition, ledger_id, entry_id, first_index + i, batch_size)``. On a partitioned topic a message with a key
goes to its key's partition and the messages without a key of one frame go together to the partition the
routing mode picks for that frame (as Pulsar's batching producer routes batches); consecutive messages for the
same partition form one range.
Receipts are matched to SENDs by ``request_id`` (on a partitioned topic they may complete out of order).
A SEND fails as a whole with a SEND_ERROR carrying Pulsar's ``send-error`` code: 3 for a malformed frame
(the session goes on, as after a JSON request that cannot be read), 8 when storing failed; as for the JSON
API a failed send fails every later send of the producer still pending, and the outcome of a failed send is
unknown (some of its entries may be stored).

Consumer and reader sessions::

    MESSAGES        broker 0x11  count u32 | count x (id | redelivery_count u32 | publish_time_ms i64
                                 | event_time_ms i64 | key_len u16 (0xFFFF: no key) | property_count u16
                                 | payload_len u32 | key | properties as in SEND | payload)
    END_OF_TOPIC    broker 0x12  flag u8 (1: the end of a terminated topic was reached)
    ACK             client 0x21  count u32 | count x id                  (individual acks, as JSON acks)
    ACK_RANGE       client 0x22  count u32 | count x (partition i32 | first | last),
                                 first, last := ledger_id i64 | entry_id i64 | batch_index i32
    NACK            client 0x23  count u32 | count x id                  (negative acks, as JSON)
    PERMIT          client 0x24  count u32
    UNSUBSCRIBE     client 0x25
    IS_END_OF_TOPIC client 0x26  -> END_OF_TOPIC

ACK_RANGE acknowledges every message delivered to this session and not yet acknowledged whose position
``(ledger_id, entry_id, batch_index)`` lies in ``[first, last]`` on that partition: one range per MESSAGES
frame acknowledges the frame, and a range from ``(-1, -1, -1)`` is a cumulative ack of what the session
received. PERMIT grants permits in pull mode (``pullMode=true``, as the JSON ``permit`` command); for a reader
it releases ``count`` messages of the window (the JSON reader releases one per frame it sends); a count above
2^31 - 1 (the JSON command's int range) is malformed. A malformed frame, or a frame type the session does not
take, closes a consumer or reader session with 4003 (Pulsar's code 3, as bad JSON does).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from magnetar.broker.wire.entry_format import (
    COMPACT_MESSAGE,
    COMPACT_NO_KEY,
    KEY_BYTES_MAX,
    CorruptEntryError,
    StoredMessage,
    check_compact_messages,
    encode_properties,
)
from magnetar.broker.wire.errors import BrokerError

SUBPROTOCOL = "magnetar.v1"
NO_KEY = COMPACT_NO_KEY
PERMIT_COUNT_MAX = 2**31 - 1
"""A PERMIT's count is unsigned on the wire but, as the JSON ``permitMessages``, an int: a larger count is
what a client that wrote a negative number as u32 sends, and is refused."""


class FrameType(IntEnum):
    SEND = 0x01
    SEND_SEQ = 0x02
    RECEIPT = 0x81
    SEND_ERROR = 0x82
    MESSAGES = 0x11
    END_OF_TOPIC = 0x12
    ACK = 0x21
    ACK_RANGE = 0x22
    NACK = 0x23
    PERMIT = 0x24
    UNSUBSCRIBE = 0x25
    IS_END_OF_TOPIC = 0x26


_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_TYPE_COUNT = struct.Struct("<BI")
_SEND_HEAD = struct.Struct("<BQI")
_SEQUENCE = struct.Struct("<q")
SEND_TYPES = (bytes([FrameType.SEND]), bytes([FrameType.SEND_SEQ]))
"""The first byte of a SEND or SEND_SEQ frame (both carry ``request_id`` at offset 1)."""
SEQUENCE_ID_MAX = 2**63 - 1
_RECEIPT_HEAD = struct.Struct("<BQH")
_RANGE = struct.Struct("<iqqiIi")
_SEND_ERROR = struct.Struct("<BQHH")
_ID = struct.Struct("<iqqii")
_ACK_RANGE = struct.Struct("<iqqiqqi")
_RECORD = struct.Struct("<iqqiiIqqHHI")
"""A MESSAGES record's fixed part: id, redelivery count, times, key/property/payload sizes."""
pack_record_head = _RECORD.pack
"""A MESSAGES record's fixed part, packed (the broker's delivery run renders a plain record with it: the
fixed part and the payload, no key and no properties, see :func:`message_record`)."""

MessageIdFields = tuple[int, int, int, int, int]
"""(partition, ledger_id, entry_id, batch_index, batch_size)."""
Position3 = tuple[int, int, int]
"""(ledger_id, entry_id, batch_index)."""


class BinaryFrameError(BrokerError):
    """A frame that does not follow ``magnetar.v1``; ``request_id`` when a SEND's could be read."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


# --- producer side -----------------------------------------------------------------------------------------


class SendRun(NamedTuple):
    """Consecutive messages of a SEND frame, as they arrived: validated compact messages
    (:data:`~.entry_format.COMPACT_MESSAGE`), stored verbatim in a compact batch entry."""

    messages: int
    payload_bytes: int
    body: bytes | memoryview


@dataclass(frozen=True, slots=True)
class SendFrame:
    request_id: int
    run: SendRun
    """All the frame's messages."""
    keyed: bool
    """Whether a message has a key or properties (routing by key needs :func:`send_messages`)."""
    first_sequence_id: int | None = None
    """SEND_SEQ: the client's sequence id of the first message (the next ones follow); None for a SEND."""


class SendMessage(NamedTuple):
    """Where one message of a run lies in the run's body, and its key."""

    key: str | None
    start: int
    end: int
    payload_bytes: int


def parse_send(frame: bytes) -> SendFrame:
    """A SEND frame, validated (bounds, UTF-8 keys and properties); :class:`BinaryFrameError` otherwise."""
    if len(frame) < _SEND_HEAD.size or frame[:1] not in SEND_TYPES:
        raise BinaryFrameError("not a SEND frame")
    _, request_id, count = _SEND_HEAD.unpack_from(frame)
    head = _SEND_HEAD.size
    first_sequence_id = None
    if frame[0] == FrameType.SEND_SEQ:
        if len(frame) < head + _SEQUENCE.size:
            raise BinaryFrameError("SEND_SEQ without its first sequence id", request_id)
        (first_sequence_id,) = _SEQUENCE.unpack_from(frame, head)
        head += _SEQUENCE.size
        if first_sequence_id < 0 or first_sequence_id + max(count, 1) - 1 > SEQUENCE_ID_MAX:
            raise BinaryFrameError(f"sequence ids from {first_sequence_id} out of range", request_id)
    if count == 0:
        raise BinaryFrameError("a SEND carries at least one message", request_id)
    if count * COMPACT_MESSAGE.size > len(frame) - head:
        raise BinaryFrameError(f"SEND too short for {count} messages", request_id)
    body = memoryview(frame)[head:]
    try:
        payload_bytes, keyed = check_compact_messages(body, 0, count)
    except CorruptEntryError as exc:
        raise BinaryFrameError(f"malformed SEND: {exc}", request_id) from None
    return SendFrame(request_id, SendRun(count, payload_bytes, body), keyed, first_sequence_id)


def send_messages(run: SendRun) -> list[SendMessage]:
    """The messages of a (validated) run with their places and keys: for routing by key and for cutting a run
    at the batch limits (the common frame needs neither and never walks its messages twice)."""
    body = run.body
    unpack = COMPACT_MESSAGE.unpack_from
    messages: list[SendMessage] = []
    pos = 0
    for _ in range(run.messages):
        start = pos
        payload_len, key_len, property_count, _event = unpack(body, pos)
        pos += COMPACT_MESSAGE.size
        key = None
        if key_len != NO_KEY:
            key = str(body[pos : pos + key_len], "utf-8")
            pos += key_len
        for _ in range(property_count * 2):
            pos += 2 + _U16.unpack_from(body, pos)[0]
        pos += payload_len
        messages.append(SendMessage(key, start, pos, payload_len))
    return messages


def sub_run(run: SendRun, messages: Sequence[SendMessage]) -> SendRun:
    """Consecutive ``messages`` of ``run`` (from :func:`send_messages`) as a run of their own."""
    payload_bytes = sum(message.payload_bytes for message in messages)
    return SendRun(len(messages), payload_bytes, run.body[messages[0].start : messages[-1].end])


def encode_send_run(request_id: int, run: SendRun, first_sequence_id: int | None = None) -> bytes:
    """A SEND frame carrying ``run``'s messages as they arrived (the owner proxy splits a client's SEND per
    partition with it); a SEND_SEQ when ``first_sequence_id`` is given."""
    if first_sequence_id is None:
        return _SEND_HEAD.pack(FrameType.SEND, request_id, run.messages) + bytes(run.body)
    head = _SEND_HEAD.pack(FrameType.SEND_SEQ, request_id, run.messages) + _SEQUENCE.pack(first_sequence_id)
    return head + bytes(run.body)


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """What a producer sends (client side of SEND)."""

    payload: bytes
    key: str | None = None
    properties: Mapping[str, str] | None = None
    event_time_ms: int = 0


_PLAIN_HEADERS: dict[int, bytes] = {}
"""Message headers of plain payloads by size (a producer's payloads often share a size): a dict lookup is
cheaper than packing the header for every message."""
_PLAIN_HEADERS_MAX = 4096


def encode_send(
    request_id: int, messages: Sequence[OutgoingMessage | bytes], first_sequence_id: int | None = None
) -> bytes:
    """A SEND frame (client side); plain ``bytes`` are payloads without key, properties or event time. With
    ``first_sequence_id``, a SEND_SEQ: the messages carry sequence ids from it."""
    if first_sequence_id is None:
        parts = [_SEND_HEAD.pack(FrameType.SEND, request_id, len(messages))]
    else:
        parts = [
            _SEND_HEAD.pack(FrameType.SEND_SEQ, request_id, len(messages)),
            _SEQUENCE.pack(first_sequence_id),
        ]
    pack = COMPACT_MESSAGE.pack
    plain = _PLAIN_HEADERS
    for message in messages:
        if isinstance(message, bytes):
            size = len(message)
            header = plain.get(size)
            if header is None:
                header = pack(size, NO_KEY, 0, 0)
                if len(plain) < _PLAIN_HEADERS_MAX:
                    plain[size] = header
            parts += (header, message)
            continue
        key = b"" if message.key is None else message.key.encode("utf-8")
        if len(key) > KEY_BYTES_MAX - 1:
            raise ValueError(f"key of {len(key)} bytes")
        properties = message.properties or {}
        parts.append(
            pack(
                len(message.payload),
                NO_KEY if message.key is None else len(key),
                len(properties),
                message.event_time_ms,
            )
        )
        parts.append(key)
        parts.append(encode_properties(properties))
        parts.append(message.payload)
    return b"".join(parts)


class ReceiptRange(NamedTuple):
    """Where one run of a SEND frame was stored: messages ``first_index ..`` (``messages`` of them) of a
    ``batch_size``-message batch entry."""

    partition: int
    ledger_id: int
    entry_id: int
    first_index: int
    messages: int
    batch_size: int


def encode_receipt(request_id: int, ranges: Sequence[ReceiptRange]) -> bytes:
    """RECEIPT for the frame's runs, in frame order."""
    parts = [_RECEIPT_HEAD.pack(FrameType.RECEIPT, request_id, len(ranges))]
    parts.extend(_RANGE.pack(*r) for r in ranges)
    return b"".join(parts)


def encode_send_error(request_id: int, code: int, reason: str) -> bytes:
    text = reason.encode("utf-8")[:1024]
    return _SEND_ERROR.pack(FrameType.SEND_ERROR, request_id, code, len(text)) + text


@dataclass(frozen=True, slots=True)
class Receipt:
    """A RECEIPT or SEND_ERROR as a client reads it."""

    request_id: int
    ranges: tuple[ReceiptRange, ...] = ()
    """One per run of the frame, in frame order."""
    error_code: int = 0
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.error_code == 0

    def message_ids(self) -> list[MessageIdFields]:
        """The ids of the SEND's messages, in frame order."""
        return [
            (partition, ledger, entry, first + index, size)
            for partition, ledger, entry, first, count, size in self.ranges
            for index in range(count)
        ]


def parse_receipt(frame: bytes) -> Receipt:
    """A RECEIPT or SEND_ERROR frame (client side)."""
    try:
        if frame[0] == FrameType.RECEIPT:
            _, request_id, count = _RECEIPT_HEAD.unpack_from(frame)
            if len(frame) != _RECEIPT_HEAD.size + count * _RANGE.size:
                raise BinaryFrameError("RECEIPT of the wrong size")
            ranges = tuple(map(ReceiptRange._make, _RANGE.iter_unpack(frame[_RECEIPT_HEAD.size :])))
            return Receipt(request_id, ranges)
        if frame[0] == FrameType.SEND_ERROR:
            _, request_id, code, size = _SEND_ERROR.unpack_from(frame)
            reason = frame[_SEND_ERROR.size : _SEND_ERROR.size + size].decode("utf-8", errors="replace")
            return Receipt(request_id, error_code=code, reason=reason)
    except (IndexError, struct.error) as exc:
        raise BinaryFrameError(f"truncated frame: {exc}") from None
    raise BinaryFrameError(f"not a receipt: frame type {frame[:1].hex()}")


# --- consumer side -----------------------------------------------------------------------------------------


def message_record(
    partition: int,
    ledger_id: int,
    entry_id: int,
    batch_index: int,
    batch_size: int,
    redelivery_count: int,
    message: StoredMessage,
) -> bytes:
    """One message of a MESSAGES frame (broker side)."""
    payload = message.payload
    key = message.key
    properties = message.properties
    if key is None and not properties:
        return (
            _RECORD.pack(
                partition,
                ledger_id,
                entry_id,
                batch_index,
                batch_size,
                redelivery_count,
                message.publish_time_ms,
                message.event_time_ms,
                NO_KEY,
                0,
                len(payload),
            )
            + payload
        )
    key_bytes = b"" if key is None else key.encode("utf-8")
    head = _RECORD.pack(
        partition,
        ledger_id,
        entry_id,
        batch_index,
        batch_size,
        redelivery_count,
        message.publish_time_ms,
        message.event_time_ms,
        NO_KEY if key is None else len(key_bytes),
        len(properties),
        len(payload),
    )
    return head + key_bytes + encode_properties(properties) + payload


def messages_frame(records: Sequence[bytes]) -> bytes:
    return _TYPE_COUNT.pack(FrameType.MESSAGES, len(records)) + b"".join(records)


def end_of_topic_frame(end_of_topic: bool) -> bytes:
    return bytes((FrameType.END_OF_TOPIC, 1 if end_of_topic else 0))


class ReceivedMessage(NamedTuple):
    """A MESSAGES record as a client reads it. A named tuple, built with one C call per record (a frozen
    dataclass cost a client ~1.5 µs a message, as much as the broker spends sending it)."""

    message_id: MessageIdFields
    redelivery_count: int
    publish_time_ms: int
    event_time_ms: int
    key: str | None
    properties: dict[str, str]
    payload: bytes


_new_received = tuple.__new__


def parse_messages(frame: bytes) -> list[ReceivedMessage]:
    """A MESSAGES frame (client side)."""
    try:
        kind, count = _TYPE_COUNT.unpack_from(frame)
        if kind != FrameType.MESSAGES:
            raise BinaryFrameError(f"not a MESSAGES frame: type {kind:#x}")
        pos = _TYPE_COUNT.size
        out: list[ReceivedMessage] = []
        for _ in range(count):
            fields = _RECORD.unpack_from(frame, pos)
            pos += _RECORD.size
            key_len, property_count, payload_len = fields[8:]
            key = None
            if key_len != NO_KEY:
                key = frame[pos : pos + key_len].decode("utf-8")
                pos += key_len
            properties: dict[str, str] = {}
            for _ in range(property_count):
                (size,) = _U16.unpack_from(frame, pos)
                name = frame[pos + 2 : pos + 2 + size].decode("utf-8")
                pos += 2 + size
                (size,) = _U16.unpack_from(frame, pos)
                properties[name] = frame[pos + 2 : pos + 2 + size].decode("utf-8")
                pos += 2 + size
            payload = frame[pos : pos + payload_len]
            if len(payload) != payload_len:
                raise BinaryFrameError("MESSAGES truncated")
            pos += payload_len
            out.append(
                _new_received(
                    ReceivedMessage, (fields[:5], fields[5], fields[6], fields[7], key, properties, payload)
                )
            )
    except (struct.error, UnicodeDecodeError) as exc:
        raise BinaryFrameError(f"malformed MESSAGES frame: {exc}") from None
    return out


def message_records(frame: bytes) -> list[bytes]:
    """The records of a MESSAGES frame, each as its bytes (:func:`messages_frame` joins them again): the owner
    proxy hands a client at most the messages it permitted."""
    try:
        kind, count = _TYPE_COUNT.unpack_from(frame)
        if kind != FrameType.MESSAGES:
            raise BinaryFrameError(f"not a MESSAGES frame: type {kind:#x}")
        pos = _TYPE_COUNT.size
        out: list[bytes] = []
        for _ in range(count):
            start = pos
            key_len, props, payload_len = _RECORD.unpack_from(frame, pos)[8:]
            pos += _RECORD.size + (0 if key_len == NO_KEY else key_len)
            for _ in range(props * 2):
                pos += 2 + _U16.unpack_from(frame, pos)[0]
            pos += payload_len
            out.append(frame[start:pos])
    except struct.error as exc:
        raise BinaryFrameError(f"malformed MESSAGES frame: {exc}") from None
    if pos != len(frame):
        raise BinaryFrameError("MESSAGES frame of the wrong size")
    return out


def scan_messages(frame: bytes) -> list[tuple[int, int, int, int, int]]:
    """``(partition, ledger_id, entry_id, batch_index, publish_time_ms)`` of each message of a MESSAGES frame,
    skipping keys, properties and payloads undecoded (a load generator's cheap read)."""
    try:
        kind, count = _TYPE_COUNT.unpack_from(frame)
        if kind != FrameType.MESSAGES:
            raise BinaryFrameError(f"not a MESSAGES frame: type {kind:#x}")
        pos = _TYPE_COUNT.size
        out: list[tuple[int, int, int, int, int]] = []
        unpack = _RECORD.unpack_from
        for _ in range(count):
            partition, ledger, entry, index, _size, _count, publish, _event, key_len, props, payload_len = (
                unpack(frame, pos)
            )
            pos += _RECORD.size + (0 if key_len == NO_KEY else key_len)
            for _ in range(props * 2):
                pos += 2 + _U16.unpack_from(frame, pos)[0]
            pos += payload_len
            out.append((partition, ledger, entry, index, publish))
    except struct.error as exc:
        raise BinaryFrameError(f"malformed MESSAGES frame: {exc}") from None
    if pos != len(frame):
        raise BinaryFrameError("MESSAGES frame of the wrong size")
    return out


@dataclass(frozen=True, slots=True)
class ConsumerFrame:
    """A consumer's or reader's frame (broker side)."""

    type: FrameType
    ids: list[MessageIdFields]
    """ACK, NACK."""
    ranges: list[tuple[int, Position3, Position3]]
    """ACK_RANGE: (partition, first, last)."""
    count: int = 0
    """PERMIT."""


_CONSUMER_TYPES = frozenset(
    {
        FrameType.ACK,
        FrameType.ACK_RANGE,
        FrameType.NACK,
        FrameType.PERMIT,
        FrameType.UNSUBSCRIBE,
        FrameType.IS_END_OF_TOPIC,
    }
)


def parse_consumer_frame(frame: bytes) -> ConsumerFrame:
    """Parse a consumer/reader frame; :class:`BinaryFrameError` when it is malformed."""
    if not frame or frame[0] not in _CONSUMER_TYPES:
        raise BinaryFrameError(f"not a consumer frame: type {frame[:1].hex() or 'none'}")
    kind = FrameType(frame[0])
    if kind in (FrameType.UNSUBSCRIBE, FrameType.IS_END_OF_TOPIC):
        if len(frame) != 1:
            raise BinaryFrameError(f"{kind.name} frame of {len(frame)} bytes")
        return ConsumerFrame(kind, [], [])
    if len(frame) < _TYPE_COUNT.size:
        raise BinaryFrameError(f"{kind.name} frame truncated")
    _, count = _TYPE_COUNT.unpack_from(frame)
    body = frame[_TYPE_COUNT.size :]
    if kind is FrameType.PERMIT:
        if body:
            raise BinaryFrameError("PERMIT frame of the wrong size")
        if count > PERMIT_COUNT_MAX:
            raise BinaryFrameError(f"PERMIT count {count} out of range 0..{PERMIT_COUNT_MAX}")
        return ConsumerFrame(kind, [], [], count)
    if kind is FrameType.ACK_RANGE:
        if len(body) != count * _ACK_RANGE.size:
            raise BinaryFrameError("ACK_RANGE frame of the wrong size")
        ranges = [
            (p, (l1, e1, i1), (l2, e2, i2)) for p, l1, e1, i1, l2, e2, i2 in _ACK_RANGE.iter_unpack(body)
        ]
        return ConsumerFrame(kind, [], ranges)
    if len(body) != count * _ID.size:
        raise BinaryFrameError(f"{kind.name} frame of the wrong size")
    return ConsumerFrame(kind, list(_ID.iter_unpack(body)), [])


def encode_ids(kind: FrameType, ids: Sequence[MessageIdFields]) -> bytes:
    """ACK or NACK (client side)."""
    return _TYPE_COUNT.pack(kind, len(ids)) + b"".join(_ID.pack(*i) for i in ids)


def encode_ack_ranges(ranges: Sequence[tuple[int, Position3, Position3]]) -> bytes:
    """ACK_RANGE (client side)."""
    body = b"".join(_ACK_RANGE.pack(p, *first, *last) for p, first, last in ranges)
    return _TYPE_COUNT.pack(FrameType.ACK_RANGE, len(ranges)) + body


def encode_permit(count: int) -> bytes:
    return _TYPE_COUNT.pack(FrameType.PERMIT, count)


def encode_command(kind: FrameType) -> bytes:
    """UNSUBSCRIBE or IS_END_OF_TOPIC (client side)."""
    return bytes((kind,))
