"""A real ``magnetar bookie`` process with token authentication and TLS turned on by its flags; the TCP
transport reaches it with the cluster token over TLS, and is refused without the token."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import add_request, call, read_request
from fixtures.processes import ProcessFailedError, ProcessGroup

from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import TransportFailure
from magnetar.bookkeeper.protocol.messages import AddResponse, ReadResponse
from magnetar.bookkeeper.protocol.status import BookieStatus
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
