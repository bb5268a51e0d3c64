"""A small, typed codec of the protobuf wire format (proto2), for the messages of Pulsar's binary protocol.

Why not generated code: the ``protobuf`` package's generated modules are untyped (mypy strict needs a stub
generator on top), pull in a runtime that accepts messages of any size, and decode every field of every
message. The broker reads a handful of fields of a handful of messages; a hand codec of the wire format -
varints, fixed-width numbers and length-delimited fields - is ~200 lines, typed end to end, and bounded:

* a varint is at most 10 bytes and its value below ``2**64`` (else :class:`ProtobufError`);
* a length-delimited field cannot claim more bytes than remain (a forged ``2**63`` length is refused
  before anything is allocated);
* a message holds at most :data:`FIELDS_MAX` fields, and nested messages are parsed only when asked for,
  so nesting depth is the caller's (the commands nest at most three deep);
* the deprecated group wire types (3, 4) and field number 0 are refused.

Field numbers and types are those of Pulsar's ``PulsarApi.proto`` (``docs/binary-protocol.md`` lists the
ones we use). Unknown fields are skipped, as proto2 requires.

Decoding gives :class:`Fields`: every field number with its values in order, read through typed getters
(``uint``, ``int32``, ``string``...) that apply proto2's "last value wins" rule for singular fields and
convert two's-complement varints of signed types. Encoding is :class:`Writer`: append fields, take bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

FIELDS_MAX = 65_536
"""Fields one message may hold (repeated fields count each value)."""
VARINT_BYTES_MAX = 10
_U64 = 2**64
_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LEN = 2
WIRE_FIXED32 = 5

_F64 = struct.Struct("<Q")
_F32 = struct.Struct("<I")

Value = int | memoryview
"""A field's raw value: the integer of a varint/fixed field, the bytes of a length-delimited one."""


class ProtobufError(ValueError):
    """The bytes are not a well-formed protobuf message of the expected shape (the message says why)."""


def read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    if pos < len(data) and data[pos] < 0x80:  # one byte: tags and small values, the common case
        return data[pos], pos + 1
    result = 0
    shift = 0
    end = len(data)
    for i in range(VARINT_BYTES_MAX):
        if pos >= end:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= _U64:
                raise ProtobufError("varint larger than 64 bits")
            return result, pos
        shift += 7
        if i == VARINT_BYTES_MAX - 1:
            break
    raise ProtobufError(f"varint longer than {VARINT_BYTES_MAX} bytes")


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def encode_varint(value: int) -> bytes:
    """A non-negative value below ``2**64`` as a varint."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if not 0 <= value < _U64:
        raise ValueError(f"varint value {value} out of range")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Fields:
    """A decoded message: field number -> its last value, and the values in wire order of the numbers that
    came more than once (see the module docstring). A field that came once costs no list."""

    __slots__ = ("_last_values", "_repeated", "name")

    def __init__(self, last: dict[int, Value], repeated: dict[int, list[Value]] | None, name: str) -> None:
        self._last_values = last
        self._repeated = repeated
        self.name = name
        """The message's name, for error messages."""

    def has(self, number: int) -> bool:
        return number in self._last_values

    def _last(self, number: int) -> Value | None:
        return self._last_values.get(number)

    def _all(self, number: int) -> list[Value]:
        """Every value of field ``number``, in wire order."""
        if self._repeated is not None and number in self._repeated:
            return self._repeated[number]
        value = self._last_values.get(number)
        return [] if value is None else [value]

    def _int(self, number: int) -> int | None:
        value = self._last_values.get(number)
        if value is None or value.__class__ is int:
            return value
        raise ProtobufError(f"{self.name}: field {number} is not a number")

    def uint(self, number: int, default: int = 0) -> int:
        """A ``uint32``/``uint64``/enum field (enums are non-negative in this protocol)."""
        value = self._last_values.get(number)
        if value is None:
            return default
        if value.__class__ is int:
            return value
        raise ProtobufError(f"{self.name}: field {number} is not a number")

    def uint32(self, number: int, default: int = 0) -> int:
        value = self.uint(number, default)
        if value > 0xFFFFFFFF:
            raise ProtobufError(f"{self.name}: field {number} = {value} does not fit 32 bits")
        return value

    def int64(self, number: int, default: int = 0) -> int:
        """An ``int64`` field (two's complement in a varint)."""
        value = self._int(number)
        if value is None:
            return default
        return value - _U64 if value > _I64_MAX else value

    def int32(self, number: int, default: int = 0) -> int:
        """An ``int32`` field: negative values arrive sign-extended to 64 bits."""
        value = self.int64(number, default)
        if not _I32_MIN <= value <= _I32_MAX:
            raise ProtobufError(f"{self.name}: field {number} = {value} does not fit 32 bits")
        return value

    def boolean(self, number: int, default: bool = False) -> bool:
        value = self._int(number)
        return default if value is None else value != 0

    def required_uint(self, number: int) -> int:
        value = self._int(number)
        if value is None:
            raise ProtobufError(f"{self.name}: required field {number} is missing")
        return value

    def raw(self, number: int) -> memoryview | None:
        value = self._last_values.get(number)
        if value is None or value.__class__ is memoryview:
            return value
        raise ProtobufError(f"{self.name}: field {number} is not length-delimited")

    def bytes_(self, number: int, default: bytes = b"") -> bytes:
        value = self.raw(number)
        return default if value is None else bytes(value)

    def string(self, number: int, default: str = "") -> str:
        value = self.raw(number)
        if value is None:
            return default
        return _utf8(value, self.name, number)

    def optional_string(self, number: int) -> str | None:
        value = self.raw(number)
        return None if value is None else _utf8(value, self.name, number)

    def required_string(self, number: int) -> str:
        value = self.raw(number)
        if value is None:
            raise ProtobufError(f"{self.name}: required field {number} is missing")
        return _utf8(value, self.name, number)

    def message(self, number: int, name: str) -> Fields | None:
        value = self.raw(number)
        return None if value is None else parse_message(value, name)

    def required_message(self, number: int, name: str) -> Fields:
        found = self.message(number, name)
        if found is None:
            raise ProtobufError(f"{self.name}: required field {number} ({name}) is missing")
        return found

    def repeated_messages(self, number: int, name: str) -> Iterator[Fields]:
        for value in self._all(number):
            if not isinstance(value, memoryview):
                raise ProtobufError(f"{self.name}: field {number} is not length-delimited")
            yield parse_message(value, name)

    def repeated_strings(self, number: int) -> list[str]:
        """A repeated ``string``, in wire order."""
        out: list[str] = []
        for value in self._all(number):
            if not isinstance(value, memoryview):
                raise ProtobufError(f"{self.name}: field {number} is not length-delimited")
            out.append(_utf8(value, self.name, number))
        return out

    def repeated_int64(self, number: int) -> list[int]:
        """A repeated ``int64``, packed or not."""
        out: list[int] = []
        for value in self._all(number):
            if isinstance(value, memoryview):
                pos = 0
                while pos < len(value):
                    item, pos = read_varint(value, pos)
                    out.append(item - _U64 if item > _I64_MAX else item)
                    if len(out) > FIELDS_MAX:
                        raise ProtobufError(f"{self.name}: more than {FIELDS_MAX} values in field {number}")
            else:
                out.append(value - _U64 if value > _I64_MAX else value)
        return out


def _utf8(value: memoryview, name: str, number: int) -> str:
    try:
        return str(value, "utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"{name}: field {number} is not valid UTF-8") from None


def _other_value(view: memoryview, pos: int, wire: int, name: str, number: int) -> tuple[Value, int]:
    """A field that is not a varint: length-delimited or fixed-width (its value and the position after)."""
    end = len(view)
    if wire == WIRE_LEN:
        length, pos = read_varint(view, pos)
        if length > end - pos:
            raise ProtobufError(f"{name}: field {number} claims {length} bytes, {end - pos} remain")
        return view[pos : pos + length], pos + length
    if wire == WIRE_FIXED64:
        if end - pos < 8:
            raise ProtobufError(f"{name}: truncated fixed64 field {number}")
        return _F64.unpack_from(view, pos)[0], pos + 8
    if wire == WIRE_FIXED32:
        if end - pos < 4:
            raise ProtobufError(f"{name}: truncated fixed32 field {number}")
        return _F32.unpack_from(view, pos)[0], pos + 4
    raise ProtobufError(f"{name}: unsupported wire type {wire} (field {number})")


def parse_message(data: bytes | memoryview, name: str) -> Fields:
    """Decode one message's fields (nested messages stay bytes until asked for)."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    fields: dict[int, Value] = {}
    repeated: dict[int, list[Value]] | None = None
    pos = 0
    end = len(view)
    count = 0
    while pos < end:
        key = view[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(view, pos)
        number = key >> 3
        wire = key & 0x7
        if number == 0 or number > 0x1FFFFFFF:
            raise ProtobufError(f"{name}: invalid field number {number}")
        value: Value
        if wire == WIRE_VARINT:
            if pos < end and view[pos] < 0x80:
                value = view[pos]
                pos += 1
            else:
                value, pos = read_varint(view, pos)
        else:
            value, pos = _other_value(view, pos, wire, name, number)
        count += 1
        if count > FIELDS_MAX:
            raise ProtobufError(f"{name}: more than {FIELDS_MAX} fields")
        if number in fields:
            if repeated is None:
                repeated = {}
            if number in repeated:
                repeated[number].append(value)
            else:
                repeated[number] = [fields[number], value]
        fields[number] = value
    return Fields(fields, repeated, name)


class Writer:
    """Builds one message: append fields in field-number order, then :meth:`bytes`."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def uint(self, number: int, value: int) -> Writer:
        """A ``uint32``/``uint64``/enum/bool field."""
        self._out += encode_varint(number << 3 | WIRE_VARINT)
        self._out += encode_varint(value)
        return self

    def sint(self, number: int, value: int) -> Writer:
        """An ``int32``/``int64`` field: negative values take ten bytes (two's complement)."""
        if not _I64_MIN <= value <= _I64_MAX:
            raise ValueError(f"int64 value {value} out of range")
        return self.uint(number, value + _U64 if value < 0 else value)

    def boolean(self, number: int, value: bool) -> Writer:
        return self.uint(number, 1 if value else 0)

    def data(self, number: int, value: bytes | bytearray | memoryview) -> Writer:
        """A ``bytes`` field or an encoded nested message."""
        self._out += encode_varint(number << 3 | WIRE_LEN)
        self._out += encode_varint(len(value))
        self._out += value
        return self

    def string(self, number: int, value: str) -> Writer:
        return self.data(number, value.encode("utf-8"))

    def bytes(self) -> bytes:
        return bytes(self._out)
