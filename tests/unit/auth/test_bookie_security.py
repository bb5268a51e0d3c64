"""A bookie with token authentication and TLS, over real sockets on 127.0.0.1: the TCP transport as the
brokers use it, and raw sockets where a well-behaved client cannot produce the input."""

from __future__ import annotations

import struct
from typing import Any

import trio
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.bookie_server import add_request, call, packaged, raw_frame, read_request, running_bookie

from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import FailureReason, TransportFailure
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.frames import header_word
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
    return {
        "authentication_enabled": True,
        "token_secret_key": token_keys.secret_setting,
        "auth_allowed_roles": "broker",
        **more,
    }


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
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:  # reset: the bookie closed with bytes of ours unread
                    break
                if not chunk:
                    break
                proto.receive_data(chunk)
                while (event := proto.next_event()) is not NEED_DATA:
                    events.append(event)
    return events


async def test_a_token_of_the_brokers_role_is_served(token_keys: TokenKeys) -> None:
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
    async with running_bookie(
        authentication_enabled=True, token_secret_key=other_key, auth_allowed_roles="broker"
    ) as bk:
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


# -- who may use the bookie protocol (issue: any cluster token was a bookie master key) -------------------


async def test_only_the_brokers_and_superusers_roles_are_admitted(token_keys: TokenKeys) -> None:
    """A token the cluster key verifies is not enough: tenants' application tokens are such tokens too."""
    settings = auth_settings(token_keys, super_user_roles="admin")
    async with running_bookie(**settings) as bk:
        for role in ("broker", "admin"):
            async with open_tcp_transport(FAST, auth_token=token_keys.token(role)) as transport:
                read = await call(transport, bk.bookie_id, read_request(1, 0))
            assert isinstance(read, ReadResponse)
            assert read.status is BookieStatus.ENOLEDGER, role
        async with open_tcp_transport(FAST, auth_token=token_keys.token("app")) as transport:
            refused = await call(transport, bk.bookie_id, read_request(1, 0))
        assert isinstance(refused, TransportFailure)
        assert "role 'app' may not connect" in refused.detail
        assert "auth_allowed_roles and super_user_roles" in refused.detail


async def test_with_no_roles_configured_nobody_is_admitted(token_keys: TokenKeys) -> None:
    """The safe default: authentication on without a role list admits no token at all (it used to admit
    every token of the cluster key)."""
    async with running_bookie(authentication_enabled=True, token_secret_key=token_keys.secret_setting) as bk:
        for role in ("broker", "admin", "app"):
            async with open_tcp_transport(FAST, auth_token=token_keys.token(role)) as transport:
                refused = await call(transport, bk.bookie_id, read_request(1, 0))
            assert isinstance(refused, TransportFailure)
            assert f"role {role!r} may not connect" in refused.detail


# -- what a connection without a token may cost ----------------------------------------------------------


def big_frame_header(request_id: int, frame_bytes: int) -> bytes:
    """The length prefix and header of an ADD frame of ``frame_bytes`` (prefix included), body not sent."""
    return struct.pack(">iIq", frame_bytes - 4, header_word(OpCode.ADD_ENTRY), request_id)


async def test_a_large_frame_before_auth_is_refused_after_the_allowance(token_keys: TokenKeys) -> None:
    """Before: a bookie buffered a frame of up to 5 MiB (frame_bytes_max) per connection before AUTH."""
    async with running_bookie(**auth_settings(token_keys, auth_timeout_ms=60_000)) as bk:
        start = big_frame_header(77, 5 * 1024 * 1024 - 1024) + bytes(32 * 1024)  # more than the allowance
        with trio.fail_after(10):  # answered long before auth_timeout_ms (60 s)
            events = await raw_exchange(bk.endpoint.port, start)
        assert len(events) == 1
        answer = events[0]
        assert isinstance(answer, AuthResponse)
        assert (answer.request_id, answer.status) == (77, BookieStatus.EUA)
        assert "unauthenticated_bytes_max=16384" in answer.reason
        assert bk.bookie.metrics.auth_failures == 1


async def test_requests_before_auth_count_against_the_allowance(token_keys: TokenKeys) -> None:
    proto = ClientProtocol()
    flood = b"".join(proto.send(ReadLacRequest(i, 5)) for i in range(1, 400))  # ~ 400 x 28 bytes
    settings = auth_settings(token_keys, unauthenticated_bytes_max=2048)
    async with running_bookie(**settings) as bk:
        events = await raw_exchange(bk.endpoint.port, flood)
    answered = [e for e in events if isinstance(e, ReadLacResponse)]
    assert answered
    assert all(e.status is BookieStatus.EUA for e in answered)
    assert len(answered) < 2048 // 16, "nothing beyond the allowance was read"
    assert isinstance(events[-1], AuthResponse)
    assert events[-1].status is BookieStatus.EUA
    assert "unauthenticated_bytes_max=2048" in events[-1].reason


async def test_an_auth_within_the_allowance_opens_the_connection(token_keys: TokenKeys) -> None:
    """Requests before the AUTH spend the allowance; requests pipelined after an accepted AUTH, in the same
    bytes and beyond the allowance, are served: the allowance ends with the AUTH."""
    proto = ClientProtocol()
    auth = proto.send(AuthRequest(1000, "token", token_keys.token("broker").encode()))
    one_request = len(proto.send(ReadLacRequest(0, 5)))
    before_count = (1024 - len(auth)) // one_request
    before = b"".join(proto.send(ReadLacRequest(i, 5)) for i in range(before_count))
    after = b"".join(proto.send(ReadLacRequest(i, 5)) for i in range(2000, 2200))
    assert len(before + auth) <= 1024 < len(before + auth + after)
    async with running_bookie(**auth_settings(token_keys, unauthenticated_bytes_max=1024)) as bk:
        events = await raw_exchange(bk.endpoint.port, before + auth + after, events_wanted=before_count + 201)
    statuses = [getattr(e, "status", None) for e in events]
    assert statuses[:before_count] == [BookieStatus.EUA] * before_count
    assert events[before_count] == AuthResponse(1000, BookieStatus.EOK, "token")
    assert statuses[before_count + 1 :] == [BookieStatus.ENOLEDGER] * 200


async def test_an_auth_larger_than_the_allowance_is_refused(token_keys: TokenKeys) -> None:
    proto = ClientProtocol()
    long_role = "r" * 1200
    auth = proto.send(AuthRequest(9, "token", token_keys.token(long_role).encode()))
    settings = auth_settings(token_keys, unauthenticated_bytes_max=1024, auth_allowed_roles=long_role)
    async with running_bookie(**settings) as bk:
        events = await raw_exchange(bk.endpoint.port, auth)
    assert len(events) == 1
    assert isinstance(events[0], AuthResponse)
    assert (events[0].request_id, events[0].status) == (9, BookieStatus.EUA)


async def test_the_oldest_unauthenticated_connection_makes_room(token_keys: TokenKeys) -> None:
    settings = auth_settings(token_keys, unauthenticated_connections_max=2, auth_timeout_ms=60_000)
    async with running_bookie(**settings) as bk:
        port = bk.endpoint.port
        first = await trio.open_tcp_stream("127.0.0.1", port)
        second = await trio.open_tcp_stream("127.0.0.1", port)
        async with first, second:
            with trio.fail_after(10):
                while bk.bookie.metrics.connections_unauthenticated < 2:
                    await trio.sleep(0.01)
                async with open_tcp_transport(FAST, auth_token=token_keys.token("broker")) as transport:
                    read = await call(transport, bk.bookie_id, read_request(1, 0))  # evicts `first`
                    assert isinstance(read, ReadResponse)
                    assert read.status is BookieStatus.ENOLEDGER
                    assert await first.receive_some(100) == b""  # closed by the bookie
                    assert bk.bookie.metrics.unauthenticated_evicted == 1
                    assert bk.bookie.metrics.connections_unauthenticated == 1  # `second`
