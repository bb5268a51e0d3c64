"""A practical reading of Avro's schema resolution rules: may data written with one record schema be read with
another? Used for AVRO and JSON schemas (Pulsar's clients describe both as Avro record schemas).

What is checked (``docs/schemas.md`` says the same for users), reader against writer:

* records: the same name (unqualified); each reader field is found in the writer by name or by one of its
  aliases, and its type reads the writer field's type - or, absent from the writer, it has a ``default``.
  Writer fields the reader lacks are skipped, as Avro does;
* primitives: the same type, or Avro's promotions (int to long/float/double, long to float/double, float to
  double, string to and from bytes); a logical type is read as its underlying type;
* unions: every branch the writer may have written is read by some branch of the reader; a non-union
  reader reads a union writer only if it reads each of its branches;
* enums: the same name, and every writer symbol is a reader symbol unless the reader has a ``default``;
  arrays and maps by their items and values; fixed by name and size;
* a named type referred to by name: compatible when the names match (it was checked where defined).

Parsing is bounded: the JSON text is UTF-8, nests at most :data:`DEPTH_MAX` levels, and the top level must
be a record with a list of fields, each with a string name and a type.
"""

from __future__ import annotations

import json
from typing import Any

DEPTH_MAX = 64
"""Nesting levels of a schema's types (records in records, unions, arrays...)."""
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class AvroSchemaError(ValueError):
    """The data is not an Avro record schema this module reads (the message says why)."""


def parse(data: bytes) -> dict[str, Any]:
    """An Avro record schema's JSON (:class:`AvroSchemaError` when it is not one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AvroSchemaError("the schema is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise AvroSchemaError("the schema is not JSON") from None
    if not isinstance(value, dict) or value.get("type") != "record":
        raise AvroSchemaError("the schema is not an Avro record")
    _check_shape(value, 0)
    return value


def _check_shape(node: Any, depth: int) -> None:
    if depth > DEPTH_MAX:
        raise AvroSchemaError(f"the schema nests more than {DEPTH_MAX} levels")
    if isinstance(node, str):
        return
    if isinstance(node, list):
        for branch in node:
            _check_shape(branch, depth + 1)
        return
    if not isinstance(node, dict) or "type" not in node:
        raise AvroSchemaError("a type is neither a name, a union nor an object with a 'type'")
    kind = node["type"]
    if kind in {"record", "error"}:
        if not isinstance(node.get("name"), str) or not isinstance(node.get("fields"), list):
            raise AvroSchemaError("a record needs a string 'name' and a list of 'fields'")
        for f in node["fields"]:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise AvroSchemaError("a record field needs a string 'name' and a 'type'")
            _check_shape(f["type"], depth + 1)
    elif kind == "array":
        _check_shape(node.get("items", "null"), depth + 1)
    elif kind == "map":
        _check_shape(node.get("values", "null"), depth + 1)
    elif kind == "enum":
        if not isinstance(node.get("symbols"), list):
            raise AvroSchemaError("an enum needs a list of 'symbols'")
    else:
        _check_shape(kind, depth + 1)


def read_problem(reader: Any, writer: Any, depth: int = 0) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader`` (None: it can)."""
    if depth > DEPTH_MAX:
        return f"types nest more than {DEPTH_MAX} levels"
    reader = _plain(reader)
    writer = _plain(writer)
    if isinstance(writer, list):
        for branch in writer:
            problem = read_problem(reader, branch, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(reader, list):
        if any(read_problem(branch, writer, depth + 1) is None for branch in reader):
            return None
        return f"no branch of the reader's union reads {_name(writer)}"
    if isinstance(reader, str) or isinstance(writer, str):
        if isinstance(reader, str) and isinstance(writer, str):
            if reader == writer or reader in _PROMOTIONS.get(writer, ()):
                return None
        elif _name(reader) == _name(writer):
            return None  # a reference to a named type checked where it was defined
        return f"{_name(writer)} cannot be read as {_name(reader)}"
    kind = reader.get("type")
    if kind != writer.get("type"):
        return f"{_name(writer)} cannot be read as {_name(reader)}"
    if kind in ("record", "error"):
        return _record_problem(reader, writer, depth)
    if kind == "enum":
        if _short(reader.get("name")) != _short(writer.get("name")):
            return f"enum {_name(writer)} cannot be read as {_name(reader)}"
        missing = set(map(str, writer.get("symbols", []))) - set(map(str, reader.get("symbols", [])))
        if missing and "default" not in reader:
            return f"enum {_name(reader)} lacks the symbols {sorted(missing)}"
        return None
    if kind == "array":
        return read_problem(reader.get("items"), writer.get("items"), depth + 1)
    if kind == "map":
        return read_problem(reader.get("values"), writer.get("values"), depth + 1)
    if kind == "fixed":
        if _short(reader.get("name")) == _short(writer.get("name")) and reader.get("size") == writer.get(
            "size"
        ):
            return None
        return f"fixed {_name(writer)} cannot be read as {_name(reader)}"
    return None


def _record_problem(reader: dict[str, Any], writer: dict[str, Any], depth: int) -> str | None:
    if _short(reader.get("name")) != _short(writer.get("name")):
        return f"record {_name(writer)} cannot be read as record {_name(reader)}"
    written = {f["name"]: f for f in writer.get("fields", []) if isinstance(f, dict)}
    for field in reader.get("fields", []):
        names = [field["name"], *[a for a in field.get("aliases", []) if isinstance(a, str)]]
        source = next((written[n] for n in names if n in written), None)
        if source is None:
            if "default" not in field:
                return f"field '{field['name']}' of {_name(reader)} is new and has no default"
            continue
        problem = read_problem(field["type"], source["type"], depth + 1)
        if problem is not None:
            return f"field '{field['name']}': {problem}"
    return None


def _plain(node: Any) -> Any:
    """``{"type": "long", "logicalType": ...}`` as ``"long"``; anything else as it is."""
    if isinstance(node, dict) and isinstance(node.get("type"), str) and node["type"] in PRIMITIVES:
        return node["type"]
    return node


def _short(name: Any) -> str:
    return str(name).rsplit(".", 1)[-1]


def _name(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, dict):
        return _short(node.get("name", node.get("type")))
    return "a union"
