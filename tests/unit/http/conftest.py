"""Fixtures for the HTTP/WebSocket server tests: a server on 127.0.0.1 port 0 inside the test's nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from magnetar.bookkeeper.runtime.http import HttpServer, HttpSettings, Router


@dataclass
class RunningServer:
    server: HttpServer
    port: int
    done: trio.Event

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def shutdown(self) -> None:
        """Graceful shutdown, waiting until ``serve`` has returned."""
        self.server.shutdown()
        await self.done.wait()


StartServer = Callable[..., Any]


@pytest.fixture
async def start_server(nursery: trio.Nursery) -> AsyncIterator[StartServer]:
    """``await start_server(router, **settings)`` -> :class:`RunningServer`; stopped at teardown."""
    started: list[RunningServer] = []

    async def start(router: Router, **overrides: Any) -> RunningServer:
        settings = HttpSettings(http_bind_address="127.0.0.1", http_port=0, **overrides)
        server = HttpServer(router, settings)
        done = trio.Event()

        async def serve(task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await server.serve(task_status=task_status)
            finally:
                done.set()

        ports: list[int] = await nursery.start(serve)
        running = RunningServer(server, ports[0], done)
        started.append(running)
        return running

    yield start
    for running in started:
        running.server.shutdown()
    for running in started:
        with trio.fail_after(30):
            await running.done.wait()


async def _raw_request(port: int, data: bytes, read_until_eof: bool = True) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        chunks = []
        with trio.fail_after(10):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if not read_until_eof:
                    break
        return b"".join(chunks)


RawRequest = Callable[..., Any]


@pytest.fixture
def raw_request() -> RawRequest:
    """``await raw_request(port, data)``: send raw bytes on a fresh connection, return all the server answers
    until it closes (or only the first chunk with ``read_until_eof=False``)."""
    return _raw_request
