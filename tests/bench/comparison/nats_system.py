"""NATS JetStream (Debian's ``nats-server``) with file storage.

Server: ``nats-server -c nats.conf`` with ``listen: 127.0.0.1:P`` and ``jetstream { store_dir: D }``. An
acknowledged message is in the stream's file, in the page cache: 2.9 has no per-message fsync (no
``sync_interval`` setting either; the store syncs in the background).

Publisher: nats-py's ``publish_async`` (one stream per topic, subject = topic), whose futures resolve on the
stream's PubAck; the harness's window bounds what is in flight. Consumer: a durable pull consumer
(``AckPolicy.ALL``) fetching up to 1000 at a time, acknowledging the last message of each batch
(cumulative).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from bench.comparison.processes import ServerProcess, free_port, run_tool, wait_for_port
from bench.comparison.system import AckSink, PayloadSink, Publisher

START_TIMEOUT_S = 30.0
FETCH_BATCH = 1000
FETCH_TIMEOUT_S = 1.0
DURABLE = "bench"


class _JetStreamPublisher:
    def __init__(self, js: Any, topic: str, on_ack: AckSink) -> None:
        self.js = js
        self.topic = topic
        self.on_ack = on_ack

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        for seq, payload in messages:
            future = await self.js.publish_async(self.topic, payload)
            future.add_done_callback(partial(self._done, seq))

    def _done(self, seq: int, future: asyncio.Future[Any]) -> None:
        self.on_ack(seq, not future.cancelled() and future.exception() is None)


class NatsSystem:
    backend = "asyncio"
    durability = "page cache"
    durability_detail = "JetStream file store: written to the page cache, no per-message fsync (2.9)"
    consume_mode = "durable pull consumer, fetch 1000, AckPolicy.ALL (ack the last of each batch)"

    def __init__(self, name: str, window: int) -> None:
        self.name = name
        self.window = window
        self.port = 0
        self.how = ""
        self._server: ServerProcess | None = None

    def available(self) -> str | None:
        if shutil.which("nats-server") is None:
            return "nats-server is not installed (apt-get install nats-server)"
        try:
            import nats  # noqa: F401
        except ImportError as exc:
            return f"client missing ({exc}); pip install -e '.[bench]'"
        return None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {
            "nats-server": run_tool(["nats-server", "--version"]),
            "client": f"nats-py {version('nats-py')}",
        }

    def start(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = workdir / "nats.conf"
        config.write_text(
            f'listen: "127.0.0.1:{self.port}"\nserver_name: "bench"\n'
            f'jetstream {{\n  store_dir: "{workdir / "jetstream"}"\n}}\n'
        )
        self._server = ServerProcess(self.name, ["nats-server", "-c", str(config)], workdir / "nats.log")
        self._server.start()
        wait_for_port(self._server, self.port, START_TIMEOUT_S)
        self.how = "nats-server -c nats.conf (listen 127.0.0.1, jetstream store_dir), file-storage streams"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(f"nats://127.0.0.1:{self.port}", allow_reconnect=False)

    async def _stream(self, js: Any, topic: str) -> None:
        from nats.js.api import StorageType

        await js.add_stream(name=topic, subjects=[topic], storage=StorageType.FILE)

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        nc = await self._connect()
        try:
            js = nc.jetstream(publish_async_max_pending=self.window * 2)
            await self._stream(js, topic)
            yield _JetStreamPublisher(js, topic, on_ack)
        finally:
            await nc.close()

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        import nats.errors
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc = await self._connect()
        try:
            js = nc.jetstream()
            await self._stream(js, topic)
            config = ConsumerConfig(
                ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL, max_ack_pending=FETCH_BATCH * 10
            )
            subscription = await js.pull_subscribe(topic, durable=DURABLE, stream=topic, config=config)
            task_status.started()
            more = True
            while more:
                try:
                    batch = await subscription.fetch(FETCH_BATCH, timeout=FETCH_TIMEOUT_S)
                except nats.errors.TimeoutError:
                    continue
                last = None
                for message in batch:
                    last = message
                    more = on_payload(message.data)
                    if not more:
                        break
                if last is not None:
                    await last.ack()
        finally:
            await nc.close()
