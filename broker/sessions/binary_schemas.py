"""Schemas over Pulsar's binary protocol, for the front door (:mod:`.binary_door`): the schema a PRODUCER or
a SUBSCRIBE names, GET_SCHEMA and GET_OR_CREATE_SCHEMA, answered from the broker's schema registry
(:mod:`magnetar.broker.schemas`) with Pulsar's errors.

Theory of operation: a producer's schema is put into its topic's history (an identical live version is
reused, a new one is checked against the compatibility strategy) and its version goes back in
PRODUCER_SUCCESS; a producer without a schema is served on any topic, as Pulsar's (its
``schemaValidationEnforced`` is off by default). A consumer's schema becomes the topic's schema when the
topic is idle and has none (no producer, no consumer, nothing stored), else it is checked as Pulsar checks
consumers. A refusal is :class:`SchemaRefusal`, carrying the ``ServerError`` to answer with:
``IncompatibleSchema`` for an incompatible or invalid schema, ``NotAllowedError`` past a bound,
``ServiceNotReady`` when the metadata store fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.broker.core import ServiceError
from magnetar.broker.protocols.pulsar_binary.commands import ServerError
from magnetar.broker.protocols.pulsar_binary.errors import server_error_of
from magnetar.broker.protocols.pulsar_binary.schema_commands import (
    GetOrCreateSchema,
    GetSchema,
    VersionError,
    WireSchema,
    decode_version,
    encode_get_or_create_schema_error,
    encode_get_or_create_schema_response,
    encode_get_schema_error,
    encode_get_schema_response,
    encode_version,
)
from magnetar.broker.schemas import Schema, SchemaError, SchemaStoreError, SchemaType, type_of
from magnetar.broker.wire import InvalidTopicNameError, TopicName, parse_topic_name

if TYPE_CHECKING:
    from magnetar.broker.sessions.host import SessionHost


class SchemaRefusal(Exception):
    def __init__(self, error: ServerError, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _refusal(exc: SchemaError | SchemaStoreError) -> SchemaRefusal:
    if isinstance(exc, SchemaStoreError):
        return SchemaRefusal(ServerError.ServiceNotReady, f"metadata store: {exc}")
    if exc.incompatible or exc.invalid:
        return SchemaRefusal(ServerError.IncompatibleSchema, exc.message)
    return SchemaRefusal(ServerError.NotAllowedError, exc.message)


def schema_of(wire: WireSchema) -> Schema | None:
    """The registry's schema for a wire schema; None for type NONE (no schema, as BYTES)."""
    try:
        schema_type = type_of(wire.type)
    except SchemaError as exc:
        raise _refusal(exc) from None
    if schema_type is SchemaType.NONE:
        return None
    return Schema(schema_type, wire.data, wire.properties)


async def producer_schema(service: SessionHost, topic: TopicName, wire: WireSchema | None) -> bytes | None:
    """The schema version (8 bytes) a producer's schema has in its topic, or None without a schema."""
    schema = None if wire is None else schema_of(wire)
    if schema is None:
        return None
    registry = service.schemas
    try:
        version = await registry.put(topic, schema, registry.strategy())
    except (SchemaError, SchemaStoreError) as exc:
        raise _refusal(exc) from None
    return encode_version(version)


async def consumer_schema(
    service: SessionHost, topic: TopicName, wire: WireSchema | None, served: object
) -> None:
    """Check a consumer's schema (or make it the topic's: see the module docstring)."""
    schema = None if wire is None else schema_of(wire)
    if schema is None:
        return
    registry = service.schemas
    try:
        await registry.add_for_consumer(topic, schema, registry.strategy(), idle=_idle(served))
    except (SchemaError, SchemaStoreError) as exc:
        raise _refusal(exc) from None


def _idle(topic: object) -> bool:
    if getattr(topic, "producers", None):
        return False
    subscriptions = getattr(topic, "subscriptions", {})
    if any(getattr(s, "consumers", None) for s in subscriptions.values()):
        return False
    ml = getattr(topic, "ml", None)
    return ml is None or ml.total_size() == 0


async def _topic_for(service: SessionHost, principal: Principal, name: str) -> TopicName:
    topic = parse_topic_name(name, allow_non_persistent=True)
    await service.security.authorize_lookup(principal, topic)
    return topic


async def answer_get_schema(service: SessionHost, principal: Principal, command: GetSchema) -> bytes:
    """GET_SCHEMA: the latest live schema, or the version asked for."""
    request_id = command.request_id
    try:
        topic = await _topic_for(service, principal, command.topic)
        version = None
        if command.version is not None:
            if not command.version:
                message = "Empty schema version"
                return encode_get_schema_error(request_id, ServerError.IncompatibleSchema, message)
            version = decode_version(command.version)
        stored = await service.schemas.get(topic, version)
    except VersionError as exc:
        return encode_get_schema_error(request_id, ServerError.IncompatibleSchema, str(exc))
    except (InvalidTopicNameError, ServiceError) as exc:
        return encode_get_schema_error(request_id, server_error_of(exc), str(exc))
    except (SchemaError, SchemaStoreError) as exc:
        refusal = _refusal(exc)
        return encode_get_schema_error(request_id, refusal.error, refusal.message)
    if stored is None:
        return encode_get_schema_error(request_id, ServerError.TopicNotFound, "Schema not found")
    entry = stored.entry
    return encode_get_schema_response(
        request_id,
        topic.partitioned_topic.local_name,
        entry.type,
        stored.data,
        entry.properties,
        entry.version,
    )


async def answer_get_or_create_schema(
    service: SessionHost, principal: Principal, command: GetOrCreateSchema
) -> bytes:
    """GET_OR_CREATE_SCHEMA: the schema's version in an existing topic, added when the strategy allows."""
    request_id = command.request_id
    try:
        topic = parse_topic_name(command.topic, allow_non_persistent=True)
        await service.security.authorize_producer(principal, topic)
        await service.serve_topic(topic, create=False)
        encoded = await producer_schema(service, topic, command.schema)
    except (InvalidTopicNameError, ServiceError) as exc:
        return encode_get_or_create_schema_error(request_id, server_error_of(exc), str(exc))
    except SchemaRefusal as exc:
        return encode_get_or_create_schema_error(request_id, exc.error, exc.message)
    if encoded is None:
        message = "a schema of type NONE has no version"
        return encode_get_or_create_schema_error(request_id, ServerError.IncompatibleSchema, message)
    return encode_get_or_create_schema_response(request_id, decode_version(encoded))
