"""A real ``magnetar bookie`` process with token authentication and TLS turned on by its flags; the TCP
transport reaches it with the cluster token over TLS, and is refused without the token."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import trio
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import add_request, call, read_request
from fixtures.processes import ProcessFailedError, ProcessGroup

from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import TransportFailure
from magnetar.bookkeeper.protocol.frames import header_word
from magnetar.bookkeeper.protocol.messages import AddResponse, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus, OpCode
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context

pytestmark = pytest.mark.processes


async def test_secure_bookie_process(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys, tls_files: TlsFiles
) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie = magnetar_processes.bookie(
        "secure-bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory",
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(), "--auth-allowed-roles", "broker",
        "--tls-certificate-file", str(tls_files.server_cert), "--tls-key-file", str(tls_files.server_key),
    )  # fmt: skip
    bookie_id = str(bookie.ready["bookieId"])
    tls = client_ssl_context(trust_certs_file=tls_files.ca_cert)
    settings = TcpTransportSettings(reconnect_backoff_initial_ms=0, reconnect_backoff_max_ms=0)
    async with open_tcp_transport(
        settings, ssl_context=tls, auth_token=token_keys.token("broker")
    ) as transport:
        added = await call(transport, bookie_id, add_request(1, 0))
        assert isinstance(added, AddResponse)
        assert added.status is BookieStatus.EOK
        read = await call(transport, bookie_id, read_request(1, 0))
        assert isinstance(read, ReadResponse)
        assert read.status is BookieStatus.EOK
    async with open_tcp_transport(settings, ssl_context=tls) as transport:
        refused = await call(transport, bookie_id, read_request(1, 0))
        assert isinstance(refused, ReadResponse)
        assert refused.status is BookieStatus.EUA
    async with open_tcp_transport(settings, ssl_context=tls, auth_token=token_keys.token("spy")) as transport:
        failure = await call(transport, bookie_id, read_request(1, 0))
        assert isinstance(failure, TransportFailure)
        assert "role 'spy' may not connect" in failure.detail
    assert bookie.stop() == 0
    assert "refused" in bookie.log_tail()


def test_bad_key_settings_stop_the_bookie_at_startup(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    bookie = magnetar_processes.bookie(
        "bad-bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory",
        "--authentication-enabled", "--token-secret-key", "file:///no/such/key",
        "--auth-allowed-roles", "broker",
        start=False,
    )  # fmt: skip
    with pytest.raises(ProcessFailedError, match="exited before it was ready"):
        bookie.start(timeout_s=30)
    assert "cannot read /no/such/key" in bookie.log_tail()


def test_authentication_without_client_roles_stops_the_bookie_at_startup(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """With authentication on, a bookie admits only the roles it is given: without any it would refuse
    every broker, so it does not start (it used to admit every token of the cluster key)."""
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie = magnetar_processes.bookie(
        "roleless-bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory",
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(),
        start=False,
    )  # fmt: skip
    with pytest.raises(ProcessFailedError, match="exited before it was ready"):
        bookie.start(timeout_s=30)
    assert "authentication_enabled needs the roles that may use the bookie protocol" in bookie.log_tail()


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise AssertionError(f"no {field} for pid {pid}")


FLOOD_CLOSE_DEADLINE_S = 60.0
"""How long :func:`flood_without_auth` waits for the bookie to close every connection. The bookie closes one
as soon as it has read ``unauthenticated_bytes_max`` from it, so only a bookie that keeps connections open -
the fault under test - waits this long; the figure leaves room for a machine busy with other work."""


async def flood_without_auth(port: int, connections: int, frame_bytes: int) -> int:
    """Each connection announces a ``frame_bytes`` ADD frame and sends it without AUTH, then reads until the
    bookie closes the connection; the number of connections the bookie closed (reset or end of stream)
    within ``FLOOD_CLOSE_DEADLINE_S``. A bookie that stops reading and keeps a connection open holds it to
    the end."""
    closed = 0

    async def one() -> None:
        nonlocal closed
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        header = struct.pack(">iIq", frame_bytes - 4, header_word(OpCode.ADD_ENTRY), 1)
        data = memoryview(header + bytes(frame_bytes - len(header)))
        async with stream:
            try:
                for offset in range(0, len(data), 65536):
                    await stream.send_all(data[offset : offset + 65536])
                while await stream.receive_some(65536):  # the whole frame went out: an answer, then the close
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            closed += 1

    with trio.move_on_after(FLOOD_CLOSE_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(one)
    return closed


def test_strangers_without_a_token_cannot_grow_the_bookie(
    magnetar_processes: ProcessGroup, tmp_path: Path, token_keys: TokenKeys
) -> None:
    """The audit: before AUTH a bookie buffered frames up to 5 MiB per connection (1,024 connections about
    5 GiB). 64 connections each sending a 5 MiB frame without AUTH grew a bookie by 400 MiB; now each is
    refused after ``unauthenticated_bytes_max`` (16 KiB) and the bookie's peak RSS barely moves."""
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(token_keys.secret)
    bookie = magnetar_processes.bookie(
        "flooded-bookie",
        "memory://",
        tmp_path / "data",
        "--storage", "memory",
        "--authentication-enabled", "--token-secret-key", key_file.as_uri(), "--auth-allowed-roles", "broker",
    )  # fmt: skip
    before = vm_kib(bookie.pid, "VmRSS")
    closed = trio.run(flood_without_auth, int(bookie.ready["port"]), 64, 5 * 1024 * 1024 - 1024)
    peak_growth_mib = (vm_kib(bookie.pid, "VmHWM") - before) / 1024
    assert closed == 64, f"the bookie closed {closed} of 64 connections within {FLOOD_CLOSE_DEADLINE_S:g} s"
    assert peak_growth_mib < 32, f"peak RSS grew by {peak_growth_mib:.0f} MiB"
    assert bookie.stop() == 0
