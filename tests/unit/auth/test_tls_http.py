"""The HTTP/WebSocket server over TLS on 127.0.0.1, with httpx and websocket-client verifying a test CA
(``trustme``), plus the failure cases: untrusted CA, plain HTTP to the TLS port, a client that never
handshakes, mutual TLS, and the per-address connection limit."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import pytest
import trio
import websocket
from fixtures.auth import TlsFiles

from magnetar.bookkeeper.runtime.auth.tls import TlsConfigError, client_ssl_context, server_ssl_context
from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    HttpSettings,
    Router,
    WebSocketRequest,
    serve_http,
    text_response,
)

T = TypeVar("T")


async def hello(request: HttpRequest) -> HttpResponse:
    return text_response(f"hello {request.client[0] if request.client else '?'}")


async def echo(request: WebSocketRequest) -> None:
    ws = await request.accept()
    async for message in ws:
        if isinstance(message, str):
            await ws.send_text(message.upper())


def router() -> Router:
    app = Router()
    app.get("/hello", hello)
    app.websocket("/echo", echo)
    return app


@asynccontextmanager
async def serving(context: ssl.SSLContext | None, **overrides: Any) -> AsyncIterator[int]:
    settings = HttpSettings(http_bind_address="127.0.0.1", http_port=0, shutdown_grace_ms=1000, **overrides)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        ports: list[int] = await nursery.start(
            lambda task_status: serve_http(
                router(), settings, shutdown=shutdown, ssl_context=context, task_status=task_status
            )
        )
        try:
            yield ports[0]
        finally:
            shutdown.set()


def server_context(tls: TlsFiles, **kwargs: Any) -> ssl.SSLContext:
    return server_ssl_context(tls.server_cert, tls.server_key, **kwargs)


def causes(exc: BaseException | None) -> list[BaseException]:
    chain = []
    while exc is not None and len(chain) < 20:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


async def in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


async def test_https_with_httpx_verifying_the_test_ca(tls_files: TlsFiles) -> None:
    async with serving(server_context(tls_files)) as port:
        verify = client_ssl_context(trust_certs_file=tls_files.ca_cert)
        async with httpx.AsyncClient(verify=verify) as client:
            for host in ("127.0.0.1", "localhost"):
                response = await client.get(f"https://{host}:{port}/hello")
                assert response.status_code == 200
                assert response.text.startswith("hello 127.0.0.1")


async def test_wss_with_websocket_client(tls_files: TlsFiles) -> None:
    async with serving(server_context(tls_files)) as port:

        def session() -> str:
            ws = websocket.create_connection(
                f"wss://localhost:{port}/echo", timeout=10, sslopt={"ca_certs": str(tls_files.ca_cert)}
            )
            try:
                ws.send("over tls")
                return str(ws.recv())
            finally:
                ws.close()

        assert await in_thread(session) == "OVER TLS"


async def test_untrusted_ca_and_plain_http_fail_and_the_server_goes_on(tls_files: TlsFiles) -> None:
    async with serving(server_context(tls_files)) as port:
        async with httpx.AsyncClient() as client:  # the system CAs do not know the test CA
            with pytest.raises(httpx.ConnectError) as caught:
                await client.get(f"https://127.0.0.1:{port}/hello")
            assert any(isinstance(cause, ssl.SSLCertVerificationError) for cause in causes(caught.value))
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.TransportError):
                await client.get(f"http://127.0.0.1:{port}/hello")

        def wrong_ca() -> None:
            websocket.create_connection(f"wss://127.0.0.1:{port}/echo", timeout=10)

        with pytest.raises(ssl.SSLCertVerificationError):
            await in_thread(wrong_ca)
        async with httpx.AsyncClient(verify=client_ssl_context(trust_certs_file=tls_files.ca_cert)) as client:
            assert (await client.get(f"https://127.0.0.1:{port}/hello")).status_code == 200


async def test_a_client_that_never_handshakes_is_dropped_without_blocking_others(tls_files: TlsFiles) -> None:
    async with serving(server_context(tls_files), http_tls_handshake_timeout_ms=300) as port:
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        async with silent:
            verify = client_ssl_context(trust_certs_file=tls_files.ca_cert)
            async with httpx.AsyncClient(verify=verify) as client:
                assert (await client.get(f"https://127.0.0.1:{port}/hello")).status_code == 200
            with trio.fail_after(10):
                assert await silent.receive_some(100) == b""  # closed after the handshake timeout


async def test_mutual_tls(tls_files: TlsFiles) -> None:
    context = server_context(tls_files, trust_certs_file=tls_files.ca_cert, require_client_cert=True)
    async with serving(context) as port:
        anonymous = client_ssl_context(trust_certs_file=tls_files.ca_cert)
        async with httpx.AsyncClient(verify=anonymous) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(f"https://127.0.0.1:{port}/hello")
        with_cert = client_ssl_context(
            trust_certs_file=tls_files.ca_cert,
            certificate_file=tls_files.client_cert,
            key_file=tls_files.client_key,
        )
        async with httpx.AsyncClient(verify=with_cert) as client:
            assert (await client.get(f"https://127.0.0.1:{port}/hello")).status_code == 200


def test_tls_configuration_errors_name_the_file(tls_files: TlsFiles, tmp_path: Any) -> None:
    with pytest.raises(TlsConfigError, match="does not exist"):
        server_ssl_context(tmp_path / "missing.pem", tls_files.server_key)
    with pytest.raises(TlsConfigError, match="cannot use certificate"):
        server_ssl_context(tls_files.client_cert, tls_files.server_key)  # key of another certificate
    with pytest.raises(TlsConfigError, match="trust certificates file"):
        server_ssl_context(tls_files.server_cert, tls_files.server_key, require_client_cert=True)
    with pytest.raises(TlsConfigError, match="its key"):
        client_ssl_context(certificate_file=tls_files.client_cert)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(TlsConfigError, match="cannot read trusted"):
        client_ssl_context(trust_certs_file=garbage)


async def test_connections_per_address_are_limited_with_429() -> None:
    async with serving(None, http_connections_per_ip_max=2) as port:
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        try:
            extra = await trio.open_tcp_stream("127.0.0.1", port)
            async with extra:
                await extra.send_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
                answer = b""
                with trio.fail_after(10):
                    while chunk := await extra.receive_some(4096):
                        answer += chunk
            assert answer.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
            assert b"too many connections from 127.0.0.1 (http_connections_per_ip_max=2)" in answer
        finally:
            for stream in held:
                await stream.aclose()
        # Released slots are usable again (the server notices the closes asynchronously).
        with trio.fail_after(10):
            while True:
                async with httpx.AsyncClient() as client:
                    response = await client.get(f"http://127.0.0.1:{port}/hello")
                if response.status_code == 200:
                    break
                await trio.sleep(0.01)
