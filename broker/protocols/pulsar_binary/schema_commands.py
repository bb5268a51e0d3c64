"""The schema parts of Pulsar's binary protocol: the ``Schema`` message (in PRODUCER field 7, SUBSCRIBE field
12, GET_OR_CREATE_SCHEMA), GET_SCHEMA and GET_OR_CREATE_SCHEMA with their responses, and schema versions
on the wire.

A ``Schema`` is ``1 name, 3 schema_data, 4 type, 5 properties`` (``KeyValue``: 1 key, 2 value). Its type is
read as the number sent (:attr:`WireSchema.type`): whether the broker serves it is the registry's question,
so an unknown number is answered with an error, never a dropped connection. A schema version is a Java
``long`` as 8 big-endian bytes (Pulsar's ``LongSchemaVersion``); :func:`decode_version` tells an empty
version (Pulsar answers it with ``IncompatibleSchema``) from one of the wrong length or a negative one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, ProtobufError, Writer

GET_SCHEMA = 34
GET_SCHEMA_RESPONSE = 35
GET_OR_CREATE_SCHEMA = 39
GET_OR_CREATE_SCHEMA_RESPONSE = 40
SCHEMA_PROPERTIES_MAX = 1024
"""Properties one ``Schema`` message may carry (the registry bounds them further)."""
_I64_MAX = 2**63 - 1
_VERSION = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class WireSchema:
    name: str
    type: int
    data: bytes
    properties: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class GetSchema:
    request_id: int
    topic: str
    version: bytes | None
    """The version asked for, as sent (None: the latest)."""


@dataclass(frozen=True, slots=True)
class GetOrCreateSchema:
    request_id: int
    topic: str
    schema: WireSchema


def decode_schema(f: Fields) -> WireSchema:
    properties = []
    for count, kv in enumerate(f.repeated_messages(5, "KeyValue")):
        if count >= SCHEMA_PROPERTIES_MAX:
            raise ProtobufError(f"Schema: more than {SCHEMA_PROPERTIES_MAX} properties")
        properties.append((kv.required_string(1), kv.required_string(2)))
    return WireSchema(f.string(1), f.required_uint(4), f.bytes_(3), tuple(properties))


def optional_schema(f: Fields, number: int) -> WireSchema | None:
    sub = f.message(number, "Schema")
    return None if sub is None else decode_schema(sub)


def _request_id(f: Fields) -> int:
    value = f.required_uint(1)
    if value > _I64_MAX:
        raise ProtobufError(f"{f.name}: request id {value} is out of range")
    return value


def decode_get_schema(f: Fields) -> GetSchema:
    return GetSchema(_request_id(f), f.required_string(2), f.bytes_(3) if f.has(3) else None)


def decode_get_or_create_schema(f: Fields) -> GetOrCreateSchema:
    return GetOrCreateSchema(
        _request_id(f), f.required_string(2), decode_schema(f.required_message(3, "Schema"))
    )


class VersionError(ValueError):
    """A schema version's bytes that name no version (the message says why)."""


def decode_version(data: bytes) -> int:
    """8 big-endian bytes as a non-negative version (:class:`VersionError` otherwise)."""
    if len(data) != _VERSION.size:
        raise VersionError(f"a schema version is {_VERSION.size} bytes, not {len(data)}")
    version: int = _VERSION.unpack(data)[0]
    if version < 0:
        raise VersionError(f"schema version {version} is negative")
    return version


def encode_version(version: int) -> bytes:
    return _VERSION.pack(version)


def _schema_bytes(name: str, type_number: int, data: bytes, properties: tuple[tuple[str, str], ...]) -> bytes:
    w = Writer().string(1, name).data(3, data).uint(4, type_number)
    for key, value in properties:
        w.data(5, Writer().string(1, key).string(2, value).bytes())
    return w.bytes()


def _base(kind: int, sub: Writer) -> bytes:
    return Writer().uint(1, kind).data(kind, sub.bytes()).bytes()


def encode_get_schema_response(
    request_id: int,
    name: str,
    type_number: int,
    data: bytes,
    properties: tuple[tuple[str, str], ...],
    version: int,
) -> bytes:
    schema = _schema_bytes(name, type_number, data, properties)
    w = Writer().uint(1, request_id).data(4, schema).data(5, encode_version(version))
    return _base(GET_SCHEMA_RESPONSE, w)


def encode_get_schema_error(request_id: int, error: int, message: str) -> bytes:
    return _base(GET_SCHEMA_RESPONSE, Writer().uint(1, request_id).uint(2, error).string(3, message))


def encode_get_or_create_schema_response(request_id: int, version: int) -> bytes:
    w = Writer().uint(1, request_id).data(4, encode_version(version))
    return _base(GET_OR_CREATE_SCHEMA_RESPONSE, w)


def encode_get_or_create_schema_error(request_id: int, error: int, message: str) -> bytes:
    w = Writer().uint(1, request_id).uint(2, error).string(3, message)
    return _base(GET_OR_CREATE_SCHEMA_RESPONSE, w)


def encode_get_schema(request_id: int, topic: str, version: bytes | None = None) -> bytes:
    """GET_SCHEMA (what a client sends; the tests' raw client uses it)."""
    w = Writer().uint(1, request_id).string(2, topic)
    if version is not None:
        w.data(3, version)
    return _base(GET_SCHEMA, w)


def encode_get_or_create_schema(request_id: int, topic: str, schema: WireSchema) -> bytes:
    """GET_OR_CREATE_SCHEMA (what a client sends; the tests' raw client uses it)."""
    body = _schema_bytes(schema.name, schema.type, schema.data, schema.properties)
    w = Writer().uint(1, request_id).string(2, topic).data(3, body)
    return _base(GET_OR_CREATE_SCHEMA, w)
