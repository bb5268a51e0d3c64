"""The OpenAPI 3.1 document of the admin API, generated from the declared endpoints.

Each :class:`~.framework.Endpoint` contributes its path (``{name:path}`` placeholders become plain
``{name}``), its query model's fields as query parameters, its body type as the request body, its response
type (or 204) and its documented error statuses, all answering Pulsar's ``ErrorData`` (``{"reason": ...}``).
Schemas come from pydantic (JSON Schema 2020-12, which OpenAPI 3.1 uses as is) and are collected under
``components/schemas``. The document is built on its first use (:class:`OpenApiDocument`): generating every
schema costs pydantic about 0.2 s of CPU, which a broker that is never asked for it should not spend at each
start.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter

from magnetar.admin.rest.framework import NUMBER_PATH_PARAMETERS, Endpoint, boolean_query_names
from magnetar.broker.wire import NAMED_ENTITY_CHARS_MAX, RELATIVE_SEGMENTS

REF_TEMPLATE = "#/components/schemas/{model}"
ERROR_SCHEMA = {
    "type": "object",
    "properties": {"reason": {"type": "string"}},
    "required": ["reason"],
    "title": "ErrorData",
}
NAME_PATTERN = r"^[-=:.A-Za-z0-9_]+$"
TITLE = "Magnetar admin API (Pulsar admin v2)"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::path)?\}")


def _schema(tp: Any, components: dict[str, Any]) -> dict[str, Any]:
    """The schema of ``tp``; models (top-level or nested) go to ``components`` and are referenced."""
    schema = TypeAdapter(tp).json_schema(ref_template=REF_TEMPLATE)
    for name, definition in schema.pop("$defs", {}).items():
        components[name] = definition
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        components[tp.__name__] = schema
        return {"$ref": REF_TEMPLATE.format(model=tp.__name__)}
    return schema


def _path_parameters(pattern: str) -> list[dict[str, Any]]:
    out = []
    for name in _PLACEHOLDER.findall(pattern):
        schema: dict[str, Any] = {"type": "string", "minLength": 1}
        if name in NUMBER_PATH_PARAMETERS:
            low, high = NUMBER_PATH_PARAMETERS[name]
            schema = {"type": "integer", "format": "int64", "minimum": low, "maximum": high}
        elif name in ("tenant", "namespace", "cluster"):
            schema["pattern"] = NAME_PATTERN
            schema["maxLength"] = NAMED_ENTITY_CHARS_MAX
            schema["not"] = {"enum": sorted(RELATIVE_SEGMENTS)}
        out.append({"name": name, "in": "path", "required": True, "schema": schema})
    return out


def _query_parameters(endpoint: Endpoint, components: dict[str, Any]) -> list[dict[str, Any]]:
    schema = TypeAdapter(endpoint.query).json_schema(ref_template=REF_TEMPLATE)
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    booleans = boolean_query_names(endpoint.query)
    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": _java_boolean(prop) if name in booleans else prop,
        }
        for name, prop in props.items()
    ]


def _java_boolean(prop: dict[str, Any]) -> dict[str, Any]:
    """A boolean query parameter takes any text, as JAX-RS reads it: ``true`` in any case, else false."""
    default = prop.get("default")
    out: dict[str, Any] = {"type": "string", "description": "true (any case); any other value is false"}
    if isinstance(default, bool):
        out["default"] = "true" if default else "false"
    return out


def _operation(endpoint: Endpoint, components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": endpoint.summary,
        "tags": [endpoint.tag],
        "operationId": f"{endpoint.method.lower()}_{endpoint.handler.__name__}",
        "parameters": _path_parameters(endpoint.path) + _query_parameters(endpoint, components),
    }
    if endpoint.body is not None:
        op["requestBody"] = {
            "required": endpoint.body_required,
            "content": {"application/json": {"schema": _schema(endpoint.body, components)}},
        }
    responses: dict[str, Any] = {}
    if endpoint.status == 204:
        responses["204"] = {"description": "Done"}
    elif endpoint.response is not None:
        content = {"application/json": {"schema": _schema(endpoint.response, components)}}
        responses[str(endpoint.status)] = {"description": "OK", "content": content}
        if _may_be_empty(endpoint):
            responses["204"] = {"description": "Not set"}
    else:
        content = {endpoint.content_type: {"schema": {"type": "string"}}}
        responses[str(endpoint.status)] = {"description": "OK", "content": content}
    error_content = {"application/json": {"schema": {"$ref": REF_TEMPLATE.format(model="ErrorData")}}}
    documented = {400: "Bad request", **endpoint.errors}
    if any(name in endpoint.path for name in ("{tenant}", "{namespace}", "{cluster}", "{topic}")):
        documented.setdefault(412, "Name is not valid")
    for status, description in sorted(documented.items()):
        responses[str(status)] = {"description": description, "content": error_content}
    op["responses"] = responses
    return op


def _may_be_empty(endpoint: Endpoint) -> bool:
    """GET of a policy that may be unset answers 204 (JAX-RS ``null``)."""
    tail = endpoint.path.rsplit("/", 1)[-1]
    return endpoint.method == "GET" and tail in ("retention", "messageTTL")


def build_document(
    endpoints: list[Endpoint], *, title: str = "Magnetar admin API (Pulsar admin v2)"
) -> dict[str, Any]:
    components: dict[str, Any] = {"ErrorData": ERROR_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        path = _PLACEHOLDER.sub(lambda m: "{" + m.group(1) + "}", endpoint.path)
        paths.setdefault(path, {})[endpoint.method.lower()] = _operation(endpoint, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "2"},
        "paths": paths,
        "components": {"schemas": components},
    }


class OpenApiDocument(Mapping[str, Any]):
    """The document of ``endpoints``, built on first use and kept; :meth:`built` is it as a plain ``dict``."""

    __slots__ = ("_document", "_endpoints")

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self._endpoints = tuple(endpoints)
        self._document: dict[str, Any] | None = None

    def built(self) -> dict[str, Any]:
        if self._document is None:
            self._document = build_document(list(self._endpoints))
        return self._document

    def __getitem__(self, key: str) -> Any:
        return self.built()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.built())

    def __len__(self) -> int:
        return len(self.built())
