"""The schema registry's decisions, without I/O: a topic's schema history, which version a schema gets, and
whether a new schema may join the history under a compatibility strategy.

Theory of operation. A topic's schemas form a history of versions numbered from 0, oldest first (a
partitioned topic's partitions share their base topic's history). A version is a schema (its type, its
data, its properties) or a *deletion mark*: deleting a topic's schema appends a mark rather than erasing
anything, and only the versions after the last mark are *live*. The history lives in the metadata store as
an index (:class:`VersionEntry` per version, small) plus each version's data; :mod:`.registry` does the
reading and writing, this module decides:

* :func:`validate` - a schema a client or an admin offers is checked before anything else: a type Magnetar
  serves, data within ``data_bytes_max``, properties within bounds, and for AVRO and JSON data that parses
  as an Avro record schema (:mod:`.avro`).
* :func:`existing_version` - a schema identical (type and data) to a live version gets that version back;
  nothing is written.
* :func:`versions_to_check` and :func:`check` - otherwise the new schema is checked against the latest live
  version (or every live version, for the ``*_TRANSITIVE`` strategies) and is refused with Pulsar's message
  when incompatible; a different type is always incompatible.
* :func:`next_version` - a compatible schema is appended as the version after the history's last (marks
  count), bounded by ``versions_max``.

Consumers are checked as Pulsar checks them (:func:`consumer_strategy`): against the latest live version only,
as BACKWARD, unless the strategy is transitive or ALWAYS_COMPATIBLE.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.schemas import avro

PROPERTIES_MAX = 64
"""Properties one schema version may carry."""
PROPERTIES_BYTES_MAX = 4096
"""UTF-8 bytes of one schema version's property names and values together."""
VERSION_MAX = 2**63 - 1
"""A schema version is a Java ``long``."""


class SchemaType(enum.IntEnum):
    """Pulsar's schema types: the binary protocol's ``Schema.Type`` numbers, and (by name) the admin API's."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    AUTO_CONSUME = 21
    EXTERNAL = 22


UNSUPPORTED = frozenset(
    {
        SchemaType.PROTOBUF,
        SchemaType.PROTOBUF_NATIVE,
        SchemaType.KEY_VALUE,
        SchemaType.AUTO_CONSUME,
        SchemaType.EXTERNAL,
    }
)
"""Types Magnetar refuses (their compatibility checks are not built)."""
STRUCT = frozenset({SchemaType.AVRO, SchemaType.JSON})
"""Types whose data is an Avro record schema, checked field by field."""


class Strategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy``."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


TRANSITIVE = frozenset({Strategy.BACKWARD_TRANSITIVE, Strategy.FORWARD_TRANSITIVE, Strategy.FULL_TRANSITIVE})


class SchemaError(Exception):
    """A schema refused; ``incompatible`` tells an incompatible one (Pulsar's ``IncompatibleSchema``) from an
    invalid one (a bad type, data or properties) or one past a bound."""

    def __init__(self, message: str, *, incompatible: bool = False, invalid: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.incompatible = incompatible
        self.invalid = invalid


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema as offered: by a PRODUCER, a SUBSCRIBE, GET_OR_CREATE_SCHEMA or the admin API."""

    type: SchemaType
    data: bytes
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def digest(self) -> str:
        return digest_of(self.type, self.data)


def digest_of(schema_type: SchemaType, data: bytes) -> str:
    """What identifies a schema's content (type and data; properties do not count, as in Pulsar)."""
    return hashlib.sha256(bytes((schema_type,)) + data).hexdigest()


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One version of a history's index (its data is stored beside it)."""

    version: int
    type: SchemaType
    digest: str
    timestamp_ms: int
    deleted: bool = False
    properties: tuple[tuple[str, str], ...] = ()


def live(history: Sequence[VersionEntry]) -> list[VersionEntry]:
    """The versions after the last deletion mark (Pulsar's "trim deleted")."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].deleted:
            return list(history[i + 1 :])
    return list(history)


def latest(history: Sequence[VersionEntry]) -> VersionEntry | None:
    """The newest live version, or None (no schema, or deleted)."""
    if not history or history[-1].deleted:
        return None
    return history[-1]


def find(history: Sequence[VersionEntry], version: int) -> VersionEntry | None:
    """A live version by number (a deleted one is not found, as in Pulsar)."""
    for entry in live(history):
        if entry.version == version:
            return entry
    return None


def existing_version(history: Sequence[VersionEntry], schema: Schema) -> int | None:
    """The live version identical to ``schema``, if any."""
    digest = schema.digest
    for entry in live(history):
        if entry.digest == digest and entry.type == schema.type:
            return entry.version
    return None


def next_version(history: Sequence[VersionEntry], versions_max: int) -> int:
    """The version a new schema (or deletion mark) gets; :class:`SchemaError` past ``versions_max``."""
    if len(history) >= versions_max:
        raise SchemaError(f"the topic already has {len(history)} schema versions (schema_versions_max)")
    return history[-1].version + 1 if history else 0


def effective(strategy: Strategy, broker_default: Strategy) -> Strategy:
    """UNDEFINED (a namespace that sets none) falls back to the broker's setting, else FULL."""
    if strategy is not Strategy.UNDEFINED:
        return strategy
    return broker_default if broker_default is not Strategy.UNDEFINED else Strategy.FULL


def versions_to_check(history: Sequence[VersionEntry], strategy: Strategy) -> list[VersionEntry]:
    """The live versions a new producer schema is checked against: all of them for a transitive strategy,
    else the latest (none when there is no live schema)."""
    current = live(history)
    if not current or strategy is Strategy.ALWAYS_COMPATIBLE:
        return []
    return current if strategy in TRANSITIVE else current[-1:]


def consumer_strategy(strategy: Strategy) -> Strategy:
    """What a consumer's schema is checked with (Pulsar: BACKWARD against the latest, unless transitive)."""
    if strategy in (Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL):
        return Strategy.BACKWARD
    if strategy is Strategy.FORWARD_TRANSITIVE:
        return Strategy.BACKWARD
    return strategy


def check(existing: Sequence[tuple[VersionEntry, bytes]], schema: Schema, strategy: Strategy) -> None:
    """Refuse (:class:`SchemaError`, incompatible) ``schema`` when it cannot join a history whose checked
    versions (:func:`versions_to_check`, with their data) are ``existing``."""
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    for entry, data in existing:
        if entry.type != schema.type:
            message = "Incompatible schema: exists schema type {}, new schema type {}"
            raise SchemaError(message.format(entry.type.name, schema.type.name), incompatible=True)
        if entry.digest == schema.digest:
            continue
        if strategy is Strategy.ALWAYS_INCOMPATIBLE:
            raise SchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE", incompatible=True)
        if schema.type in STRUCT:
            _check_struct(data, schema.data, strategy)


def _check_struct(old: bytes, new: bytes, strategy: Strategy) -> None:
    old_schema = avro.parse(old)
    new_schema = avro.parse(new)
    backward = strategy in (
        Strategy.BACKWARD,
        Strategy.BACKWARD_TRANSITIVE,
        Strategy.FULL,
        Strategy.FULL_TRANSITIVE,
    )
    forward = strategy in (
        Strategy.FORWARD,
        Strategy.FORWARD_TRANSITIVE,
        Strategy.FULL,
        Strategy.FULL_TRANSITIVE,
    )
    pairs = []
    if backward:
        pairs.append((new_schema, old_schema, new, old))  # the new schema reads what the old one wrote
    if forward:
        pairs.append((old_schema, new_schema, old, new))
    for reader, writer, reader_text, writer_text in pairs:
        reason = avro.read_problem(reader, writer)
        if reason is not None:
            raise SchemaError(
                "org.apache.avro.SchemaValidationException: Unable to read schema: \n"
                f"{_shown(writer_text)}\nusing schema:\n{_shown(reader_text)}\n({reason})",
                incompatible=True,
            )


_SHOWN_MAX = 2048


def _shown(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return text if len(text) <= _SHOWN_MAX else text[:_SHOWN_MAX] + "..."


def validate(schema: Schema, data_bytes_max: int) -> None:
    """Refuse (:class:`SchemaError`, invalid) a schema Magnetar does not store (see the module docstring)."""
    if schema.type in UNSUPPORTED:
        raise SchemaError(f"schema type {schema.type.name} is not supported by Magnetar", invalid=True)
    if len(schema.data) > data_bytes_max:
        raise SchemaError(
            f"schema data of {len(schema.data)} bytes exceeds {data_bytes_max} bytes (schema_data_bytes_max)",
            invalid=True,
        )
    if len(schema.properties) > PROPERTIES_MAX:
        raise SchemaError(f"more than {PROPERTIES_MAX} schema properties", invalid=True)
    size = sum(
        len(k.encode("utf-8", "replace")) + len(v.encode("utf-8", "replace")) for k, v in schema.properties
    )
    if size > PROPERTIES_BYTES_MAX:
        raise SchemaError(
            f"schema properties of {size} bytes exceed {PROPERTIES_BYTES_MAX} bytes", invalid=True
        )
    if schema.type in STRUCT:
        try:
            avro.parse(schema.data)
        except avro.AvroSchemaError as exc:
            raise SchemaError(
                f"Invalid schema definition data for {schema.type.name} schema: {exc}", invalid=True
            ) from None


def type_of(number: int) -> SchemaType:
    """A protocol ``Schema.Type`` number as a type (:class:`SchemaError`, invalid, when unknown)."""
    try:
        return SchemaType(number)
    except ValueError:
        raise SchemaError(f"unknown schema type {number}", invalid=True) from None


def type_named(name: str) -> SchemaType:
    """An admin API type name (``AVRO``...) as a type (:class:`SchemaError`, invalid, when unknown)."""
    member = SchemaType.__members__.get(name) if isinstance(name, str) else None
    if member is None:
        raise SchemaError(f"unknown schema type {name!r}", invalid=True)
    return member
