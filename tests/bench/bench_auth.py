"""What security costs: token verification, HTTP over TLS, bookie adds over TLS with a token.

    .venv/bin/python tests/bench/bench_auth.py [--duration 3]

Figures:
* token verifications/s with ``TokenVerifier`` for HS256, RS256 (2048-bit) and ES256 tokens - the work a
  broker does once per admin call or WebSocket upgrade when authentication is on;
* HTTP ``GET`` requests/s on one keep-alive connection, plain and TLS, and new TLS connections/s (handshake +
  one request + close) - the client is a separate process (blocking sockets) so it does not share the GIL;
* pipelined bookie adds/s through the TCP transport to an in-process bookie (memory store): plain, TLS, and
  TLS with token authentication (the AUTH exchange happens once per connection, so it should cost nothing
  per add).
Not a test: figures go to tests/bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import base64
import functools
import multiprocessing
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio.lowlevel
from fixtures.bookie_server import add_request, running_bookie

from magnetar.bookkeeper.client.tcp_transport import TcpTransport, open_tcp_transport
from magnetar.bookkeeper.runtime.auth.keys import (
    create_key_pair,
    create_secret_key,
    private_key,
    public_key,
    secret_key,
)
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context, server_ssl_context
from magnetar.bookkeeper.runtime.auth.tokens import TokenVerifier, create_token
from magnetar.bookkeeper.runtime.clock import SystemClock
from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    HttpSettings,
    Router,
    serve_http,
    text_response,
)

ADDS = 20_000
WARM_UP_ADDS = 5_000


def bench_tokens(duration_s: float) -> None:
    secret = create_secret_key()
    rsa_private, rsa_public = create_key_pair("RS256")
    ec_private, ec_public = create_key_pair("ES256")
    cases = [
        ("HS256", secret_key(secret), secret_key(secret)),
        ("RS256", private_key(rsa_private), public_key(rsa_public)),
        ("ES256", private_key(ec_private), public_key(ec_public)),
    ]
    for name, signer, verifier_key in cases:
        token = create_token(signer, "bench-role", expires_at_s=int(time.time()) + 3600)
        verifier = TokenVerifier(verifier_key, clock=SystemClock())
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < duration_s:
            verifier.verify(token)
            count += 1
        print(f"verify {name}: {count / (time.perf_counter() - started):>10,.0f}/s")


def _http_client(port: int, ca_file: str | None, duration_s: float, queue: Any) -> None:
    request = b"GET /bench HTTP/1.1\r\nhost: localhost\r\n\r\n"
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return context.wrap_socket(sock, server_hostname="localhost") if context else sock

    def one(sock: socket.socket) -> None:
        sock.sendall(request)
        data = b""
        while not data.endswith(b"ok"):
            data += sock.recv(65536)

    sock = connect()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < duration_s:
        one(sock)
        count += 1
    keep_alive = count / (time.perf_counter() - started)
    sock.close()
    connections = 0.0
    if context is not None:
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < duration_s:
            fresh = connect()
            one(fresh)
            fresh.close()
            count += 1
        connections = count / (time.perf_counter() - started)
    queue.put((keep_alive, connections))


async def bench_http(duration_s: float, ca: trustme.CA, directory: Path) -> None:
    server_cert = ca.issue_cert("localhost")
    cert_file, key_file, ca_file = directory / "s.pem", directory / "s.key", directory / "ca.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert_file))
    server_cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))

    async def hello(request: HttpRequest) -> HttpResponse:
        return text_response("ok")

    router = Router()
    router.get("/bench", hello)
    settings = HttpSettings(http_bind_address="127.0.0.1", http_port=0)
    for label, context in (("plain", None), ("TLS", server_ssl_context(cert_file, key_file))):
        serve = functools.partial(serve_http, router, settings, ssl_context=context)
        async with trio.open_nursery() as nursery:
            ports = await nursery.start(serve)
            queue: Any = multiprocessing.get_context("spawn").Queue()
            args = (ports[0], str(ca_file) if context else None, duration_s, queue)
            process = multiprocessing.get_context("spawn").Process(target=_http_client, args=args)
            process.start()
            keep_alive, connections = await trio.to_thread.run_sync(queue.get)
            await trio.to_thread.run_sync(process.join)
            nursery.cancel_scope.cancel()
        extra = f", new TLS connections {connections:,.0f}/s" if context else ""
        print(f"HTTP {label}: keep-alive {keep_alive:,.0f} req/s{extra}")


async def pipelined_adds(transport: TcpTransport, bookie_id: str, first_entry: int, count: int) -> float:
    """Send ``count`` adds at once (yielding every 1000) and return adds/s until the last answer."""
    done = trio.Event()
    answered = 0

    def on_answer(result: object) -> None:
        nonlocal answered
        answered += 1
        if answered == count:
            done.set()

    started = time.perf_counter()
    for entry in range(first_entry, first_entry + count):
        transport.send(bookie_id, add_request(1, entry), on_answer)
        if entry % 1000 == 999:
            await trio.lowlevel.checkpoint()
    await done.wait()
    return count / (time.perf_counter() - started)


async def bench_bookie(ca: trustme.CA, directory: Path) -> None:
    server_cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = directory / "b.pem", directory / "b.key", directory / "ca.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert_file))
    server_cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    secret = create_secret_key()
    token = create_token(secret_key(secret), "broker")
    key_setting = "data:;base64," + base64.b64encode(secret).decode()
    tls = {"tls_certificate_file": cert_file, "tls_key_file": key_file}
    auth = {"authentication_enabled": True, "token_secret_key": key_setting, "auth_allowed_roles": "broker"}
    cases: list[tuple[str, dict[str, Any], bool, bool]] = [
        ("plain", {}, False, False),
        ("TLS", tls, True, False),
        ("TLS + token", {**tls, **auth}, True, True),
    ]
    for label, settings, use_tls, use_token in cases:
        async with running_bookie(**settings) as bk:
            context = client_ssl_context(trust_certs_file=ca_file) if use_tls else None
            credential = token if use_token else None
            async with open_tcp_transport(ssl_context=context, auth_token=credential) as transport:
                await pipelined_adds(transport, bk.bookie_id, 0, WARM_UP_ADDS)
                rate = await pipelined_adds(transport, bk.bookie_id, WARM_UP_ADDS, ADDS)
                print(f"bookie adds {label}: {rate:>10,.0f}/s")


async def main_async(duration_s: float) -> None:
    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as directory:
        await bench_http(duration_s, ca, Path(directory))
        await bench_bookie(ca, Path(directory))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    bench_tokens(args.duration)
    trio.run(main_async, args.duration)


if __name__ == "__main__":
    main()
