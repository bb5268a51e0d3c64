"""``magnetar standalone --authentication-enabled`` as an operator turns it on: tokens required on the
WebSocket API (plain and TLS ports) and on the bookies' TCP port."""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import websocket
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import call, packaged, read_request
from fixtures.processes import ProcessGroup
from fixtures.readme import pointed_at, readme_blocks

from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.digest import master_key
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
)
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
    _readme_token_snippet(str(ready["httpUrl"]), token_keys, admin, tmp_path)
    assert process.stop() == 0, process.log_tail()


def _readme_token_snippet(http_url: str, token_keys: TokenKeys, admin: str, tmp_path: Path) -> None:
    """The README's "Common tasks" token snippet, as pasted: a role granted ``produce`` and ``consume`` (as
    the README's Security section does it) connects with its token in the header and in the URL."""
    granted = httpx.post(
        f"{http_url}/admin/v2/namespaces/public/default/permissions/app",
        json=["produce", "consume"],
        headers={"Authorization": f"Bearer {admin}"},
        timeout=10,
    )
    assert granted.status_code == 204, granted.text
    (tmp_path / "app.token").write_text(token_keys.token("app") + "\n")
    block = readme_blocks("Common tasks", "python")[2]
    names: dict[str, Any] = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the snippet reads app.token from where it runs
    try:
        exec(compile(pointed_at(block, http_url), "README.md", "exec"), names)
    finally:
        os.chdir(cwd)
    names["producer"].send(json.dumps({"payload": base64.b64encode(b"readme").decode()}))
    assert json.loads(names["producer"].recv())["result"] == "ok"
    assert base64.b64decode(json.loads(names["consumer"].recv())["payload"]) == b"readme"
    names["producer"].close()
    names["consumer"].close()


# -- the audit's attacks on the bookie port (issue: any client token was a bookie master key) -------------


async def bookie_attempt(port: int, token: str, request: Request) -> str:
    """AUTH with ``token`` on a fresh connection to the bookie port, then ``request``: its status, or what
    the bookie did instead."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    proto = ClientProtocol()

    async def answer() -> object | None:
        while (event := proto.next_event()) is NEED_DATA:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            proto.receive_data(data)
        return event

    async with stream:
        with trio.fail_after(10):
            await stream.send_all(proto.send(AuthRequest(1, "token", token.encode())))
            auth = await answer()
            assert isinstance(auth, AuthResponse)
            if auth.status is not BookieStatus.EOK:
                closed = await answer() is None
                return f"AUTH {auth.status.name}{', closed' if closed else ''}"
            await stream.send_all(proto.send(request))
            result = await answer()
    assert isinstance(result, AddResponse | ReadResponse | ReadLacResponse), result
    return result.status.name


def test_the_audits_bookie_attacks_are_refused(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """Role ``app``, granted only ``acme/orders``, went to the bookie port with its own token and read another
    tenant's ledger (READ_LAC, READ_ENTRY), fenced that tenant's topic with a fencing read (its producer
    dropped, the topic moved to a new ledger) and added entries to arbitrary ledgers; a superuser's token -
    admitted on the bookie port - could do the same with the master key of the empty password."""
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie_port = free_port()
    process = magnetar_processes.add(
        "attacked-standalone",
        [
            "standalone", "--data-dir", str(tmp_path / "data"), "--http-port", "0",
            "--bookie-port", str(bookie_port),
            "--authentication-enabled", "--token-secret-key", key_file.as_uri(),
            "--super-user-roles", "admin",
        ],
    )  # fmt: skip
    url = str(process.ready["httpUrl"])
    admin, app = token_keys.token("admin"), token_keys.token("app")
    bearer = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=url, headers=bearer, timeout=10) as http:
        http.put("/admin/v2/tenants/acme", json={"adminRoles": [], "allowedClusters": ["standalone"]})
        http.put("/admin/v2/namespaces/acme/orders").raise_for_status()
        http.post(
            "/admin/v2/namespaces/acme/orders/permissions/app", json=["produce", "consume"]
        ).raise_for_status()
        victim = "persistent/public/default/victim"
        producer = websocket.create_connection(
            f"{url.replace('http://', 'ws://')}/ws/v2/producer/{victim}",
            timeout=10,
            header=[f"Authorization: Bearer {admin}"],
        )
        try:

            def publish(payload: bytes) -> str:
                try:
                    producer.send(json.dumps({"payload": base64.b64encode(payload).decode()}))
                    answer = producer.recv()
                except websocket.WebSocketConnectionClosedException:
                    answer = ""
                return str(json.loads(answer)["result"]) if answer else "dropped"

            assert publish(b"before") == "ok"
            stats = http.get(f"/admin/v2/{victim}/internalStats").json()
            ledger_id = int(stats["ledgers"][-1]["ledgerId"])
            next_entry = int(stats["lastConfirmedEntry"].split(":")[1]) + 1
            forged = packaged(ledger_id, next_entry, b"forged")
            empty_key = master_key(b"")
            fence = ReadRequest(2, ledger_id, -1, fence=True, master_key=empty_key)
            recover = ReadRequest(2, ledger_id, 0, fence=True, high_priority=True, master_key=empty_key)
            add = AddRequest(2, ledger_id, next_entry, empty_key, forged)
            arbitrary = AddRequest(2, 424242, 0, empty_key, packaged(424242, 0))
            attacks = {
                "app: READ_LAC of another tenant's ledger": (app, ReadLacRequest(2, ledger_id)),
                "app: READ_ENTRY of another tenant's ledger": (app, ReadRequest(2, ledger_id, 0)),
                "app: fencing read": (app, fence),
                "app: add to the topic's ledger": (app, add),
                "app: add to an arbitrary ledger": (app, arbitrary),
                "superuser, no password: fencing read": (admin, fence),
                "superuser, no password: recovery read": (admin, recover),
                "superuser, no password: add to the topic's ledger": (admin, add),
            }
            outcomes = {
                what: trio.run(bookie_attempt, bookie_port, token, request)
                for what, (token, request) in attacks.items()
            }
            outcomes["producer afterwards"] = publish(b"after")
            after = http.get(f"/admin/v2/{victim}/internalStats")
            if after.status_code != 200:
                outcomes["the topic's ledger afterwards"] = f"internalStats answered {after.status_code}"
            else:
                same = int(after.json()["ledgers"][-1]["ledgerId"]) == ledger_id
                outcomes["the topic's ledger afterwards"] = "the same" if same else "a new one"
        finally:
            producer.close()
    app_refused = "AUTH EUA, closed"
    assert outcomes == {
        "app: READ_LAC of another tenant's ledger": app_refused,
        "app: READ_ENTRY of another tenant's ledger": app_refused,
        "app: fencing read": app_refused,
        "app: add to the topic's ledger": app_refused,
        "app: add to an arbitrary ledger": app_refused,
        "superuser, no password: fencing read": "EUA",
        "superuser, no password: recovery read": "EUA",
        "superuser, no password: add to the topic's ledger": "EUA",
        "producer afterwards": "ok",
        "the topic's ledger afterwards": "the same",
    }
    assert process.stop() == 0, process.log_tail()
    log = process.log_tail(400)
    assert "its TCP port is bound to loopback" in log
    assert "only superuser roles (admin) may connect" in log
