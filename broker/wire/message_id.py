"""Pulsar's MessageId and its wire forms.

A message is identified by the ledger and entry that store it, the partition of a partitioned topic (-1
otherwise) and, for a message inside a batch entry, its index in the batch (-1 otherwise). Pulsar's
WebSocket API shows it as base64 of the protobuf ``MessageIdData`` (``PulsarApi.proto``)::

    required uint64 ledgerId = 1;  required uint64 entryId = 2;
    optional int32 partition = 3 [default = -1];  optional int32 batch_index = 4 [default = -1];
    repeated int64 ack_set = 5;  optional int32 batch_size = 6;
    optional MessageIdData first_chunk_message_id = 7;

Encoding follows ``MessageIdImpl.writeMessageIdData`` of current Pulsar: ledgerId and entryId always;
``partition`` only when >= 0; ``batch_index`` only when != -1; ``batch_size`` whenever it is > -1, which for a
plain message is 0 — so ledger 3 entry 0 is ``08 03 10 00 30 00`` = ``"CAMQADAA"`` (the ConsumerMessage
example in Pulsar's docs). Older Pulsar omitted ``batch_size`` (``"CAAQAw=="`` = ledger 0 entry 3); both
decode.
Ledger and entry ids are Java longs: ``MessageId.earliest`` is ``(-1, -1)``, written as the 10-byte varint of
2**64 - 1 like protobuf writes a negative int64; a negative int32 is likewise sign-extended to 10 bytes.
Decoding skips unknown fields and ``ack_set``/``first_chunk_message_id`` (not used by Magnetar) and refuses
truncated or over-long varints, group wire types and missing required fields.

Other forms: the admin JSON ``{"ledgerId":97,"entryId":9,"partitionIndex":-1}`` and the ``"L:E"`` position
strings of internal stats (``"L:-1"`` is "before the first entry of ledger L").
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pybase64

from magnetar.broker.wire.errors import InvalidMessageIdError
from magnetar.broker.wire.strict_input import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

_U64 = 2**64 - 1
MESSAGE_ID_BYTES_MAX = 1024
"""Largest serialized MessageIdData accepted (a real one is at most ~50 bytes without ack_set)."""

_POSITION = re.compile(r"(-?[0-9]{1,19}):(-?[0-9]{1,19})", re.ASCII)
_WIRE_VARINT = 0
_WIRE_FIXED64 = 1
_WIRE_LENGTH = 2
_WIRE_FIXED32 = 5


def write_varint(out: bytearray, value: int) -> None:
    """Protobuf base-128 varint of an unsigned value < 2**64 (callers mask negative values)."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode the varint at ``pos``; returns ``(value, next_pos)``. At most 10 bytes, value < 2**64."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise InvalidMessageIdError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 70:
            raise InvalidMessageIdError("varint longer than 10 bytes")
    if result > _U64:
        raise InvalidMessageIdError("varint exceeds 64 bits")
    return result, pos


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _write_field(out: bytearray, number: int, value: int) -> None:
    out.append(number << 3 | _WIRE_VARINT)
    write_varint(out, value & _U64)


def _skip_field(data: bytes, pos: int, wire_type: int) -> int:
    if wire_type == _WIRE_VARINT:
        return read_varint(data, pos)[1]
    if wire_type == _WIRE_FIXED64:
        pos += 8
    elif wire_type == _WIRE_FIXED32:
        pos += 4
    elif wire_type == _WIRE_LENGTH:
        length, pos = read_varint(data, pos)
        pos += length
    else:
        raise InvalidMessageIdError(f"unsupported protobuf wire type {wire_type}")
    if pos > len(data):
        raise InvalidMessageIdError("truncated field")
    return pos


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = field(default=0, compare=False)
    """Messages in the batch entry (0 when not batched). Not part of identity, as in Pulsar's ``equals``."""

    def __post_init__(self) -> None:
        # Spelled out (no loop over field names): ids are built for every acknowledgement.
        if not (INT64_MIN <= self.ledger_id <= INT64_MAX and INT64_MIN <= self.entry_id <= INT64_MAX):
            name, value = (
                ("ledger_id", self.ledger_id)
                if not INT64_MIN <= self.ledger_id <= INT64_MAX
                else ("entry_id", self.entry_id)
            )
            raise InvalidMessageIdError(f"{name}={value} is not a 64-bit signed integer")
        if not (
            INT32_MIN <= self.partition <= INT32_MAX
            and INT32_MIN <= self.batch_index <= INT32_MAX
            and INT32_MIN <= self.batch_size <= INT32_MAX
        ):
            for name in ("partition", "batch_index", "batch_size"):
                value = getattr(self, name)
                if not INT32_MIN <= value <= INT32_MAX:
                    raise InvalidMessageIdError(f"{name}={value} is not a 32-bit signed integer")

    # --- protobuf -------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Serialized ``MessageIdData`` exactly as current Pulsar writes it (see the module docstring)."""
        out = bytearray()
        _write_field(out, 1, self.ledger_id)
        _write_field(out, 2, self.entry_id)
        if self.partition >= 0:
            _write_field(out, 3, self.partition)
        if self.batch_index != -1:
            _write_field(out, 4, self.batch_index)
        if self.batch_size > -1:
            _write_field(out, 6, self.batch_size)
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageId:
        if len(data) > MESSAGE_ID_BYTES_MAX:
            raise InvalidMessageIdError(f"message id longer than {MESSAGE_ID_BYTES_MAX} bytes")
        values = {3: -1, 4: -1, 6: 0}
        seen: set[int] = set()
        pos = 0
        while pos < len(data):
            key, pos = read_varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if number in (1, 2, 3, 4, 6) and wire_type == _WIRE_VARINT:
                raw, pos = read_varint(data, pos)
                values[number] = _signed(raw, 64) if number in (1, 2) else _signed(raw, 32)
                seen.add(number)
            elif number == 0:
                raise InvalidMessageIdError("protobuf field number 0")
            else:
                pos = _skip_field(data, pos, wire_type)
        if not {1, 2} <= seen:
            raise InvalidMessageIdError("MessageIdData lacks the required ledgerId/entryId")
        return cls(values[1], values[2], values[3], values[4], values[6])

    # --- base64 (the WebSocket API's "messageId") ----------------------------------------------------------

    def to_base64(self) -> str:
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> MessageId:
        """Decode like Java's ``Base64.getDecoder()`` (padding optional but exact if given)."""
        fields = _DELIVERED_IDS.get(text)
        if fields is not None:
            return cls(*fields)
        try:
            raw = decode_base64_java(text)
        except ValueError as exc:
            raise InvalidMessageIdError(f"invalid base64 message id {text!r}: {exc}") from None
        return cls.from_bytes(raw)

    # --- other forms --------------------------------------------------------------------------------------

    def to_admin_json(self) -> dict[str, int]:
        """``{"ledgerId","entryId","partitionIndex"}`` (admin ``lastMessageId`` and friends)."""
        return {"ledgerId": self.ledger_id, "entryId": self.entry_id, "partitionIndex": self.partition}

    @classmethod
    def from_admin_json(cls, data: Any) -> MessageId:
        if not isinstance(data, dict):
            raise InvalidMessageIdError("a message id object is expected")
        try:
            ledger = data["ledgerId"]
            entry = data["entryId"]
        except KeyError as missing:
            raise InvalidMessageIdError(f"message id lacks {missing}") from None
        partition = data.get("partitionIndex", -1)
        batch_index = data.get("batchIndex", -1)
        for value in (ledger, entry, partition, batch_index):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidMessageIdError("message id fields must be integers")
        return cls(ledger, entry, partition, batch_index)

    @property
    def position(self) -> str:
        """The ``"L:E"`` position string of the entry holding this message."""
        return format_position(self.ledger_id, self.entry_id)

    def __str__(self) -> str:
        """Pulsar's ``toString``: ``L:E:P``, with ``:B`` appended for a message in a batch."""
        text = f"{self.ledger_id}:{self.entry_id}:{self.partition}"
        return f"{text}:{self.batch_index}" if self.batch_index >= 0 else text


EARLIEST = MessageId(-1, -1, -1)
"""Pulsar's ``MessageId.earliest``."""
LATEST = MessageId(INT64_MAX, INT64_MAX, -1)
"""Pulsar's ``MessageId.latest``."""


def decode_base64_java(text: str) -> bytes:
    """Java's basic ``Base64.getDecoder().decode``: RFC 4648 alphabet, no whitespace, ``=`` padding optional
    but exact when present. Raises ``ValueError`` with the reason.

    The common payload (padded, whole 4-character units) is decoded by ``pybase64`` (SIMD: ~1 us for 10 KB
    where ``binascii`` takes ~25 us), whose ``validate=True`` accepts a subset of what Java accepts, with the
    same bytes (a property test holds it to that); whatever it refuses - an unpadded tail, a bad character -
    takes the checked path, which gives Java's answer and reason."""
    try:
        return _b64decode(text, None, True)  # validate=True, positional: a keyword costs ~250 ns
    except ValueError:  # binascii.Error, or a str that is not ASCII
        return decode_base64_java_checked(text)


_b64decode = pybase64.b64decode


def decode_base64_java_checked(text: str) -> bytes:
    """:func:`decode_base64_java` with Java's rules spelled out for every input (the fast path is Python's
    strict mode, which on its own would also accept ``YWJj====``)."""
    stripped = text.rstrip("=")
    if len(stripped) % 4 == 1:
        raise ValueError("Last unit does not have enough valid bits")
    padded = stripped + "=" * (-len(stripped) % 4)
    if len(text) != len(stripped) and padded != text:
        raise ValueError("Input byte array has wrong 4-byte ending unit")
    try:
        return binascii.a2b_base64(padded.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"Illegal base64 character ({exc})") from None


def format_position(ledger_id: int, entry_id: int) -> str:
    return f"{ledger_id}:{entry_id}"


def parse_position(text: str) -> tuple[int, int]:
    """``"12:-1"`` -> ``(12, -1)``; raises :class:`InvalidMessageIdError` on anything else."""
    match = _POSITION.fullmatch(text)
    if match is None:
        raise InvalidMessageIdError(f"invalid position {text!r}: expected 'ledgerId:entryId'")
    result = int(match.group(1)), int(match.group(2))
    if not all(INT64_MIN <= v <= INT64_MAX for v in result):
        raise InvalidMessageIdError(f"position {text!r} out of range")
    return result


class _IdMemo:
    """Base64 ids this broker sent to consumers -> their fields, so that acknowledging one (the id comes back
    verbatim) needs no base64 and protobuf decoding. A memo of a pure function: an entry can only save work,
    never change a result. Two generations of at most ``size_max`` each keep it bounded and O(1)."""

    def __init__(self, size_max: int) -> None:
        self._size_max = size_max
        self._current: dict[str, tuple[int, int, int, int, int]] = {}
        self._previous: dict[str, tuple[int, int, int, int, int]] = {}

    def put(self, text: str, fields: tuple[int, int, int, int, int]) -> None:
        if len(self._current) >= self._size_max:
            self._previous = self._current
            self._current = {}
        self._current[text] = fields

    def get(self, text: str) -> tuple[int, int, int, int, int] | None:
        fields = self._current.get(text)
        return fields if fields is not None else self._previous.get(text)

    def generation_for(self, count: int) -> dict[str, tuple[int, int, int, int, int]]:
        """The generation to put ``count`` ids into (a new one when they would not fit: the memo holds at
        most ``size_max`` plus one run per generation)."""
        if len(self._current) + count > self._size_max:
            self._previous = self._current
            self._current = {}
        return self._current


def delivered_id_fields(text: str) -> tuple[int, int, int, int, int] | None:
    """``(ledger_id, entry_id, partition, batch_index, batch_size)`` of a base64 id this broker delivered
    recently (exactly what :meth:`MessageId.from_base64` decodes it to), or None."""
    return _DELIVERED_IDS.get(text)


DELIVERED_IDS_MEMO_MAX = 65_536
"""Ids per generation of the delivered-id memo (two generations: ~10 MiB at most)."""
_DELIVERED_IDS = _IdMemo(DELIVERED_IDS_MEMO_MAX)
_PREFIXES_MAX = 1024
_PREFIXES: dict[tuple[int, int, int], bytes] = {}
"""(ledger, entry, partition) -> the protobuf fields 1-3: shared by every message of a batch entry."""
_SMALL_VARINTS_MAX = 1 << 14
_SMALL_VARINTS = [bytes((value,)) for value in range(128)] + [
    bytes(((value & 0x7F) | 0x80, value >> 7)) for value in range(128, _SMALL_VARINTS_MAX)
]
"""Varints of 0..16383 (batch indexes and sizes), precomputed: one or two bytes each."""
_BATCH_INDEX_FIELDS = [b"\x20" + varint for varint in _SMALL_VARINTS]
_BATCH_SIZE_FIELDS = [b"\x30" + varint for varint in _SMALL_VARINTS]
"""MessageIdData fields 4 (batch_index) and 6 (batch_size) of the small values, tag included."""


def _varint(value: int) -> bytes:
    if 0 <= value < _SMALL_VARINTS_MAX:
        return _SMALL_VARINTS[value]
    out = bytearray()
    write_varint(out, value & _U64)
    return bytes(out)


def _id_prefix(ledger_id: int, entry_id: int, partition: int) -> bytes:
    key = (ledger_id, entry_id, partition)
    prefix = _PREFIXES.get(key)
    if prefix is None:
        out = bytearray()
        _write_field(out, 1, ledger_id)
        _write_field(out, 2, entry_id)
        if partition >= 0:
            _write_field(out, 3, partition)
        prefix = bytes(out)
        if len(_PREFIXES) >= _PREFIXES_MAX:
            _PREFIXES.clear()
        _PREFIXES[key] = prefix
    return prefix


def _id_bytes(ledger_id: int, entry_id: int, partition: int, batch_index: int, batch_size: int) -> bytes:
    data = _id_prefix(ledger_id, entry_id, partition)
    if batch_index != -1:
        small = 0 <= batch_index < _SMALL_VARINTS_MAX
        data += _BATCH_INDEX_FIELDS[batch_index] if small else b"\x20" + _varint(batch_index)
    if batch_size > -1:
        small = batch_size < _SMALL_VARINTS_MAX
        data += _BATCH_SIZE_FIELDS[batch_size] if small else b"\x30" + _varint(batch_size)
    return data


def message_id_parts(ledger_id: int, entry_id: int, partition: int, batch_size: int) -> tuple[bytes, bytes]:
    """The protobuf bytes of a stored message's id on either side of its batch index field
    (:func:`batch_index_field`): shared by every message of one entry, so an adapter acknowledging the
    messages of an entry one by one builds them once. ``head + batch_index_field(i) + tail`` is the id of
    message ``i`` (:func:`encode_message_id` is its base64)."""
    tail = b""
    if 0 <= batch_size < _SMALL_VARINTS_MAX:
        tail = _BATCH_SIZE_FIELDS[batch_size]
    elif batch_size > -1:
        tail = b"\x30" + _varint(batch_size)
    return _id_prefix(ledger_id, entry_id, partition), tail


def batch_index_field(batch_index: int) -> bytes:
    """MessageIdData field 4 of ``batch_index`` (nothing for -1, a message stored alone)."""
    if 0 <= batch_index < _SMALL_VARINTS_MAX:
        return _BATCH_INDEX_FIELDS[batch_index]
    return b"" if batch_index == -1 else b"\x20" + _varint(batch_index)


def encode_message_id(
    ledger_id: int, entry_id: int, partition: int, batch_index: int, batch_size: int
) -> bytes:
    """The base64 ``messageId`` of a stored message, as ASCII bytes for frames built as bytes, without
    building a :class:`MessageId` (the publish hot path; the arguments come from the managed ledger, so
    they are in range). Same text as ``MessageId(...).to_base64()``."""
    data = _id_bytes(ledger_id, entry_id, partition, batch_index, batch_size)
    return binascii.b2a_base64(data, newline=False)


class StoredPosition(Protocol):
    """Where a delivered message is stored (the core's ``Delivery`` has these)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def entry_id(self) -> int: ...

    @property
    def batch_index(self) -> int: ...

    @property
    def batch_size(self) -> int: ...


def delivered_message_ids(positions: Sequence[StoredPosition], partition: int) -> list[bytes]:
    """:func:`delivered_message_id` of each of a run of messages (the dispatch hot path: consecutive messages
    mostly share their entry, so the fields before the batch index are written once per entry), remembered
    for their acknowledgements as one."""
    memo = _DELIVERED_IDS.generation_for(len(positions))
    b2a = binascii.b2a_base64
    index_fields = _BATCH_INDEX_FIELDS
    size_fields = _BATCH_SIZE_FIELDS
    ids: list[bytes] = []
    ledger_id = entry_id = batch_size = -2
    prefix = size_field = b""
    partition = max(partition, -1)
    for position in positions:
        if (
            position.entry_id != entry_id
            or position.ledger_id != ledger_id
            or position.batch_size != batch_size
        ):
            ledger_id, entry_id, batch_size = position.ledger_id, position.entry_id, position.batch_size
            prefix = _id_prefix(ledger_id, entry_id, partition)
            size_field = (
                size_fields[batch_size]
                if 0 <= batch_size < _SMALL_VARINTS_MAX
                else (b"\x30" + _varint(batch_size) if batch_size > -1 else b"")
            )
        index = position.batch_index
        if 0 <= index < _SMALL_VARINTS_MAX:
            text = b2a(prefix + index_fields[index] + size_field, newline=False)
        else:
            text = b2a(_id_bytes(ledger_id, entry_id, partition, index, batch_size), newline=False)
        memo[text.decode("ascii")] = (ledger_id, entry_id, partition, index, max(batch_size, 0))
        ids.append(text)
    return ids


def delivered_message_id(
    ledger_id: int, entry_id: int, partition: int, batch_index: int, batch_size: int
) -> bytes:
    """:func:`encode_message_id` of an id that goes to a consumer (the dispatch hot path). The consumer will
    acknowledge it with this very text, so it is remembered and :meth:`MessageId.from_base64` need not decode
    it (:func:`delivered_id_fields`)."""
    text = encode_message_id(ledger_id, entry_id, partition, batch_index, batch_size)
    fields = (ledger_id, entry_id, max(partition, -1), batch_index, max(batch_size, 0))
    _DELIVERED_IDS.put(text.decode("ascii"), fields)
    return text
