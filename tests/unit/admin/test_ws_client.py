"""The tools' WebSocket client: a connect cut short (timeout, cancellation) closes its socket."""

from __future__ import annotations

import gc

import pytest
import trio

from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsClosed


async def test_a_connect_cancelled_during_the_upgrade_closes_its_socket() -> None:
    accepted: list[trio.SocketStream] = []
    async with trio.open_nursery() as nursery:

        async def silent_server(stream: trio.SocketStream) -> None:
            accepted.append(stream)  # reads nothing, answers nothing: the upgrade never completes
            await trio.sleep_forever()

        listeners = await nursery.start(trio.serve_tcp, silent_server, 0)
        port = listeners[0].socket.getsockname()[1]
        with trio.move_on_after(0.2) as scope:
            await WsClient.connect(f"ws://127.0.0.1:{port}/ws/v2/consumer/x")
        assert scope.cancelled_caught
        # the client's socket was closed: after the upgrade request, the server side sees end of stream
        assert len(accepted) == 1
        received = b""
        with trio.fail_after(5):  # without the close this would wait forever
            while chunk := await accepted[0].receive_some(1024):
                received += chunk
        assert received.startswith(b"GET /ws/v2/consumer/x")
        nursery.cancel_scope.cancel()
    gc.collect()  # an unclosed socket would now raise ResourceWarning (an error under filterwarnings)


async def test_frames_that_come_with_the_upgrade_response_are_seen_and_sending_after_close_is_ws_closed() -> (
    None
):
    async with trio.open_nursery() as nursery:

        async def close_at_once(stream: trio.SocketStream) -> None:
            from wsproto import ConnectionType, WSConnection
            from wsproto.events import AcceptConnection, CloseConnection, Request

            server = WSConnection(ConnectionType.SERVER)
            while True:
                server.receive_data(await stream.receive_some(4096))
                if any(isinstance(event, Request) for event in server.events()):
                    break
            await stream.send_all(server.send(AcceptConnection()) + server.send(CloseConnection(code=1001)))
            await trio.sleep_forever()

        listeners = await nursery.start(trio.serve_tcp, close_at_once, 0)
        port = listeners[0].socket.getsockname()[1]
        client = await WsClient.connect(f"ws://127.0.0.1:{port}/ws/v2/producer/x")
        with trio.fail_after(5), pytest.raises(WsClosed):
            # the close frame came with the upgrade response: seen without waiting for more data
            await client.receive()
        with pytest.raises(WsClosed):
            await client.send("{}")
        await client.aclose()
        nursery.cancel_scope.cancel()
