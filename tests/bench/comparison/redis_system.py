"""Redis streams (Debian's ``redis-server``) with an append-only file: ``appendfsync always`` or ``everysec``.

Server: ``redis-server --port P --bind 127.0.0.1 --dir D --appendonly yes --appendfsync MODE --save ''
--daemonize no`` (docs/upstream.md, peer systems). ``always`` fsyncs the AOF before replying to the commands
of one event loop iteration (group commit) - the only peer here that makes each acknowledged write durable on
disk; ``everysec`` writes to the page cache and fsyncs once a second.

Publisher: one connection speaking RESP directly (``XADD topic * d PAYLOAD``), commands written back to back
without waiting for replies (pipelining) and replies parsed by ``hiredis`` in order, so the harness's window
bounds what is in flight exactly as for the others (redis-py's pipelines send and wait batch by batch).
Consumer: redis-py (hiredis parser) in a consumer group: ``XREADGROUP COUNT 1000 BLOCK 100`` then ``XACK`` of
the batch - a durable cursor with acknowledgements, like a Pulsar subscription (plain ``XREAD`` is faster and
acknowledges nothing).
"""

from __future__ import annotations

import asyncio
import shutil
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from bench.comparison.processes import ServerProcess, free_port, run_tool, wait_for_port
from bench.comparison.system import AckSink, PayloadSink, Publisher

START_TIMEOUT_S = 30.0
READ_BYTES = 1 << 16
CONSUME_COUNT = 1000
CONSUME_BLOCK_MS = 100
GROUP = "bench"

DURABILITY = {"always": "fsync (AOF always)", "everysec": "fsync each second"}
DURABILITY_DETAIL = {
    "always": "AOF appendfsync always: the AOF is fsynced before the replies (one fsync per loop batch)",
    "everysec": "AOF appendfsync everysec: page cache, fsync once a second (up to ~1 s of writes lost)",
}


class _RespPublisher:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, topic: str) -> None:
        self.reader = reader
        self.writer = writer
        self.prefix = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nd\r\n" % (
            len(topic),
            topic.encode(),
        )
        self.pending: deque[int] = deque()

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        parts: list[bytes] = []
        for seq, payload in messages:
            parts += (self.prefix, b"$%d\r\n" % len(payload), payload, b"\r\n")
            self.pending.append(seq)
        self.writer.write(b"".join(parts))
        await self.writer.drain()

    async def replies(self, on_ack: AckSink) -> None:
        import hiredis

        parser = hiredis.Reader()
        while True:
            data = await self.reader.read(READ_BYTES)
            if not data:
                raise ConnectionError("redis closed the connection")
            parser.feed(data)
            while (reply := parser.gets()) is not False:
                on_ack(self.pending.popleft(), not isinstance(reply, hiredis.ReplyError))


class RedisSystem:
    backend = "asyncio"
    consume_mode = "consumer group: XREADGROUP COUNT 1000, XACK per batch"

    def __init__(self, name: str, fsync: str) -> None:
        self.name = name
        self.fsync = fsync
        self.durability = DURABILITY[fsync]
        self.durability_detail = DURABILITY_DETAIL[fsync]
        self.port = 0
        self.how = ""
        self._server: ServerProcess | None = None

    def available(self) -> str | None:
        if shutil.which("redis-server") is None:
            return "redis-server is not installed (apt-get install redis-server)"
        try:
            import hiredis  # noqa: F401
            import redis  # noqa: F401
        except ImportError as exc:
            return f"client missing ({exc}); pip install -e '.[bench]'"
        return None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {
            "redis-server": run_tool(["redis-server", "--version"]),
            "client": f"redis-py {version('redis')}, hiredis {version('hiredis')}",
        }

    def start(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._server = ServerProcess(
            self.name,
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(workdir),
             "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "", "--daemonize", "no"],
            workdir / "redis.log",
        )  # fmt: skip
        self._server.start()
        wait_for_port(self._server, self.port, START_TIMEOUT_S)
        self.how = f"redis-server --appendonly yes --appendfsync {self.fsync} --save ''"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        publisher = _RespPublisher(reader, writer, topic)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(publisher.replies, on_ack)
                yield publisher
                tasks.cancel_scope.cancel()
        finally:
            writer.close()

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        import redis.asyncio

        client: Any = redis.asyncio.Redis(host="127.0.0.1", port=self.port)
        try:
            await client.xgroup_create(topic, GROUP, id="0", mkstream=True)
            task_status.started()
            more = True
            while more:
                reply = await client.xreadgroup(
                    GROUP, "c1", {topic: ">"}, count=CONSUME_COUNT, block=CONSUME_BLOCK_MS
                )
                if not reply:
                    continue
                ids = []
                for entry_id, fields in reply[0][1]:
                    ids.append(entry_id)
                    more = on_payload(fields[b"d"])
                    if not more:
                        break
                await client.xack(topic, GROUP, *ids)
        finally:
            await client.aclose()
