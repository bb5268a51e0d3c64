"""``magnetar standalone --authentication-enabled`` as an operator turns it on: tokens required on the
WebSocket API (plain and TLS ports) and on the bookies' TCP port."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pytest
import trio
import websocket
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import call, read_request
from fixtures.processes import ProcessGroup

from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.protocol.messages import ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_secure_standalone(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie_port = free_port()
    process = magnetar_processes.add(
        "secure-standalone",
        [
            "standalone", "--data-dir", str(tmp_path / "data"), "--http-port", "0",
            "--bookie-port", str(bookie_port),
            "--authentication-enabled", "--token-secret-key", key_file.as_uri(),
            "--super-user-roles", "admin",
            "--http-port-tls", "0", "--tls-certificate-file", str(tls_files.server_cert),
            "--tls-key-file", str(tls_files.server_key),
        ],
    )  # fmt: skip
    ready = process.ready
    topic = "persistent/public/default/secured"
    plain = str(ready["httpUrl"]).replace("http://", "ws://")
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(f"{plain}/ws/v2/producer/{topic}", timeout=10)
    assert caught.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(
            f"{plain}/ws/v2/producer/{topic}?token={token_keys.token('guest')}", timeout=10
        )
    assert caught.value.status_code == 403
    admin = token_keys.token("admin")
    secure = f"wss://localhost:{ready['tlsPort']}"
    producer = websocket.create_connection(
        f"{secure}/ws/v2/producer/{topic}",
        timeout=10,
        header=[f"Authorization: Bearer {admin}"],
        sslopt={"ca_certs": str(tls_files.ca_cert)},
    )
    try:
        producer.send(json.dumps({"payload": base64.b64encode(b"secret").decode()}))
        assert json.loads(producer.recv())["result"] == "ok"
    finally:
        producer.close()

    async def bookie_without_token() -> object:
        async with open_tcp_transport() as transport:
            return await call(transport, f"127.0.0.1:{bookie_port}", read_request(1, 0))

    answer = trio.run(bookie_without_token)
    assert isinstance(answer, ReadResponse)
    assert answer.status is BookieStatus.EUA
    assert process.stop() == 0, process.log_tail()
