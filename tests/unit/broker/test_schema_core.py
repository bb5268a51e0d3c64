"""The schema registry's decisions (:mod:`magnetar.broker.schemas.core`) and the Avro record check
(:mod:`magnetar.broker.schemas.avro`), without I/O."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.schemas import avro, core
from magnetar.broker.schemas.core import Schema, SchemaError, SchemaType, Strategy, VersionEntry


def _record(*fields: dict[str, object], name: str = "User") -> bytes:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)}).encode()


NAME = {"name": "name", "type": ["null", "string"]}
AGE = {"name": "age", "type": "int"}
EMAIL_DEFAULT = {"name": "email", "type": ["null", "string"], "default": None}
EMAIL_REQUIRED = {"name": "email", "type": "string"}
V0 = _record(NAME, AGE)


def _entry(version: int, schema: Schema, *, deleted: bool = False) -> VersionEntry:
    return VersionEntry(version, schema.type, schema.digest, 0, deleted)


def _check(old: bytes, new: bytes, strategy: Strategy) -> None:
    first = Schema(SchemaType.AVRO, old)
    core.check([(_entry(0, first), old)], Schema(SchemaType.AVRO, new), strategy)


@pytest.mark.parametrize(
    ("new", "strategy", "ok"),
    [
        (_record(NAME, AGE, EMAIL_DEFAULT), Strategy.FULL, True),
        (_record(NAME, AGE, EMAIL_REQUIRED), Strategy.FULL, False),
        (_record(NAME, AGE, EMAIL_REQUIRED), Strategy.BACKWARD, False),
        (_record(NAME, AGE, EMAIL_REQUIRED), Strategy.FORWARD, True),  # old readers skip the new field
        (_record(NAME), Strategy.BACKWARD, True),  # a field removed: new readers skip it
        (_record(NAME), Strategy.FORWARD, False),  # old readers need 'age', which has no default
        (_record(NAME, {"name": "age", "type": "long"}), Strategy.BACKWARD, True),  # int promotes to long
        (_record(NAME, {"name": "age", "type": "long"}), Strategy.FULL, False),  # long does not narrow
        (_record(NAME, {"name": "age", "type": "string"}), Strategy.ALWAYS_COMPATIBLE, True),
        (_record(NAME, AGE, EMAIL_DEFAULT), Strategy.ALWAYS_INCOMPATIBLE, False),
        (_record(NAME, AGE, name="Other"), Strategy.FULL, False),
        (V0, Strategy.ALWAYS_INCOMPATIBLE, True),  # identical: nothing to check
    ],
)
def test_avro_compatibility(new: bytes, strategy: Strategy, ok: bool) -> None:
    if ok:
        _check(V0, new, strategy)
    else:
        with pytest.raises(SchemaError) as caught:
            _check(V0, new, strategy)
        assert caught.value.incompatible


def test_incompatible_avro_names_the_field_and_uses_pulsars_message() -> None:
    with pytest.raises(SchemaError, match="Unable to read schema") as caught:
        _check(V0, _record(NAME, AGE, EMAIL_REQUIRED), Strategy.FULL)
    assert "field 'email'" in caught.value.message


def test_another_type_is_incompatible_with_pulsars_message() -> None:
    old = Schema(SchemaType.AVRO, V0)
    with pytest.raises(SchemaError, match="exists schema type AVRO, new schema type JSON"):
        core.check([(_entry(0, old), V0)], Schema(SchemaType.JSON, V0), Strategy.ALWAYS_INCOMPATIBLE)


def test_primitive_types_differ_only_by_type_or_strategy() -> None:
    old = Schema(SchemaType.STRING, b"")
    core.check([(_entry(0, old), b"")], Schema(SchemaType.STRING, b"x"), Strategy.FULL)
    with pytest.raises(SchemaError, match="ALWAYS_INCOMPATIBLE"):
        core.check([(_entry(0, old), b"")], Schema(SchemaType.STRING, b"x"), Strategy.ALWAYS_INCOMPATIBLE)


# -- histories: a model of versions, deletion marks and reuse -------------------------------------------

operations = st.lists(
    st.one_of(st.integers(0, 3).map(lambda i: ("put", i)), st.just(("delete", 0))), max_size=30
)


@given(operations)
def test_history_matches_a_model(ops: list[tuple[str, int]]) -> None:
    """Versions count up from 0 across deletions; a schema identical to a live one gets its version; after a
    deletion nothing before it is live."""
    history: list[VersionEntry] = []
    model_live: dict[bytes, int] = {}
    for op, i in ops:
        if op == "delete":
            if history and not history[-1].deleted:
                mark = VersionEntry(core.next_version(history, 1000), SchemaType.NONE, "", 0, True)
                history.append(mark)
                model_live.clear()
            continue
        schema = Schema(SchemaType.STRING, bytes([i]))
        found = core.existing_version(history, schema)
        assert found == model_live.get(schema.data)
        if found is None:
            version = core.next_version(history, 1000)
            assert version == len(history)
            history.append(_entry(version, schema))
            model_live[schema.data] = version
        latest = core.latest(history)
        assert (latest is not None and latest.digest == schema.digest) or found is not None
    assert [e.version for e in history] == list(range(len(history)))
    assert {e.version for e in core.live(history)} == set(model_live.values())


def test_versions_are_bounded() -> None:
    history = [_entry(i, Schema(SchemaType.STRING, bytes([i]))) for i in range(3)]
    with pytest.raises(SchemaError, match="schema_versions_max"):
        core.next_version(history, 3)


def test_transitive_strategies_check_every_live_version() -> None:
    history = [_entry(i, Schema(SchemaType.STRING, bytes([i]))) for i in range(3)]
    assert len(core.versions_to_check(history, Strategy.FULL_TRANSITIVE)) == 3
    assert [e.version for e in core.versions_to_check(history, Strategy.FULL)] == [2]
    assert core.versions_to_check(history, Strategy.ALWAYS_COMPATIBLE) == []
    assert core.consumer_strategy(Strategy.FULL) is Strategy.BACKWARD


# -- validation and hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (Schema(SchemaType.AVRO, b"\xff\xfe"), "not UTF-8"),
        (Schema(SchemaType.JSON, b"{"), "not JSON"),
        (Schema(SchemaType.AVRO, b"[" * 50_000 + b"]" * 50_000), "not JSON|not an Avro record"),
        (
            Schema(SchemaType.AVRO, b'{"type":"record","name":"R","fields":[{"name":1,"type":"int"}]}'),
            "field",
        ),
        (
            Schema(
                SchemaType.AVRO,
                b'{"type":"record","name":"R","fields":[{"name":"a","type":' * 70 + b'"int"' + b"}]}" * 70,
            ),
            "nests more than",
        ),
        (Schema(SchemaType.STRING, b"x" * 11), "exceeds 10 bytes"),
        (Schema(SchemaType.PROTOBUF, b""), "not supported"),
        (Schema(SchemaType.STRING, b"", tuple((str(i), "") for i in range(65))), "properties"),
        (Schema(SchemaType.STRING, b"", (("k", "v" * 5000),)), "exceed"),
    ],
)
def test_invalid_schemas_are_refused(schema: Schema, text: str) -> None:
    with pytest.raises(SchemaError, match=text) as caught:
        core.validate(schema, 10 if schema.type is SchemaType.STRING else 1 << 20)
    assert caught.value.invalid


@pytest.mark.parametrize("number", [-1, 23, 99, 2**63])
def test_unknown_type_numbers_and_names(number: int) -> None:
    with pytest.raises(SchemaError, match="unknown schema type"):
        core.type_of(number)
    with pytest.raises(SchemaError, match="unknown schema type"):
        core.type_named("AVRO\u202e")
    assert core.type_named("KEY_VALUE") is SchemaType.KEY_VALUE


@given(
    st.recursive(
        st.sampled_from(["int", "long", "string", "null"]), lambda inner: st.lists(inner, max_size=3)
    )
)
def test_a_type_reads_itself(node: object) -> None:
    assert avro.read_problem(node, node) is None
