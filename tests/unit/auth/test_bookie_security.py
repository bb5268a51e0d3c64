"""A bookie with token authentication and TLS, over real sockets on 127.0.0.1: the TCP transport as the
brokers use it, and raw sockets where a well-behaved client cannot produce the input."""

from __future__ import annotations

from typing import Any

import trio
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import add_request, call, packaged, raw_frame, read_request, running_bookie

from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import FailureReason, TransportFailure
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.messages import (
    AddResponse,
    AuthRequest,
    AuthResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadResponse,
)
from magnetar.bookkeeper.protocol.status import BookieStatus, OpCode
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context

FAST = TcpTransportSettings(
    connect_timeout_ms=5_000, reconnect_backoff_initial_ms=0, reconnect_backoff_max_ms=0
)


def auth_settings(token_keys: TokenKeys, **more: Any) -> dict[str, Any]:
    return {"authentication_enabled": True, "token_secret_key": token_keys.secret_setting, **more}


async def raw_exchange(port: int, data: bytes, *, events_wanted: int | None = None) -> list[object]:
    """Send ``data`` on a fresh connection and decode the responses until the bookie closes it (or until
    ``events_wanted`` responses arrived)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    proto = ClientProtocol()
    events: list[object] = []
    async with stream:
        await stream.send_all(data)
        with trio.fail_after(10):
            while events_wanted is None or len(events) < events_wanted:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                proto.receive_data(chunk)
                while (event := proto.next_event()) is not NEED_DATA:
                    events.append(event)
    return events


async def test_a_valid_cluster_token_is_served(token_keys: TokenKeys) -> None:
    async with (
        running_bookie(**auth_settings(token_keys)) as bk,
        open_tcp_transport(FAST, auth_token=token_keys.token("broker")) as transport,
    ):
        added = await call(transport, bk.bookie_id, add_request(1, 0))
        assert isinstance(added, AddResponse)
        assert added.status is BookieStatus.EOK
        read = await call(transport, bk.bookie_id, read_request(1, 0))
        assert isinstance(read, ReadResponse)
        assert read.body == packaged(1, 0)
        assert bk.bookie.metrics.auth_failures == 0


async def test_without_a_token_every_request_is_unauthorized(token_keys: TokenKeys) -> None:
    async with running_bookie(**auth_settings(token_keys)) as bk:
        async with open_tcp_transport(FAST) as transport:
            added = await call(transport, bk.bookie_id, add_request(1, 0))
            assert isinstance(added, AddResponse)
            assert added.status is BookieStatus.EUA
        async with open_tcp_transport(FAST, auth_token=token_keys.token("broker")) as transport:
            read = await call(transport, bk.bookie_id, read_request(1, 0))
        assert isinstance(read, ReadResponse)
        assert read.status is BookieStatus.ENOLEDGER  # the refused add stored nothing


async def test_refused_tokens_fail_the_connection_with_the_reason(token_keys: TokenKeys) -> None:
    expired = token_keys.token("broker", expires_in_s=-10)
    other_key = "data:;base64," + "QUFB" * 11  # 33 bytes of 'A': a different secret
    async with running_bookie(**auth_settings(token_keys, auth_allowed_roles="broker,bookie")) as bk:
        for token, reason in (
            (expired, "token expired at"),
            ("not-a-token", "not a JWT"),
            (token_keys.token("client"), "role 'client' may not connect"),
        ):
            async with open_tcp_transport(FAST, auth_token=token) as transport:
                result = await call(transport, bk.bookie_id, add_request(1, 0))
            assert isinstance(result, TransportFailure)
            assert result.reason is FailureReason.CONNECT
            assert "refused authentication (EUA)" in result.detail
            assert reason in result.detail
        assert bk.bookie.metrics.auth_failures == 3
    async with running_bookie(authentication_enabled=True, token_secret_key=other_key) as bk:
        async with open_tcp_transport(FAST, auth_token=token_keys.token("broker")) as transport:
            result = await call(transport, bk.bookie_id, read_request(1, 0))
        assert isinstance(result, TransportFailure)
        assert "signature does not match" in result.detail


async def test_raw_protocol_refusals(token_keys: TokenKeys) -> None:
    proto = ClientProtocol()
    async with running_bookie(**auth_settings(token_keys)) as bk:
        port = bk.endpoint.port
        # Requests before AUTH are answered EUA; a good AUTH then opens the connection.
        good = proto.send(AuthRequest(2, "token", token_keys.token("broker").encode()))
        before = proto.send(ReadLacRequest(1, 5))
        after = proto.send(ReadLacRequest(3, 5))
        seen = await raw_exchange(port, before + good + after, events_wanted=3)
        assert seen == [
            ReadLacResponse(1, BookieStatus.EUA, 5),
            AuthResponse(2, BookieStatus.EOK, "token"),
            ReadLacResponse(3, BookieStatus.ENOLEDGER, 5),
        ]
        # A refused AUTH is answered EUA, and then the bookie closes the connection.
        bad = proto.send(AuthRequest(4, "token", b"a.b.c")) + proto.send(ReadLacRequest(5, 5))
        events = await raw_exchange(port, bad)
        assert len(events) == 1
        assert isinstance(events[0], AuthResponse)
        assert events[0].status is BookieStatus.EUA
        assert "not a valid JWT" in events[0].reason
        events = await raw_exchange(port, proto.send(AuthRequest(6, "sasl", b"x")))
        assert isinstance(events[0], AuthResponse)
        assert "unsupported auth plugin 'sasl'" in events[0].reason
        # A malformed AUTH frame is a bad request like any other.
        malformed = raw_frame(OpCode.AUTH, 7, b"\x00") + raw_frame(99, 8, b"")
        events = await raw_exchange(port, malformed, events_wanted=2)
        assert [getattr(e, "status", None) for e in events] == [BookieStatus.EBADREQ, BookieStatus.EBADREQ]


async def test_a_connection_that_never_authenticates_is_closed(token_keys: TokenKeys) -> None:
    async with running_bookie(**auth_settings(token_keys, auth_timeout_ms=200)) as bk:
        assert await raw_exchange(bk.endpoint.port, b"") == []  # closed by the bookie, not by us
        assert bk.bookie.metrics.auth_failures == 1


async def test_an_open_bookie_accepts_a_client_with_a_token(token_keys: TokenKeys) -> None:
    async with (
        running_bookie() as bk,
        open_tcp_transport(FAST, auth_token=token_keys.token("broker")) as transport,
    ):
        added = await call(transport, bk.bookie_id, add_request(1, 0))
        assert isinstance(added, AddResponse)
        assert added.status is BookieStatus.EOK


def tls_settings(tls: TlsFiles, **more: Any) -> dict[str, Any]:
    return {"tls_certificate_file": tls.server_cert, "tls_key_file": tls.server_key, **more}


async def test_tls_bookie_with_the_tcp_transport(tls_files: TlsFiles) -> None:
    trusted = client_ssl_context(trust_certs_file=tls_files.ca_cert)
    async with running_bookie(**tls_settings(tls_files)) as bk:
        async with open_tcp_transport(FAST, ssl_context=trusted) as transport:
            added = await call(transport, bk.bookie_id, add_request(1, 0))
            assert isinstance(added, AddResponse)
            assert added.status is BookieStatus.EOK
        async with open_tcp_transport(FAST, ssl_context=client_ssl_context()) as transport:
            result = await call(transport, bk.bookie_id, add_request(1, 1))
        assert isinstance(result, TransportFailure)
        assert "TLS handshake failed" in result.detail
        assert "CERTIFICATE_VERIFY_FAILED" in result.detail
        async with open_tcp_transport(FAST) as transport:  # plain TCP to a TLS port
            result = await call(transport, bk.bookie_id, add_request(1, 1))
        assert isinstance(result, TransportFailure)
        assert bk.bookie.metrics.tls_handshake_failures >= 2


async def test_mutual_tls_and_a_token_together(tls_files: TlsFiles, token_keys: TokenKeys) -> None:
    settings = tls_settings(
        tls_files,
        tls_trust_certs_file=tls_files.ca_cert,
        tls_require_trusted_client_cert=True,
        **auth_settings(token_keys),
    )
    with_cert = client_ssl_context(
        trust_certs_file=tls_files.ca_cert,
        certificate_file=tls_files.client_cert,
        key_file=tls_files.client_key,
    )
    token = token_keys.token("broker")
    async with running_bookie(**settings) as bk:
        async with open_tcp_transport(FAST, ssl_context=with_cert, auth_token=token) as transport:
            added = await call(transport, bk.bookie_id, add_request(1, 0))
            assert isinstance(added, AddResponse)
            assert added.status is BookieStatus.EOK
        no_cert = client_ssl_context(trust_certs_file=tls_files.ca_cert)
        async with open_tcp_transport(FAST, ssl_context=no_cert, auth_token=token) as transport:
            result = await call(transport, bk.bookie_id, add_request(1, 1))
        assert isinstance(result, TransportFailure)


async def test_a_silent_tls_client_is_dropped_after_the_handshake_timeout(tls_files: TlsFiles) -> None:
    async with running_bookie(**tls_settings(tls_files, tls_handshake_timeout_ms=200)) as bk:
        stream = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        async with stream:
            with trio.fail_after(10):
                assert await stream.receive_some(100) == b""
        assert bk.bookie.metrics.tls_handshake_failures == 1
