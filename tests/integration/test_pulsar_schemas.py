"""Schemas over Pulsar's binary protocol against a real ``magnetar standalone``, driven by the official
``pulsar-client``: String, JSON and Avro producers and consumers round-trip records, an incompatible Avro
change is refused with ``IncompatibleSchema``, a compatible one becomes version 1, a BYTES producer still
publishes to a topic with a schema. GET_SCHEMA and GET_OR_CREATE_SCHEMA, and their hostile cases, are sent
on a raw connection."""

from __future__ import annotations

import io
import json
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pulsar
import pytest
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import official_client, running_standalone
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from magnetar.admin.cli.admin_client import admin_main
from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.encoders import encode_connect
from magnetar.broker.protocols.pulsar_binary.framing import encode_frame
from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, Writer, parse_message
from magnetar.broker.protocols.pulsar_binary.schema_commands import (
    WireSchema,
    encode_get_or_create_schema,
    encode_get_schema,
)

pytestmark = [pytest.mark.processes]


class User(Record):
    name = String()
    age = Integer()


class UserWithEmail(Record):
    name = String()
    age = Integer()
    email = String(default=None, required_default=True)


class UserWithRequiredEmail(Record):
    name = String()
    age = Integer()
    email = String(required=True)


# The evolved records must carry the first one's record name for Avro to resolve them.
UserWithEmail.__name__ = "User"
UserWithRequiredEmail.__name__ = "User"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("schemas")) as process:
        yield process


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    with official_client(standalone) as c:
        yield c


def _topic() -> str:
    return f"persistent://public/default/schema-{uuid.uuid4().hex[:8]}"


def _round_trip(client: pulsar.Client, topic: str, schema: object, values: list[object]) -> list[object]:
    consumer = client.subscribe(topic, "sub", schema=schema, initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, schema=schema)
    for value in values:
        producer.send(value)
    got = []
    for _ in values:
        message = consumer.receive(10_000)
        got.append(message.value())
        consumer.acknowledge(message)
    producer.close()
    consumer.close()
    return got


def test_string_json_and_avro_round_trip(client: pulsar.Client) -> None:
    assert _round_trip(client, _topic(), StringSchema(), ["a", "b"]) == ["a", "b"]
    for schema in (JsonSchema(User), AvroSchema(User)):
        got = _round_trip(client, _topic(), schema, [User(name="ann", age=3), User(name="bo", age=None)])
        assert [(u.name, u.age) for u in got] == [("ann", 3), ("bo", None)]


def test_compatible_evolution_gets_version_1_and_incompatible_is_refused(client: pulsar.Client) -> None:
    topic = _topic()
    first = client.create_producer(topic, schema=AvroSchema(User))
    first.send(User(name="ann", age=3))
    evolved = client.create_producer(topic, schema=AvroSchema(UserWithEmail))
    evolved.send(UserWithEmail(name="bo", age=4, email="bo@example.com"))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserWithRequiredEmail))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=JsonSchema(User))  # another type
    # a BYTES producer (no schema) is served, as in Pulsar
    raw = client.create_producer(topic)
    raw.close()
    consumer = client.subscribe(
        topic, "evolved", schema=AvroSchema(UserWithEmail), initial_position=pulsar.InitialPosition.Earliest
    )
    got = [consumer.receive(10_000).value() for _ in range(2)]
    assert [(u.name, u.email) for u in got] == [("ann", None), ("bo", "bo@example.com")]
    with _raw(client_url(client)) as conn:
        versions = []
        for version in (None, 0, 1):
            answer = conn.request(
                encode_get_schema(7, topic, None if version is None else struct.pack(">q", version))
            )
            versions.append(struct.unpack(">q", answer.bytes_(5))[0])
        assert versions == [1, 0, 1]
    first.close()
    evolved.close()
    consumer.close()


def test_consumer_with_an_incompatible_schema_is_refused(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic, schema=AvroSchema(User))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=AvroSchema(UserWithRequiredEmail))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=StringSchema())
    producer.close()


# -- raw connection: GET_SCHEMA, GET_OR_CREATE_SCHEMA and hostile input -------------------------------------

_URLS: dict[int, str] = {}


def client_url(client: pulsar.Client) -> str:
    return _URLS[id(client)]


@pytest.fixture(autouse=True)
def _remember_url(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    _URLS[id(client)] = standalone.ready["brokerUrl"]


class _Raw:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.kind = 0

    def _read(self) -> tuple[int, Fields]:
        head = self._exactly(8)
        total, size = struct.unpack(">II", head)
        command = self._exactly(size)
        self._exactly(total - 4 - size)
        base = parse_message(command, "BaseCommand")
        kind = base.required_uint(1)
        sub = base.message(kind, "command")
        assert sub is not None
        return kind, sub

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def request(self, command: bytes) -> Fields:
        self.sock.sendall(encode_frame(command))
        while True:
            kind, sub = self._read()
            if kind not in (CommandType.PING, CommandType.PONG):
                self.kind = kind
                return sub


class _RawContext:
    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def __enter__(self) -> _Raw:
        raw = _Raw(self.sock)
        raw.request(encode_connect("raw", 21))
        return raw

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def _raw(url: str) -> _RawContext:
    return _RawContext(url)


def _avro(fields: str) -> bytes:
    return ('{"type":"record","name":"R","fields":[' + fields + "]}").encode()


def test_get_schema_and_get_or_create_schema(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    topic = _topic()
    url = client_url(client)
    with _raw(url) as conn:
        missing = conn.request(encode_get_schema(1, topic))
        assert missing.uint(2) == ServerError.TopicNotFound
        assert missing.string(3) == "Schema not found"
        absent = conn.request(encode_get_or_create_schema(2, topic, WireSchema("", 4, _avro(""), ())))
        assert absent.uint(2) == ServerError.TopicNotFound
    client.create_producer(topic).close()  # the topic exists now, without a schema
    schema = WireSchema("R", 4, _avro('{"name":"a","type":"int"}'), (("k", "v"),))
    with _raw(url) as conn:
        created = conn.request(encode_get_or_create_schema(3, topic, schema))
        assert not created.has(2)
        assert struct.unpack(">q", created.bytes_(4))[0] == 0
        again = conn.request(encode_get_or_create_schema(4, topic, schema))
        assert struct.unpack(">q", again.bytes_(4))[0] == 0
        got = conn.request(encode_get_schema(5, topic))
        stored = got.required_message(4, "Schema")
        assert stored.bytes_(3) == schema.data
        assert stored.uint(4) == 4
        empty = conn.request(encode_get_schema(6, topic, b""))
        assert empty.uint(2) == ServerError.IncompatibleSchema


@pytest.mark.parametrize(
    ("version", "error"),
    [
        (b"", ServerError.IncompatibleSchema),
        (struct.pack(">q", -1), ServerError.IncompatibleSchema),
        (b"\x00" * 9, ServerError.IncompatibleSchema),
        (struct.pack(">Q", 2**63), ServerError.IncompatibleSchema),
        (struct.pack(">q", 2**63 - 1), ServerError.TopicNotFound),
    ],
)
def test_hostile_versions(client: pulsar.Client, version: bytes, error: ServerError) -> None:
    with _raw(client_url(client)) as conn:
        answer = conn.request(encode_get_schema(1, _topic(), version))
        assert answer.uint(2) == error
        assert (
            conn.request(encode_get_schema(2, _topic())).uint(2) == ServerError.TopicNotFound
        )  # still served


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (WireSchema("", 99, b"", ()), "unknown schema type 99"),
        (WireSchema("", 2**40, b"", ()), "unknown schema type"),
        (WireSchema("", 4, b"x" * (2**20 + 1), ()), "exceeds"),
        (WireSchema("", 2, b"\xff\xfe{", ()), "not UTF-8"),
        (WireSchema("", 4, b'{"type": "record"}', ()), "Invalid schema definition data for AVRO"),
        (WireSchema("", 4, b"[" * 100_000 + b"]" * 100_000, ()), "Invalid schema definition"),
        (WireSchema("", 3, b"", ()), "PROTOBUF is not supported"),
        (WireSchema("", 15, b"", ()), "KEY_VALUE is not supported"),
    ],
)
def test_hostile_producer_schemas(client: pulsar.Client, schema: WireSchema, text: str) -> None:
    topic = _topic()
    client.create_producer(topic).close()
    with _raw(client_url(client)) as conn:
        producer = (
            Writer().string(1, topic).uint(2, 1).uint(3, 1)
            .data(7, Writer().string(1, schema.name).data(3, schema.data).uint(4, schema.type).bytes())
        )  # fmt: skip
        answer = conn.request(Writer().uint(1, CommandType.PRODUCER).data(5, producer.bytes()).bytes())
        assert conn.kind == CommandType.ERROR
        assert answer.uint(2) == ServerError.IncompatibleSchema, answer.string(3)
        assert text in answer.string(3)
        assert conn.request(encode_get_schema(2, topic)).uint(2) == ServerError.TopicNotFound  # still served


def test_bidi_topic_name_is_a_clear_error(client: pulsar.Client) -> None:
    with _raw(client_url(client)) as conn:
        answer = conn.request(encode_get_schema(1, "persistent://public/default/a\u202eb"))
        assert answer.uint(2) == ServerError.InvalidTopicName


# -- the admin API (PulsarAdmin.schemas() shapes) --------------------------------------------------------


def _admin(standalone: MagnetarProcess) -> httpx.Client:
    return httpx.Client(base_url=standalone.ready["httpUrl"], timeout=10)


def test_admin_schema_routes(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    local = f"admin-{uuid.uuid4().hex[:8]}"
    base = f"/admin/v2/schemas/public/default/{local}"
    v0 = {"type": "AVRO", "schema": _avro('{"name":"a","type":"int"}').decode(), "properties": {"k": "v"}}
    v1 = {"type": "AVRO", "schema": _avro('{"name":"a","type":"int"},{"name":"b","type":"int","default":1}')
          .decode(), "properties": {}}  # fmt: skip
    bad = {"type": "AVRO", "schema": _avro('{"name":"a","type":"int"},{"name":"c","type":"int"}').decode()}
    with _admin(standalone) as http:
        assert http.get(f"{base}/schema").json() == {"reason": "Schema not found"}
        assert http.get(f"{base}/schema").status_code == 404
        posted = http.post(f"{base}/schema", json=v0)
        assert (posted.status_code, posted.json()) == (202, {"version": {"version": 0}})
        assert http.post(f"{base}/schema", json=v0).json() == {"version": {"version": 0}}
        got = http.get(f"{base}/schema").json()
        assert {k: got[k] for k in ("version", "type", "data", "properties")} == {
            "version": 0, "type": "AVRO", "data": v0["schema"], "properties": {"k": "v"}
        }  # fmt: skip
        assert got["timestamp"] > 0
        compat = http.post(f"{base}/compatibility", json=bad).json()
        assert compat == {"compatibility": False, "schemaCompatibilityStrategy": "FULL"}
        refused = http.post(f"{base}/schema", json=bad)
        assert refused.status_code == 409
        assert "Unable to read schema" in refused.json()["reason"]
        assert http.post(f"{base}/schema", json=v1).json() == {"version": {"version": 1}}
        assert http.post(f"{base}/version", json=v0).json() == {"version": 0}
        assert http.post(f"{base}/version", json=bad).json() == {"version": -1}
        assert [s["version"] for s in http.get(f"{base}/schemas").json()["getSchemaResponses"]] == [0, 1]
        assert http.get(f"{base}/schema/0").json()["data"] == v0["schema"]
        assert http.delete(f"{base}/schema").json() == {"version": 2}
        assert http.get(f"{base}/schema").json() == {"reason": "Schema is deleted"}
        assert http.get(f"{base}/schema/0").status_code == 404
        assert http.get(f"{base}/schemas").json() == {"getSchemaResponses": []}
        assert http.post(f"{base}/schema", json=bad).json() == {"version": {"version": 3}}  # a fresh start
        assert http.delete(f"{base}/schema", params={"force": "true"}).json() == {"version": -1}
        assert http.get(f"{base}/schema").json() == {"reason": "Schema not found"}
    # a schema posted by the admin is what a producer of the topic meets
    with _admin(standalone) as http:
        http.post(f"{base}/schema", json={"type": "STRING", "schema": ""})
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(f"persistent://public/default/{local}", schema=AvroSchema(User))


@pytest.mark.parametrize(
    ("method", "suffix", "body", "status"),
    [
        ("GET", "/schema/-1", None, 412),
        ("GET", "/schema/9223372036854775808", None, 412),
        ("GET", "/schema/%D9%A1", None, 412),  # an Arabic-Indic digit one
        ("GET", "/schema/abc", None, 412),
        ("GET", "/schema/9223372036854775807", None, 404),
        ("POST", "/schema", {"type": "PROTOBUF", "schema": ""}, 422),
        ("POST", "/schema", {"type": "NOPE\u202e", "schema": ""}, 422),
        ("POST", "/schema", {"type": 4, "schema": ""}, 400),
        ("POST", "/schema", {"type": "AVRO", "schema": "{"}, 422),
        ("POST", "/schema", {"type": "JSON", "schema": "x" * (2**20 + 1)}, 422),
        ("POST", "/schema", {"type": "STRING", "schema": "", "properties": {"k": "v" * 5000}}, 422),
        ("POST", "/schema", {"schema": ""}, 400),
        ("POST", "/compatibility", [], 400),
    ],
)
def test_admin_hostile_input(
    standalone: MagnetarProcess, method: str, suffix: str, body: object, status: int
) -> None:
    base = f"/admin/v2/schemas/public/default/hostile-{uuid.uuid4().hex[:8]}"
    with _admin(standalone) as http:
        answer = http.request(method, base + suffix, json=body)
        assert answer.status_code == status, answer.text
        assert answer.json()["reason"]
        assert http.get(f"{base}/schemas").status_code == 200  # still served


def test_admin_bidi_topic_is_a_clear_error(standalone: MagnetarProcess) -> None:
    with _admin(standalone) as http:
        answer = http.get("/admin/v2/schemas/public/default/a%E2%80%AEb/schema")
        assert answer.status_code == 412


def test_magnetar_admin_schemas_verbs(standalone: MagnetarProcess, tmp_path: Path) -> None:
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:8]}"
    payload = tmp_path / "schema.json"
    payload.write_text(json.dumps({"type": "AVRO", "schema": _avro('{"name":"a","type":"int"}').decode()}))
    url = ["--admin-url", standalone.ready["httpUrl"]]

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = admin_main([*url, "schemas", *argv], out, err)
        return code, out.getvalue(), err.getvalue()

    assert run("upload", topic, "-f", str(payload))[0] == 0
    code, out, _ = run("get", topic)
    assert code == 0
    assert json.loads(out)["type"] == "AVRO"
    assert json.loads(run("get", topic, "--version", "0")[1])["version"] == 0
    assert json.loads(run("compatibility", topic, "-f", str(payload))[1])["compatibility"] is True
    assert json.loads(run("delete", topic)[1]) == {"version": 1}
    code, _, err = run("get", topic)
    assert code == 1
    assert "Schema is deleted" in err
    assert run("upload", topic, "-f", str(tmp_path / "missing.json"))[0] == 2


def test_a_partitioned_topic_shares_one_schema(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    local = f"parts-{uuid.uuid4().hex[:8]}"
    with _admin(standalone) as http:
        assert http.put(f"/admin/v2/persistent/public/default/{local}/partitions", json=3).status_code == 204
    topic = f"persistent://public/default/{local}"
    got = _round_trip(client, topic, AvroSchema(User), [User(name=str(i), age=i) for i in range(6)])
    assert sorted(u.age for u in got) == list(range(6))
    with _admin(standalone) as http:
        versions = http.get(f"/admin/v2/schemas/public/default/{local}/schemas").json()["getSchemaResponses"]
        assert [v["version"] for v in versions] == [0]
        partition = http.get(f"/admin/v2/schemas/public/default/{local}-partition-2/schema").json()
        assert partition["version"] == 0
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserWithRequiredEmail))
