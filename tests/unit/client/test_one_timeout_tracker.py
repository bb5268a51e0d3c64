"""Each bookie request has one timeout tracker.

Over TCP the transport keeps every request's deadline (it must: to free the request's state and drop a late
answer), so the client hands it its own ``add_timeout_ms`` / ``read_timeout_ms`` and runs no timer for those
requests; before, both timed every add out, each with its own setting. A silent bookie (a real socket on
127.0.0.1 that reads and never answers) shows which tracker answered: the transport, naming the client's
timeout. Over a transport without deadlines of its own the client's queue still times the request out.
"""

from __future__ import annotations

import math

import trio
from fixtures.bookie_server import add_request, read_request

from magnetar.bookkeeper.client.bookie_client import BookieClient
from magnetar.bookkeeper.client.call_soon import CallSoon
from magnetar.bookkeeper.client.tcp_transport import TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import (
    FailureReason,
    ResponseCallback,
    TimesOutRequests,
    TransportFailure,
)
from magnetar.bookkeeper.protocol.messages import Request, Response


async def _silent_bookie(nursery: trio.Nursery) -> str:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(65536):
                pass

    nursery.start_soon(trio.serve_listeners, handle, listeners)
    return f"127.0.0.1:{port}"


async def _answer(
    client: BookieClient, bookie: str, request: Request, add: bool
) -> Response | TransportFailure:
    done = trio.Event()
    answers: list[Response | TransportFailure] = []

    def callback(answer: Response | TransportFailure) -> None:
        answers.append(answer)
        done.set()

    client.send(bookie, request, client.adds if add else client.reads, callback)
    await done.wait()
    assert len(answers) == 1
    return answers[0]


async def test_over_tcp_the_transport_is_the_one_tracker_with_the_clients_timeouts() -> None:
    async with trio.open_nursery() as nursery:
        bookie = await _silent_bookie(nursery)
        transport_settings = TcpTransportSettings(add_timeout_ms=60_000, read_timeout_ms=60_000)
        async with open_tcp_transport(transport_settings) as transport:
            assert isinstance(transport, TimesOutRequests)
            call_soon = CallSoon()
            client = BookieClient(transport, call_soon, 0.2, 0.3)
            await nursery.start(call_soon.run)
            await nursery.start(client.run)
            assert client.adds.timeout_s == math.inf  # the client runs no timer of its own
            assert client.reads.timeout_s == math.inf
            failure = await _answer(client, bookie, add_request(9, 0), add=True)
            assert isinstance(failure, TransportFailure)
            assert failure.reason is FailureReason.TIMEOUT
            # the transport answered (its detail), after the client's 200 ms (not its own 60 s)
            assert failure.detail == "no response within add_timeout_ms=200"
            failure = await _answer(client, bookie, read_request(9, 0), add=False)
            assert isinstance(failure, TransportFailure)
            assert failure.detail == "no response within read_timeout_ms=300"
            client.close()
        nursery.cancel_scope.cancel()


class _SilentTransport:
    """A transport with no deadlines of its own whose bookie never answers."""

    def __init__(self) -> None:
        self.sent: list[Request] = []

    def send(self, bookie: str, request: Request, callback: ResponseCallback) -> None:
        self.sent.append(request)


async def test_without_deadlines_in_the_transport_the_client_times_the_request_out() -> None:
    transport = _SilentTransport()
    assert not isinstance(transport, TimesOutRequests)
    async with trio.open_nursery() as nursery:
        call_soon = CallSoon()
        client = BookieClient(transport, call_soon, 0.2, 0.3)
        await nursery.start(call_soon.run)
        await nursery.start(client.run)
        assert client.adds.timeout_s == 0.2
        failure = await _answer(client, "127.0.0.1:1", add_request(9, 0), add=True)
        assert isinstance(failure, TransportFailure)
        assert (failure.reason, failure.detail) == (FailureReason.TIMEOUT, "client timeout")
        client.close()
        nursery.cancel_scope.cancel()
