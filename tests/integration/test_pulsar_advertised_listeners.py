"""Advertised listeners against a real ``magnetar standalone``: three listeners - ``internal`` on the broker's
own port, ``external`` on a forwarder to the same port (so the test sees which address a client dialled) and
``dead`` on a port nobody listens on. LOOKUP answers exactly the named listener's URL (raw frames), the
official client with ``listener_name`` connects through it, the HTTP lookup honours ``listenerName`` and
``X-Pulsar-ListenerName``, and unknown or hostile names are refused in the protocol's terms."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pulsar
import pytest
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient, command
from fixtures.standalone_process import running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, Writer

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
LOOKUP_CONNECT, LOOKUP_FAILED = 1, 2


@dataclass
class Forwarder:
    """A TCP forwarder on a thread: ``port`` -> ``target``, counting the connections it forwarded."""

    target: int
    server: socket.socket = field(default_factory=socket.socket)
    connections: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.getsockname()[1])

    def start(self) -> None:
        self.server.bind((HOST, 0))
        self.server.listen()
        self._spawn(self._accept)

    def stop(self) -> None:
        self.server.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection((HOST, self.target))
            self._spawn(_pipe, client, upstream)
            self._spawn(_pipe, upstream, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class Setup:
    standalone: MagnetarProcess
    forwarder: Forwarder
    port: int
    dead: int

    def url(self, port: int) -> str:
        return f"pulsar://{HOST}:{port}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    port, dead = _free_port(), _free_port()
    forwarder = Forwarder(port)
    forwarder.start()
    listeners = f"internal:pulsar://{HOST}:{port},external:pulsar://{HOST}:{forwarder.port},dead:pulsar://{HOST}:{dead}"
    try:
        with running_standalone(
            tmp_path_factory.mktemp("listeners"),
            ["--broker-service-port", str(port)],
            env={"MAGNETAR_ADVERTISED_LISTENERS": listeners},
        ) as process:
            yield Setup(process, forwarder, port, dead)
    finally:
        forwarder.stop()


def _topic() -> str:
    return f"persistent://public/default/listen-{uuid.uuid4().hex[:8]}"


def _lookup(raw: RawClient, request_id: int, topic: str, listener: str | None) -> Fields:
    w = Writer().string(1, topic).uint(2, request_id)
    if listener is not None:
        w.string(7, listener)
    raw.send_command(command(CommandType.LOOKUP, w))
    kind, fields = raw.read()
    assert kind == CommandType.LOOKUP_RESPONSE
    assert fields.uint(4) == request_id
    return fields


def test_lookup_answers_the_named_listener(setup: Setup) -> None:
    raw = RawClient(HOST, setup.port)
    try:
        topic = _topic()
        expected = [
            (None, setup.port),
            ("internal", setup.port),
            ("external", setup.forwarder.port),
            ("dead", setup.dead),
            ("  ", setup.port),  # blank: none
        ]
        for request_id, (name, port) in enumerate(expected, start=1):
            answer = _lookup(raw, request_id, topic, name)
            assert (answer.uint(3), answer.string(1)) == (LOOKUP_CONNECT, setup.url(port))
            assert not answer.has(2)
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("nope", "nope"),
        ("ext\x00ernal", "'ext\\x00ernal'"),
        ("external\u202e", "'external\\u202e'"),
        ("x" * 10_000, "'" + "x" * 64 + "...'"),
    ],
)
def test_an_unknown_listener_is_refused(setup: Setup, name: str, shown: str) -> None:
    raw = RawClient(HOST, setup.port)
    try:
        answer = _lookup(raw, 1, _topic(), name)
        assert (answer.uint(3), answer.uint(6)) == (LOOKUP_FAILED, ServerError.ServiceNotReady)
        assert answer.string(7) == f"the broker do not have {shown} listener"
        # the connection goes on
        assert _lookup(raw, 2, _topic(), "external").string(1) == setup.url(setup.forwarder.port)
    finally:
        raw.close()
    assert setup.standalone.is_running()


def test_the_official_client_connects_through_the_named_listener(setup: Setup) -> None:
    before = setup.forwarder.connections
    client = pulsar.Client(setup.url(setup.port), listener_name="external", operation_timeout_seconds=15)
    try:
        topic = _topic()
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"through external")
        assert consumer.receive(10_000).data() == b"through external"
    finally:
        client.close()
    assert setup.forwarder.connections > before


@pytest.mark.parametrize("name", ["nope", "dead"])
def test_the_official_client_fails_on_an_unknown_or_unreachable_listener(setup: Setup, name: str) -> None:
    client = pulsar.Client(setup.url(setup.port), listener_name=name, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
    finally:
        client.close()


def _http_lookup(setup: Setup, topic: str, query: str = "", header: str | None = None) -> tuple[int, dict]:
    path = topic.replace("persistent://", "persistent/")
    url = f"http://{HOST}:{setup.standalone.ready['port']}/lookup/v2/topic/{path}{query}"
    request = urllib.request.Request(url)
    if header is not None:
        request.add_header("X-Pulsar-ListenerName", header)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_http_lookup_honours_the_listener_parameter_and_header(setup: Setup) -> None:
    topic = _topic()
    status, body = _http_lookup(setup, topic)
    assert (status, body["brokerUrl"]) == (200, setup.url(setup.port))
    status, body = _http_lookup(setup, topic, "?listenerName=external")
    assert (status, body["brokerUrl"], body["nativeUrl"]) == (200, *[setup.url(setup.forwarder.port)] * 2)
    status, body = _http_lookup(setup, topic, header="dead")
    assert (status, body["brokerUrl"]) == (200, setup.url(setup.dead))
    # the parameter wins over the header, as Pulsar's
    status, body = _http_lookup(setup, topic, "?listenerName=external", header="dead")
    assert (status, body["brokerUrl"]) == (200, setup.url(setup.forwarder.port))


@pytest.mark.parametrize(
    ("query", "header", "shown"),
    [
        ("?listenerName=nope", None, "nope"),
        ("?listenerName=" + urllib.parse.quote("a\u202eb"), None, "'a\\u202eb'"),
        ("?listenerName=" + "y" * 5000, None, "'" + "y" * 64 + "...'"),
        ("", "z\x7f", "'z\\x7f'"),
    ],
)
def test_http_lookup_refuses_an_unknown_listener(
    setup: Setup, query: str, header: str | None, shown: str
) -> None:
    status, body = _http_lookup(setup, _topic(), query, header)
    assert status == 500
    assert body["reason"] == f"the broker do not have {shown} listener"
    assert setup.standalone.is_running()
