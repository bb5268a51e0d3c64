"""Faults on the wire: timeouts, lost connections, reconnects, bad clients, limits, shutdown."""

from __future__ import annotations

import math
import struct

import trio
import trio.testing
from fixtures.bookie_server import (
    KEY,
    add_request,
    call,
    packaged,
    raw_frame,
    read_request,
    running_bookie,
    send,
)

from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import FailureReason, TransportFailure, next_request_id
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.messages import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
)
from magnetar.bookkeeper.protocol.status import BookieStatus, OpCode

OK = BookieStatus.EOK


async def _silent_server(
    nursery: trio.Nursery, *, close_after_bytes: int | None = None
) -> tuple[str, list[trio.SocketStream]]:
    """A TCP server that never answers; optionally closes a connection after reading some bytes."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def handle(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        received = 0
        async with stream:
            while data := await stream.receive_some(65536):
                received += len(data)
                if close_after_bytes is not None and received >= close_after_bytes:
                    return

    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return f"127.0.0.1:{port}", accepted


async def _free_port() -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    return port


async def test_request_without_answer_times_out_and_connection_stays() -> None:
    settings = TcpTransportSettings(add_timeout_ms=100, read_timeout_ms=300)
    async with trio.open_nursery() as nursery, open_tcp_transport(settings) as transport:
        bookie, accepted = await _silent_server(nursery)
        add = send(transport, bookie, add_request(1, 0))
        read = send(transport, bookie, read_request(1, 0))
        first = await add.wait()
        assert isinstance(first, TransportFailure)
        assert first.reason is FailureReason.TIMEOUT
        assert "add_timeout_ms=100" in first.detail
        assert not read.done.is_set()  # the read has its own, longer timeout
        second = await read.wait()
        assert isinstance(second, TransportFailure)
        assert second.reason is FailureReason.TIMEOUT
        again = await call(transport, bookie, add_request(1, 1))
        assert isinstance(again, TransportFailure)
        assert again.reason is FailureReason.TIMEOUT
        assert len(accepted) == 1  # timeouts do not cost the connection
        assert add.calls == read.calls == 1
        nursery.cancel_scope.cancel()


async def test_lost_connection_fails_in_flight_requests_with_closed() -> None:
    async with trio.open_nursery() as nursery, open_tcp_transport() as transport:
        bookie, _ = await _silent_server(nursery, close_after_bytes=1)
        pending = [send(transport, bookie, add_request(2, e)) for e in range(5)]
        for c in pending:
            failure = await c.wait()
            assert isinstance(failure, TransportFailure)
            assert failure.reason is FailureReason.CLOSED
            assert failure.bookie == bookie
        nursery.cancel_scope.cancel()


async def test_connect_failure_backoff_and_reconnect_when_the_bookie_returns() -> None:
    port = await _free_port()
    bookie = f"127.0.0.1:{port}"
    settings = TcpTransportSettings(reconnect_backoff_initial_ms=60_000, reconnect_backoff_max_ms=60_000)
    async with open_tcp_transport(settings) as transport:
        refused = await call(transport, bookie, add_request(3, 0))
        assert isinstance(refused, TransportFailure)
        assert refused.reason is FailureReason.CONNECT
        during_backoff = await call(transport, bookie, add_request(3, 0))
        assert isinstance(during_backoff, TransportFailure)
        assert during_backoff.reason is FailureReason.CONNECT
        assert "backoff" in during_backoff.detail
    async with open_tcp_transport(TcpTransportSettings(reconnect_backoff_initial_ms=0)) as transport:
        refused = await call(transport, bookie, add_request(3, 0))
        assert isinstance(refused, TransportFailure)
        assert refused.reason is FailureReason.CONNECT
        async with running_bookie(port=port) as bk:
            assert bk.bookie_id == bookie
            response = await call(transport, bookie, add_request(3, 0))
            assert isinstance(response, AddResponse)
            assert response.status is OK
        # The bookie went away (drained and closed): the connection is lost, then refused again.
        gone = await call(transport, bookie, add_request(3, 1))
        assert isinstance(gone, TransportFailure)
        assert gone.reason in (FailureReason.CONNECT, FailureReason.CLOSED)
        async with running_bookie(port=port):
            back = await call(transport, bookie, read_request(3, 0))
            assert back.status is BookieStatus.ENOLEDGER  # a new, empty bookie


async def test_invalid_bookie_id_is_a_connect_failure() -> None:
    async with open_tcp_transport() as transport:
        failure = await call(transport, "no-port-here", add_request(4, 0))
        assert isinstance(failure, TransportFailure)
        assert failure.reason is FailureReason.CONNECT


async def test_shutdown_fails_pending_requests_and_later_sends() -> None:
    async with trio.open_nursery() as nursery:
        async with open_tcp_transport() as transport:
            bookie, _ = await _silent_server(nursery)
            pending = send(transport, bookie, add_request(5, 0))
            await trio.testing.wait_all_tasks_blocked()
        failure = await pending.wait()
        assert isinstance(failure, TransportFailure)
        assert failure.reason is FailureReason.SHUTDOWN
        late = send(transport, bookie, add_request(5, 1))
        assert late.calls == 0
        result = await late.wait()
        assert isinstance(result, TransportFailure)
        assert result.reason is FailureReason.SHUTDOWN
        nursery.cancel_scope.cancel()


async def _read_responses(stream: trio.SocketStream, proto: ClientProtocol, count: int) -> list[object]:
    events: list[object] = []
    with trio.fail_after(10):
        while len(events) < count:
            data = await stream.receive_some(65536)
            assert data, "server closed the connection"
            proto.receive_data(data)
            while (event := proto.next_event()) is not NEED_DATA:
                events.append(event)
    return events


async def test_garbage_client_gets_ebadreq_while_a_good_client_keeps_working() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        raw = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        proto = ClientProtocol()
        await raw.send_all(
            raw_frame(OpCode.READ_LAC, 41, b"\x00" * 3)  # short body
            + raw_frame(0x33, 42, b"")  # unknown opcode
            + raw_frame(OpCode.READ_LAC, 43, struct.pack(">q", 1), version=9)
            + raw_frame(OpCode.READ_LAC, 44, struct.pack(">q", 1))  # a good one
        )
        events = await _read_responses(raw, proto, 4)
        assert [(e.request_id, e.status) for e in events[:3]] == [
            (41, BookieStatus.EBADREQ),
            (42, BookieStatus.EBADREQ),
            (43, BookieStatus.EBADREQ),
        ]
        assert all(isinstance(e, ErrorResponse) for e in events[:3])
        assert events[3] == ReadLacResponse(44, BookieStatus.ENOLEDGER, 1)
        good = [send(transport, bk.bookie_id, add_request(6, e)) for e in range(50)]
        await raw.send_all(struct.pack(">i", -1) + b"\xff" * 100)  # unrecoverable: this connection ends
        assert await raw.receive_some(100) == b""
        await raw.aclose()
        for c in good:
            assert (await c.wait()).status is OK
        assert (await call(transport, bk.bookie_id, read_request(6, 49))).status is OK


async def test_oversized_frame_is_answered_and_skipped() -> None:
    async with running_bookie(frame_bytes_max=64 * 1024) as bk:
        raw = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        proto = ClientProtocol()
        size = 1024 * 1024
        await raw.send_all(struct.pack(">iIq", size - 4, (3 << 24) | (1 << 16), 77))
        chunk = b"\x00" * 65536
        remaining = size - 16
        while remaining:
            piece = chunk[: min(remaining, len(chunk))]
            await raw.send_all(piece)
            remaining -= len(piece)
        await raw.send_all(ClientProtocol().send(ReadLacRequest(78, 3)))
        first, second = await _read_responses(raw, proto, 2)
        assert isinstance(first, ErrorResponse)
        assert (first.request_id, first.status) == (77, BookieStatus.EBADREQ)
        assert "frame_bytes_max=65536" in first.message
        assert second == ReadLacResponse(78, BookieStatus.ENOLEDGER, 3)
        await raw.aclose()


async def test_connections_beyond_the_limit_are_closed() -> None:
    async with running_bookie(connections_max=1) as bk, open_tcp_transport() as transport:
        assert (await call(transport, bk.bookie_id, add_request(7, 0))).status is OK
        extra = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        with trio.fail_after(5):
            assert await extra.receive_some(10) == b""
        await extra.aclose()
        assert bk.bookie.metrics.connections_rejected == 1
        assert (await call(transport, bk.bookie_id, add_request(7, 1))).status is OK


async def test_slow_reader_does_not_hold_up_other_clients() -> None:
    out_max = 4096
    settings = {"outgoing_bytes_max": out_max, "write_timeout_ms": 300}
    async with running_bookie(**settings) as bk, open_tcp_transport() as transport:
        big = AddRequest(next_request_id(), 8, 0, KEY, packaged(8, 0, b"x" * 65536))
        assert (await call(transport, bk.bookie_id, big)).status is OK
        hog = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        burst = bytearray()
        hog_proto = ClientProtocol()
        for request_id in range(1, 2001):  # 2000 reads of 64 KiB each, never read back
            hog_proto.send_into(burst, ReadRequest(request_id, 8, 0))
        await hog.send_all(burst)
        await trio.testing.wait_all_tasks_blocked()
        # The hog's unsent responses stay bounded: its connection stopped reading requests.
        largest = max(len(c._out) for c in bk.bookie.server._connections)
        assert largest <= out_max + 70_000
        good = [send(transport, bk.bookie_id, add_request(8, e)) for e in range(1, 101)]
        for c in good:
            assert (await c.wait()).status is OK
        # A client that reads nothing for write_timeout_ms loses its connection.
        with trio.fail_after(10):
            while bk.bookie.server.connection_count > 1:
                await trio.sleep(0.05)
        await hog.aclose()


async def test_a_stalled_send_drops_the_connection_and_does_not_count_against_the_next_one() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    bookie = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    accepted: list[trio.SocketStream] = []

    async def handle(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        if len(accepted) == 1:
            await trio.sleep_forever()  # the first connection reads nothing: the client's sends stall
        async with stream:
            while await stream.receive_some(65536):
                pass

    settings = TcpTransportSettings(add_timeout_ms=300, read_timeout_ms=300, reconnect_backoff_initial_ms=0)
    async with trio.open_nursery() as nursery, open_tcp_transport(settings) as transport:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        payload = b"x" * (1 << 20)
        stalled = [
            send(
                transport,
                bookie,
                AddRequest(next_request_id(), 9, e, KEY, packaged(9, e, payload), False, False),
            )
            for e in range(32)
        ]
        for c in stalled:
            assert isinstance(await c.wait(), TransportFailure)
        with trio.fail_after(10):
            while transport._connections[bookie]._running:  # the watcher drops the stalled connection
                await trio.sleep(0.01)
        assert transport._connections[bookie]._send_timer.deadline == math.inf
        # The next connection starts with no send in progress: its request runs into its own timeout
        # instead of being failed at once for the send the last connection broke off.
        failure = await call(transport, bookie, read_request(9, 0))
        assert isinstance(failure, TransportFailure)
        assert failure.reason is FailureReason.TIMEOUT, failure
        assert len(accepted) == 2
        nursery.cancel_scope.cancel()


async def test_abrupt_disconnect_with_requests_in_flight() -> None:
    async with running_bookie() as bk, open_tcp_transport() as transport:
        assert (await call(transport, bk.bookie_id, add_request(9, 0))).status is OK
        raw = await trio.open_tcp_stream("127.0.0.1", bk.endpoint.port)
        burst = bytearray()
        proto = ClientProtocol()
        for e in range(1, 200):
            proto.send_into(burst, add_request(9, e))
        await raw.send_all(burst)
        raw.socket.close()  # gone without reading a single response
        with trio.fail_after(5):
            while bk.bookie.server.connection_count != 1:
                await trio.sleep(0.01)
        assert bk.bookie.metrics.requests_in_progress == 0
        response = await call(transport, bk.bookie_id, add_request(9, 200))
        assert isinstance(response, AddResponse)
        assert response.status is OK


async def test_requests_sent_together_are_coalesced_into_few_writes() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    bookie = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    chunks: list[int] = []
    frame_bytes = len(ClientProtocol().send(add_request(1, 0)))
    expected = 1000 * frame_bytes
    got_all = trio.Event()

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            while sum(chunks) < expected:
                chunks.append(len(await stream.receive_some(1 << 20)))
            got_all.set()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery, open_tcp_transport() as transport:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        for entry_id in range(1000):  # no checkpoint in between: one outgoing buffer, one send_all
            send(transport, bookie, add_request(1, entry_id))
        with trio.fail_after(10):
            await got_all.wait()
        assert sum(chunks) == expected
        assert len(chunks) < 50  # a write per request would arrive as hundreds of segments
        nursery.cancel_scope.cancel()
