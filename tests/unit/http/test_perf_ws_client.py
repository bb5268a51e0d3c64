"""The WebSocket client (``magnetar.bookkeeper.runtime.http.ws_client``: the load generator of ``magnetar
perf``, a proxying broker's hop to the owner) against the real server: handshake, subprotocols, redirects,
refusals, batches both ways, the server's close."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from magnetar.admin.perf.ws_stats import Histogram, bucket_us
from magnetar.bookkeeper.runtime.http import Router, WebSocketRequest, error_response
from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsClosed, WsRejected

StartServer = Any  # see conftest.py


async def echo(request: WebSocketRequest) -> None:
    ws = await request.accept(request.subprotocols[0] if request.subprotocols else None)
    await ws.send_text("hello")  # often in the same TCP segment as the 101: data after the handshake
    while True:
        batch = await ws.receive_batch()
        if batch == ["close please"]:
            await ws.send_text("last words")
            await ws.close(4003, "asked to")
            return
        texts = [m.encode() for m in batch if isinstance(m, str)]
        binaries = [m for m in batch if isinstance(m, bytes)]
        if texts:
            await ws.send_many(texts, text=True)
        if binaries:
            await ws.send_many(binaries, text=False)


async def redirect(request: WebSocketRequest) -> None:
    port = request.path_params["port"]
    location = f"ws://127.0.0.1:{port}/echo"
    await request.reject(error_response(307, "not here", (("location", location),)))


async def refuse(request: WebSocketRequest) -> None:
    await request.reject(error_response(404, "Topic not found"))


@pytest.fixture
async def server_url(start_server: StartServer) -> str:
    router = Router()
    router.websocket("/echo", echo)
    router.websocket("/redirect/{port}", redirect)
    router.websocket("/refuse", refuse)
    srv = await start_server(router)
    return str(srv.ws_url)


async def test_batches_of_text_and_binary_messages_round_trip(server_url: str) -> None:
    client = await WsClient.connect(f"{server_url}/echo")
    try:
        assert client.subprotocol is None
        assert await client.receive() == "hello"
        texts = [f"message {i} " + "x" * (i * 37 % 300) for i in range(500)]
        await client.send_many(texts)
        received: list[str | bytes] = []
        while len(received) < len(texts):
            received += await client.receive_batch()
        assert received == texts
        blobs = [bytes([i % 256]) * (i * 131 % 70_000) for i in range(20)]
        await client.send_many_bytes(blobs)
        got = [await client.receive_message() for _ in blobs]
        assert got == blobs
    finally:
        await client.aclose()


async def test_subprotocol_is_negotiated(server_url: str) -> None:
    client = await WsClient.connect(f"{server_url}/echo", subprotocols=["magnetar.v1"])
    try:
        assert client.subprotocol == "magnetar.v1"
    finally:
        await client.aclose()


async def test_redirects_are_followed_and_refusals_reported(server_url: str) -> None:
    port = server_url.rsplit(":", 1)[1]
    client = await WsClient.connect(f"{server_url}/redirect/{port}")
    try:
        assert client.url.endswith("/echo")
        assert await client.receive() == "hello"
    finally:
        await client.aclose()
    with pytest.raises(WsRejected) as refused:
        await WsClient.connect(f"{server_url}/refuse")
    assert refused.value.status == 404
    assert b"Topic not found" in refused.value.body


async def test_messages_before_the_servers_close_are_delivered_then_its_code(server_url: str) -> None:
    client = await WsClient.connect(f"{server_url}/echo")
    try:
        assert await client.receive() == "hello"
        await client.send("close please")
        assert await client.receive() == "last words"
        with pytest.raises(WsClosed) as closed:
            await client.receive()
        assert (closed.value.code, closed.value.reason) == (4003, "asked to")
        with pytest.raises(WsClosed):
            await client.receive()
    finally:
        with trio.fail_after(5):
            await client.aclose()


def test_latency_buckets_keep_three_significant_digits() -> None:
    assert bucket_us(-0.001) == 0
    assert bucket_us(0.000_999) == 999
    assert bucket_us(0.001_234_5) == 1230
    assert bucket_us(0.012_345) == 12_300
    assert bucket_us(0.123_456) == 123_000
    assert bucket_us(1.234_567) == 1_230_000
    assert bucket_us(123.456_789) == 123_000_000
    histogram = Histogram()
    for ms in range(1, 101):
        histogram.record(ms / 1000)
    assert histogram.percentile_ms(50) == 50.0
    assert histogram.percentile_ms(99) == 99.0
    assert histogram.summary()["max"] == 100.0
