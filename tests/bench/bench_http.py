"""Benchmark of the shared HTTP/WebSocket server (magnetar.bookkeeper.runtime.http).

    .venv/bin/python tests/bench/bench_http.py [--duration 5] [--messages 200000]

Figures:
* HTTP requests/s on keep-alive connections (1 and 8 connections), each connection sending its next request
  when the previous response arrived (no pipelining), ``GET /bench`` answered ``200 ok``;
* WebSocket messages/s one way for 100-byte messages: server -> client (a consumer being pushed messages:
  the handler sends in a loop and the writer coalesces), and client -> server (a producer: the handler
  receives and counts);
* for each, the server process's CPU time per request/message (less sensitive than rates to other load on
  the machine, though the client process competes for the same cores);
* the same server -> client push with each frame built as a Pulsar ConsumerMessage JSON
  (``consumer_message_json``: base64 payload, message id, ISO publish time), the per-message work of a real
  consumer session minus the storage read.

The server runs in this process under trio; the load generator is a separate process (raw sockets, a
selector loop, minimal parsing) so that client and server do not share a GIL. Both share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import struct
import sys
import time

RESPONSE_BODY = b"ok"
WS_PAYLOAD = b"x" * 100


# --- load generator (runs in the child process) -------------------------------------------------------------


def client_http(port: int, connections: int, duration_s: float) -> dict[str, float]:
    request = b"GET /bench HTTP/1.1\r\nhost: bench\r\n\r\n"
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = bytearray()
        sock.send(request)
    done = 0
    start = time.perf_counter()
    deadline = start + duration_s
    while time.perf_counter() < deadline:
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            buf = buffers[sock]
            buf += sock.recv(65536)
            while (end := buf.find(b"\r\n\r\n")) >= 0 and len(buf) >= end + 4 + len(RESPONSE_BODY):
                del buf[: end + 4 + len(RESPONSE_BODY)]
                done += 1
                sock.send(request)
    elapsed = time.perf_counter() - start
    for sock in buffers:
        sock.close()
    return {"requests": done, "seconds": elapsed, "per_second": done / elapsed}


def _ws_handshake(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nhost: bench\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
        "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def client_ws_receive(port: int, path: str, messages: int) -> dict[str, float]:
    """Count server frames (unmasked, payload < 65536) until ``messages`` arrived."""
    sock = _ws_handshake(port, path)
    buf = bytearray()
    count = 0
    start = time.perf_counter()
    while count < messages:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
        pos = 0
        while len(buf) - pos >= 2:
            length = buf[pos + 1] & 0x7F
            header = 2
            if length == 126:
                if len(buf) - pos < 4:
                    break
                length = struct.unpack_from("!H", buf, pos + 2)[0]
                header = 4
            if len(buf) - pos < header + length:
                break
            pos += header + length
            count += 1
        del buf[:pos]
    elapsed = time.perf_counter() - start
    sock.close()
    return {"messages": count, "seconds": elapsed, "per_second": count / elapsed}


def client_ws_send(port: int, messages: int) -> dict[str, float]:
    """Send ``messages`` masked 100-byte text frames as fast as the socket takes them, then wait for the
    server's count."""
    sock = _ws_handshake(port, "/ws/sink")
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(WS_PAYLOAD))
    frame = bytes((0x81, 0x80 | len(WS_PAYLOAD))) + mask + masked
    batch = frame * 1000
    start = time.perf_counter()
    for _ in range(messages // 1000):
        sock.sendall(batch)
    reply = sock.recv(1024)  # the server answers once it has received them all
    elapsed = time.perf_counter() - start
    sock.close()
    assert reply, "server closed without answering"
    return {"messages": messages, "seconds": elapsed, "per_second": messages / elapsed}


def run_client(argv: list[str]) -> None:
    kind, port = argv[0], int(argv[1])
    if kind == "http":
        result = client_http(port, int(argv[2]), float(argv[3]))
    elif kind == "ws-receive":
        result = client_ws_receive(port, argv[2], int(argv[3]))
    else:
        result = client_ws_send(port, int(argv[2]))
    print(json.dumps(result))


# --- server side (this process) -----------------------------------------------------------------------------


async def run_benchmarks(duration_s: float, messages: int) -> dict[str, dict[str, float]]:
    import trio

    from magnetar.bookkeeper.runtime.http import (
        HttpRequest,
        HttpResponse,
        HttpServer,
        HttpSettings,
        Router,
        WebSocketRequest,
    )
    from magnetar.broker.protocols.pulsar_ws.messages import consumer_message_json
    from magnetar.broker.wire.message_id import MessageId

    async def bench(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, (("content-type", "text/plain"),), RESPONSE_BODY)

    async def push_raw(request: WebSocketRequest) -> None:
        ws = await request.accept()
        for _ in range(messages):
            await ws.send_bytes(WS_PAYLOAD)
        await ws.close()

    async def push_json(request: WebSocketRequest) -> None:
        ws = await request.accept()
        publish_ms = int(time.time() * 1000)
        for i in range(messages):
            frame = consumer_message_json(MessageId(7, i), WS_PAYLOAD, {}, publish_ms)
            await ws.send_text_encoded(frame)
        await ws.close()

    async def sink(request: WebSocketRequest) -> None:
        ws = await request.accept()
        for _ in range(messages):
            await ws.receive()
        await ws.send_text("done")
        await ws.close()

    router = Router()
    router.get("/bench", bench)
    router.websocket("/ws/push-raw", push_raw)
    router.websocket("/ws/push-json", push_json)
    router.websocket("/ws/sink", sink)
    settings = HttpSettings(http_bind_address="127.0.0.1", http_port=0)
    server = HttpServer(router, settings)
    results: dict[str, dict[str, float]] = {}

    async def client(*args: str) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--client", *args]
        cpu_before = time.process_time()
        done = await trio.run_process(cmd, capture_stdout=True)
        cpu_s = time.process_time() - cpu_before
        out: dict[str, float] = json.loads(done.stdout)
        count = out.get("requests", out.get("messages", 0))
        out["server_cpu_us_each"] = cpu_s / count * 1e6 if count else 0.0
        return out

    async with trio.open_nursery() as nursery:
        ports = await nursery.start(server.serve)
        port = str(ports[0])
        results["http keep-alive, 1 connection"] = await client("http", port, "1", str(duration_s))
        results["http keep-alive, 8 connections"] = await client("http", port, "8", str(duration_s))
        results["ws server->client, 100 B binary"] = await client(
            "ws-receive", port, "/ws/push-raw", str(messages)
        )
        results["ws server->client, ConsumerMessage JSON (100 B payload)"] = await client(
            "ws-receive", port, "/ws/push-json", str(messages)
        )
        results["ws client->server, 100 B text"] = await client("ws-send", port, str(messages))
        server.shutdown()
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        run_client(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per HTTP run (default 5)")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per WebSocket run")
    args = parser.parse_args()
    import trio

    results = trio.run(run_benchmarks, args.duration, args.messages)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    for name, figures in results.items():
        print(
            f"{name:58s} {figures['per_second']:>10,.0f} /s"
            f"   server CPU {figures['server_cpu_us_each']:>6.1f} us each"
        )


if __name__ == "__main__":
    main()
