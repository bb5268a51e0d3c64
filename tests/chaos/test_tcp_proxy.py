"""The fault-injecting proxy: forwarding, partition, blackhole (held bytes delivered on heal), delay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
from fixtures.tcp_proxy import TcpProxy


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some(65536):
            await stream.send_all(data)


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
        target = listeners[0].socket.getsockname()[1]
        forwarder = TcpProxy("127.0.0.1", target, listen_host="127.0.1.9")
        await nursery.start(forwarder.run)
        yield forwarder
        nursery.cancel_scope.cancel()


async def round_trip(stream: trio.SocketStream, data: bytes) -> bytes:
    await stream.send_all(data)
    received = b""
    while len(received) < len(data):
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed"
        received += chunk
    return received


async def test_forwards_on_its_own_address(proxy: TcpProxy) -> None:
    assert proxy.address.startswith("127.0.1.9:")
    stream = await trio.open_tcp_stream("127.0.1.9", proxy.port or 0)
    async with stream:
        assert await round_trip(stream, b"hello") == b"hello"
    assert proxy.bytes_forwarded >= 10


async def test_partition_cuts_connections_and_heal_lets_new_ones_through(proxy: TcpProxy) -> None:
    stream = await trio.open_tcp_stream("127.0.1.9", proxy.port or 0)
    assert await round_trip(stream, b"x") == b"x"
    proxy.partition()
    with trio.fail_after(5):
        assert await stream.receive_some(10) == b""
    await stream.aclose()
    proxy.heal()
    async with await trio.open_tcp_stream("127.0.1.9", proxy.port or 0) as again:
        assert await round_trip(again, b"y") == b"y"


async def test_blackhole_holds_bytes_until_heal(proxy: TcpProxy) -> None:
    async with await trio.open_tcp_stream("127.0.1.9", proxy.port or 0) as stream:
        assert await round_trip(stream, b"before") == b"before"
        proxy.blackhole()
        await stream.send_all(b"held")
        with trio.move_on_after(0.3) as waited:
            await stream.receive_some(10)
        assert waited.cancelled_caught  # nothing came back, and the connection is still open
        proxy.heal()
        with trio.fail_after(5):
            received = await stream.receive_some(10)
        assert received == b"held"


async def test_delay_delivers_each_chunk_late_in_order(proxy: TcpProxy) -> None:
    async with await trio.open_tcp_stream("127.0.1.9", proxy.port or 0) as stream:
        proxy.set_delay(150)
        started = trio.current_time()
        assert await round_trip(stream, b"slow") == b"slow"
        assert trio.current_time() - started >= 0.3  # delayed on the way there and on the way back
        proxy.heal()
        assert await round_trip(stream, b"fast") == b"fast"
