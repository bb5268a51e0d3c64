"""Pulsar's schema routes (``PulsarAdmin.schemas()``), over the broker's schema registry
(:mod:`magnetar.broker.schemas`); ``docs/schemas.md`` describes them.

* ``GET /admin/v2/schemas/{t}/{ns}/{topic}/schema`` - the latest schema as ``GetSchemaResponse``
  ``{version, type, timestamp, data, properties}``; 404 "Schema not found" (none) or "Schema is deleted".
* ``GET .../schema/{version}`` - one version (404 when it is not live; 412 for a version that is not a
  non-negative Java ``long``).
* ``GET .../schemas`` - every live version: ``{"getSchemaResponses": [...]}``.
* ``POST .../schema`` - ``PostSchemaPayload`` ``{type, schema, properties}``: the version it gets (an
  identical live one's, or a new one the strategy allows) as ``{"version": {"version": N}}`` (202); 409 with
  Pulsar's message when incompatible, 422 when invalid (unknown type, bad definition, too large).
* ``DELETE .../schema[?force=true]`` - a deletion mark (``{"version": N}``), or with ``force`` the whole
  history.
* ``POST .../compatibility`` - ``{"compatibility": bool, "schemaCompatibilityStrategy": "FULL"}``.
* ``POST .../version`` - the version of an identical live schema, ``{"version": N}`` (-1: none).

Reads need the topic's ``get_metadata`` operation (produce or consume permission); writes and the
compatibility test, the tenant's admin (the rules of :mod:`.access`). The topic segment is the local name of
a persistent topic; a partition's schema is its partitioned topic's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from magnetar.admin.rest.framework import AdminError, Call, Endpoint, QueryModel, ok
from magnetar.admin.rest.names import topic_of
from magnetar.bookkeeper.runtime.http import HttpResponse, json_response
from magnetar.broker.schemas import (
    Schema,
    SchemaError,
    SchemaRegistry,
    SchemaStoreError,
    StoredSchema,
    type_named,
)

TAG = "schemas"
PREFIX = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
PAYLOAD_PROPERTIES_MAX = 64
"""Properties a ``PostSchemaPayload`` may carry (the registry bounds their bytes)."""
_I64_MAX = 2**63 - 1


class PostSchemaPayload(BaseModel):
    """Pulsar's ``PostSchemaPayload``."""

    model_config = ConfigDict(extra="ignore")

    type: str
    schema_: str = Field(default="", alias="schema")
    properties: dict[str, str] = Field(default_factory=dict, max_length=PAYLOAD_PROPERTIES_MAX)


class AuthoritativeQuery(QueryModel):
    authoritative: bool = False


class DeleteQuery(QueryModel):
    authoritative: bool = False
    force: bool = False


def _registry(call: Call) -> SchemaRegistry:
    return call.context.schemas


def _response(stored: StoredSchema) -> dict[str, Any]:
    entry = stored.entry
    return {
        "version": entry.version,
        "type": entry.type.name,
        "timestamp": entry.timestamp_ms,
        "data": stored.data.decode("utf-8", "replace"),
        "properties": dict(entry.properties),
    }


def _schema_of(payload: PostSchemaPayload) -> Schema:
    try:
        schema_type = type_named(payload.type)
    except SchemaError as exc:
        raise AdminError(422, f"Invalid schema type: {exc.message}") from None
    return Schema(
        schema_type, payload.schema_.encode("utf-8", "surrogatepass"), tuple(payload.properties.items())
    )


def _failed(exc: SchemaError | SchemaStoreError) -> AdminError:
    if isinstance(exc, SchemaStoreError):
        return AdminError(503, f"metadata store: {exc}")
    if exc.incompatible:
        return AdminError(409, exc.message)
    if exc.invalid:
        return AdminError(422, exc.message)
    return AdminError(412, exc.message)


def _version_of(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > _I64_MAX:
        raise AdminError(412, f"Invalid schema version: {text[:40]!r}")
    return int(text)


async def get_schema(call: Call) -> HttpResponse:
    topic = topic_of(call)
    try:
        history = await _registry(call).history(topic)
        stored = await _registry(call).get(topic)
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    if stored is None:
        raise AdminError(404, "Schema is deleted" if history else "Schema not found")
    return ok(_response(stored))


async def get_schema_version(call: Call) -> HttpResponse:
    topic = topic_of(call)
    version = _version_of(call.param("version"))
    try:
        stored = await _registry(call).get(topic, version)
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    if stored is None:
        raise AdminError(404, "Schema not found")
    return ok(_response(stored))


async def get_all_schemas(call: Call) -> HttpResponse:
    topic = topic_of(call)
    try:
        stored = await _registry(call).all_live(topic)
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    return ok({"getSchemaResponses": [_response(s) for s in stored]})


async def post_schema(call: Call) -> HttpResponse:
    topic = topic_of(call)
    schema = _schema_of(call.body)
    registry = _registry(call)
    try:
        version = await registry.put(topic, schema, registry.strategy())
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    return json_response({"version": {"version": version}}, 202)


async def delete_schema(call: Call) -> HttpResponse:
    topic = topic_of(call)
    force = call.query_as(DeleteQuery).force
    try:
        version = await _registry(call).delete(topic, force=force)
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    return ok({"version": -1 if version is None else version})


async def test_compatibility(call: Call) -> HttpResponse:
    topic = topic_of(call)
    schema = _schema_of(call.body)
    registry = _registry(call)
    strategy = registry.strategy()
    try:
        await registry.check(topic, schema, strategy)
        compatible = True
    except SchemaError as exc:
        if not (exc.incompatible or exc.invalid):
            raise _failed(exc) from None
        compatible = False
    except SchemaStoreError as exc:
        raise _failed(exc) from None
    return ok({"compatibility": compatible, "schemaCompatibilityStrategy": strategy.value})


async def get_version_by_schema(call: Call) -> HttpResponse:
    topic = topic_of(call)
    schema = _schema_of(call.body)
    try:
        version = await _registry(call).find_version(topic, schema)
    except (SchemaError, SchemaStoreError) as exc:
        raise _failed(exc) from None
    return ok({"version": -1 if version is None else version})


def endpoints() -> list[Endpoint]:
    e = {412: "Topic name or version is not valid"}
    e_post = {**e, 409: "Incompatible schema", 422: "Invalid schema"}
    q = AuthoritativeQuery
    body = PostSchemaPayload
    answer = dict[str, Any]
    return [
        Endpoint("GET", f"{PREFIX}/schema", get_schema, "The topic's latest schema", TAG, query=q,
                 response=answer, status=200, errors={**e, 404: "Schema not found / Schema is deleted"}),
        Endpoint("GET", f"{PREFIX}/schema/{{version}}", get_schema_version, "One version of the schema", TAG,
                 query=q, response=answer, status=200, errors={**e, 404: "Schema not found"}),
        Endpoint("GET", f"{PREFIX}/schemas", get_all_schemas, "Every live version of the schema", TAG,
                 query=q, response=answer, status=200, errors=e),
        Endpoint("POST", f"{PREFIX}/schema", post_schema, "Add a schema version", TAG, query=q,
                 body=body, body_required=True, response=answer, status=202, errors=e_post),
        Endpoint("DELETE", f"{PREFIX}/schema", delete_schema, "Delete the topic's schema", TAG,
                 query=DeleteQuery, response=answer, status=200, errors=e),
        Endpoint("POST", f"{PREFIX}/compatibility", test_compatibility, "Test a schema's compatibility", TAG,
                 query=q, body=body, body_required=True, response=answer, status=200, errors=e_post),
        Endpoint("POST", f"{PREFIX}/version", get_version_by_schema, "An identical schema's version", TAG,
                 query=q, body=body, body_required=True, response=answer, status=200, errors=e_post),
    ]  # fmt: skip
