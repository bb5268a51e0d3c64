"""Pulsar's binary protocol with security on, against a real ``magnetar standalone`` started as the README
tells operators (``--authentication-enabled`` with a token key, ``--broker-service-port-tls`` with the
certificate files of the HTTPS port), driven by the official ``pulsar-client``: token authentication over
CONNECT (no token, a bad one, an expired one refused with Pulsar's AuthenticationError while the broker goes
on serving), permissions checked by the authorization service the WebSocket API uses (PRODUCER without
``produce`` refused with AuthorizationError, ``consume`` enough to subscribe), and the ``pulsar+ssl://``
port (produce and consume through it; plain text and garbage on it end that connection only)."""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pulsar
import pytest
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.processes import MagnetarProcess, ProcessGroup
from fixtures.pulsar_raw import broker_closed
from fixtures.standalone_process import round_trip

from magnetar.bookkeeper.runtime.auth.tokens import create_token
from magnetar.broker.protocols.pulsar_binary.commands import (
    CommandType,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_auth_response,
    encode_connect,
    encode_ping,
)
from magnetar.broker.protocols.pulsar_binary.framing import FrameDecoder, encode_frame
from magnetar.broker.protocols.pulsar_binary.protobuf import parse_message

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
NAMESPACE = "acme/orders"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory, token_keys: TokenKeys, tls_files: TlsFiles
) -> Iterator[MagnetarProcess]:
    tmp: Path = tmp_path_factory.mktemp("binary-secure")
    key_file = tmp / "secret.key"
    key_file.write_bytes(token_keys.secret)
    group = ProcessGroup(tmp)
    args = [
        "standalone", "--data-dir", str(tmp / "data"), "--http-port", "0", "--broker-service-port", "0",
        "--bookie-port", str(free_port()),
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(), "--super-user-roles", "admin",
        "--broker-service-port-tls", "0", "--tls-certificate-file", str(tls_files.server_cert),
        "--tls-key-file", str(tls_files.server_key),
    ]  # fmt: skip
    refresh = {"MAGNETAR_AUTHENTICATION_REFRESH_CHECK_SECONDS": "1"}  # expired tokens are noticed within 1 s
    process = MagnetarProcess("secure-binary-standalone", args, tmp, refresh)
    group.processes.append(process)
    try:
        process.start(timeout_s=60)
        bearer = {"Authorization": f"Bearer {token_keys.token('admin')}"}
        with httpx.Client(base_url=str(process.ready["httpUrl"]), headers=bearer, timeout=10) as http:
            http.put(
                "/admin/v2/tenants/acme", json={"adminRoles": [], "allowedClusters": ["standalone"]}
            ).raise_for_status()
            http.put(f"/admin/v2/namespaces/{NAMESPACE}").raise_for_status()
            http.post(
                f"/admin/v2/namespaces/{NAMESPACE}/permissions/app", json=["produce", "consume"]
            ).raise_for_status()
            http.post(
                f"/admin/v2/namespaces/{NAMESPACE}/permissions/reader", json=["consume"]
            ).raise_for_status()
        yield process
        assert process.stop() == 0, process.log_tail()  # a clean stop: both binary listeners close
    finally:
        group.stop_all()


def _topic() -> str:
    return f"persistent://{NAMESPACE}/sec-{uuid.uuid4().hex[:8]}"


def _client(url: str, token: str | None = None, **kwargs: Any) -> pulsar.Client:
    authentication = pulsar.AuthenticationToken(token) if token is not None else None
    kwargs.setdefault("operation_timeout_seconds", 10)
    return pulsar.Client(url, authentication=authentication, **kwargs)


def test_ready_line_names_both_binary_ports(standalone: MagnetarProcess) -> None:
    ready = standalone.ready
    assert ready["brokerServicePortTls"] > 0
    assert ready["brokerServicePortTls"] != ready["brokerServicePort"]
    assert ready["brokerUrlTls"] == f"pulsar+ssl://{HOST}:{ready['brokerServicePortTls']}"


def test_a_token_with_permission_produces_and_consumes(
    standalone: MagnetarProcess, token_keys: TokenKeys
) -> None:
    client = _client(standalone.ready["brokerUrl"], token_keys.token("app"))
    try:
        assert round_trip(client, _topic(), 20, "m") == [f"m{i}".encode() for i in range(20)]
    finally:
        client.close()


def _refusal(port: int, auth: tuple[str, bytes] | None) -> tuple[int, int]:
    """CONNECT on a raw connection: the (command type, error) of the broker's answer, once it closed."""
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.sendall(encode_frame(encode_connect("raw", 21, auth)))
    received = b""
    with sock:
        while chunk := sock.recv(65536):
            received += chunk
    decoder = FrameDecoder(1 << 20)
    decoder.receive_data(received)
    frame = decoder.next_frame()
    assert frame is not None
    base = parse_message(frame.command, "BaseCommand")
    kind = base.uint(1)
    error = base.message(kind, "command")
    assert error is not None
    return kind, error.uint(2)


@pytest.mark.parametrize("which", ["none", "bad signature", "expired", "not a token", "control characters"])
def test_connect_without_a_valid_token_is_refused(
    standalone: MagnetarProcess, token_keys: TokenKeys, which: str
) -> None:
    tokens = {
        "none": None,
        "bad signature": token_keys.token("app")[:-4] + "AAAA",
        "expired": token_keys.token("app", expires_in_s=1),  # expired in 2023
        "not a token": "\u202e" + "x" * 5000,
        "control characters": "a.b\x00\x01.c\r\n",
    }
    token = tokens[which]
    auth = None if token is None else ("token", token.encode())
    # the broker answers CONNECT with Pulsar's ERROR AuthenticationError and closes the connection
    assert _refusal(standalone.ready["brokerServicePort"], auth) == (
        CommandType.ERROR,
        ServerError.AuthenticationError,
    )
    # the official client, like against Pulsar, retries the handshake until its operation timeout
    client = _client(standalone.ready["brokerUrl"], token, operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.Timeout):
            client.create_producer(_topic())
    finally:
        client.close()
    # the broker goes on serving
    good = _client(standalone.ready["brokerUrl"], token_keys.token("app"))
    try:
        assert round_trip(good, _topic(), 3, "m") == [b"m0", b"m1", b"m2"]
    finally:
        good.close()


def test_permissions_of_the_namespace_decide(standalone: MagnetarProcess, token_keys: TokenKeys) -> None:
    topic = _topic()
    reader = _client(standalone.ready["brokerUrl"], token_keys.token("reader"))
    stranger = _client(standalone.ready["brokerUrl"], token_keys.token("stranger"))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            reader.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            stranger.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            stranger.subscribe(topic, "sub")
        consumer = reader.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        app = _client(standalone.ready["brokerUrl"], token_keys.token("app"))
        try:
            app.create_producer(topic).send(b"for the reader")
        finally:
            app.close()
        message = consumer.receive(10_000)
        assert message.data() == b"for the reader"
        consumer.acknowledge(message)
    finally:
        reader.close()
        stranger.close()


def test_produce_and_consume_over_tls(
    standalone: MagnetarProcess, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    client = _client(
        standalone.ready["brokerUrlTls"],
        token_keys.token("app"),
        tls_trust_certs_file_path=str(tls_files.ca_cert),
    )
    try:
        assert round_trip(client, _topic(), 20, "m") == [f"m{i}".encode() for i in range(20)]
    finally:
        client.close()


def test_tls_without_a_token_is_refused(standalone: MagnetarProcess, tls_files: TlsFiles) -> None:
    client = _client(
        standalone.ready["brokerUrlTls"],
        None,
        tls_trust_certs_file_path=str(tls_files.ca_cert),
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises(pulsar.Timeout):
            client.create_producer(_topic())
    finally:
        client.close()


@pytest.mark.parametrize(
    "what",
    [
        encode_frame(encode_connect("magnetar-test", 15)),  # a plain-text client
        bytes(range(256)) * 4,  # garbage
        b"\x16\x03\x01\xff\xff" + b"\x00" * 64,  # a forged TLS record header
    ],
)
def test_plain_text_and_garbage_on_the_tls_port_end_that_connection_only(
    standalone: MagnetarProcess, token_keys: TokenKeys, tls_files: TlsFiles, what: bytes
) -> None:
    sock = socket.create_connection((HOST, standalone.ready["brokerServicePortTls"]), timeout=20)
    sock.sendall(what)
    assert broker_closed(sock)
    client = _client(
        standalone.ready["brokerUrlTls"],
        token_keys.token("app"),
        tls_trust_certs_file_path=str(tls_files.ca_cert),
    )
    try:
        assert round_trip(client, _topic(), 3, "m") == [b"m0", b"m1", b"m2"]
    finally:
        client.close()


def test_garbage_after_the_tls_handshake_ends_that_connection_only(
    standalone: MagnetarProcess, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    raw = socket.create_connection((HOST, standalone.ready["brokerServicePortTls"]), timeout=20)
    sock = context.wrap_socket(raw, server_hostname=HOST)
    sock.sendall(bytes(range(256)) * 4)
    assert broker_closed(sock)
    client = _client(
        standalone.ready["brokerUrlTls"],
        token_keys.token("app"),
        tls_trust_certs_file_path=str(tls_files.ca_cert),
    )
    try:
        assert round_trip(client, _topic(), 3, "m") == [b"m0", b"m1", b"m2"]
    finally:
        client.close()


# -- authentication refresh (AUTH_CHALLENGE) -----------------------------------------------------------------


def _short_token(token_keys: TokenKeys, role: str = "app", seconds: int = 2) -> str:
    """A token of ``role`` that expires ``seconds`` from now (real time)."""
    return create_token(token_keys.signer(), role, expires_at_s=int(time.time()) + seconds)


class _Raw:
    """A raw binary-protocol connection that reads the broker's commands one by one."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=15)
        self.decoder = FrameDecoder(1 << 20)

    def send(self, command: bytes) -> None:
        self.sock.sendall(encode_frame(command))

    def next(self) -> tuple[int, Any] | None:
        """The next command's (type, fields), or None once the broker closed the connection."""
        while (frame := self.decoder.next_frame()) is None:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.receive_data(data)
        base = parse_message(frame.command, "BaseCommand")
        kind = base.uint(1)
        return kind, base.message(kind, "command")

    def close(self) -> None:
        self.sock.close()


def test_an_expired_token_is_challenged_and_a_fresh_one_keeps_the_connection(
    standalone: MagnetarProcess, token_keys: TokenKeys
) -> None:
    raw = _Raw(standalone.ready["brokerServicePort"])
    try:
        raw.send(encode_connect("raw", 21, ("token", _short_token(token_keys).encode())))
        assert raw.next() is not None  # CONNECTED
        challenge = raw.next()  # once the token has expired
        assert challenge is not None
        assert challenge[0] == CommandType.AUTH_CHALLENGE
        assert challenge[1].message(2, "AuthData").optional_string(1) == "token"
        raw.send(encode_auth_response("token", _short_token(token_keys, seconds=3600).encode(), 21))
        time.sleep(3)  # three refresh checks: the fresh token holds
        raw.send(encode_ping())
        answer = raw.next()
        assert answer is not None
        assert answer[0] == CommandType.PONG
    finally:
        raw.close()


@pytest.mark.parametrize("answer", ["none", "expired", "another role", "garbage"])
def test_an_expired_token_not_refreshed_ends_the_connection(
    standalone: MagnetarProcess, token_keys: TokenKeys, answer: str
) -> None:
    raw = _Raw(standalone.ready["brokerServicePort"])
    try:
        raw.send(encode_connect("raw", 21, ("token", _short_token(token_keys).encode())))
        assert raw.next() is not None  # CONNECTED
        challenge = raw.next()
        assert challenge is not None
        assert challenge[0] == CommandType.AUTH_CHALLENGE
        tokens = {
            "expired": token_keys.token("app", expires_in_s=1),
            "another role": token_keys.token("admin"),
            "garbage": "\u202e\x00" * 1000,
        }
        if answer in tokens:
            raw.send(encode_auth_response("token", tokens[answer].encode(), 21))
        refusal = raw.next()
        assert refusal is not None
        assert refusal[0] == CommandType.ERROR
        assert refusal[1].uint(2) == ServerError.AuthenticationError
        assert raw.next() is None  # closed
    finally:
        raw.close()
    assert standalone.is_running()


def test_the_official_client_answers_the_challenge_with_its_token_supplier(
    standalone: MagnetarProcess, token_keys: TokenKeys
) -> None:
    supplied: list[str] = []

    def supplier() -> str:
        supplied.append(_short_token(token_keys))
        return supplied[-1]

    client = pulsar.Client(
        standalone.ready["brokerUrl"],
        authentication=pulsar.AuthenticationToken(supplier),
        operation_timeout_seconds=10,
    )
    try:
        topic = _topic()
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(8):  # about 4 s: the 2 s tokens expire and are refreshed
            producer.send(f"r{i}".encode())
            time.sleep(0.5)
        assert [consumer.receive(10_000).data() for _ in range(8)] == [f"r{i}".encode() for i in range(8)]
        assert len(supplied) > 1
        assert producer.is_connected()
    finally:
        client.close()
