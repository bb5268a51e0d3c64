"""pulsar-lite (PyPI: a Rust broker speaking Pulsar's binary protocol) with Apache's ``pulsar-client``.

Magnetar speaks Pulsar's WebSocket API, not the binary protocol, so this peer is measured with its own
client library (C++ core, Python binding): the figures compare servers *and* client stacks, and the report
labels it so. Server: the ``pulsar-lite`` binary shipped in the wheel, ``--addr 127.0.0.1:P --db-path D
--log-level warn``. Durability: RocksDB plus an entry log; its fsync policy is not documented (it survived a
kill -9 in a quick check, docs/upstream.md, peer systems).

Publisher: ``send_async`` without batching (each message its own entry, as Magnetar's WebSocket producer
sends them), ``max_pending_messages`` at least the harness's window; the client's callback thread hands each
ack back to the event loop (``call_soon_threadsafe``). Consumer: Exclusive subscription from the earliest
message, receiver queue 1000; a worker thread waits for a message and drains what else is already queued
(up to 1000), the event loop handles the batch and acknowledges each message.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from bench.comparison.processes import ServerProcess, free_port, wait_for_port
from bench.comparison.system import AckSink, PayloadSink, Publisher

START_TIMEOUT_S = 30.0
RECEIVE_WAIT_MS = 200
DRAIN_MAX = 1000
RECEIVER_QUEUE_SIZE = 1000
SUBSCRIPTION = "bench"


def binary_path() -> Path | None:
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "pulsar-lite"
    return path if path.is_file() else None


class _PulsarPublisher:
    def __init__(self, producer: Any, on_ack: AckSink, loop: asyncio.AbstractEventLoop) -> None:
        self.producer = producer
        self.on_ack = on_ack
        self.loop = loop

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        for seq, payload in messages:
            self.producer.send_async(payload, partial(self._sent, seq))

    def _sent(self, seq: int, result: Any, _message_id: Any) -> None:
        import pulsar

        self.loop.call_soon_threadsafe(self.on_ack, seq, result == pulsar.Result.Ok)


class PulsarLiteSystem:
    backend = "asyncio"
    durability = "RocksDB + entry log"
    durability_detail = "RocksDB + entry log; fsync policy undocumented (survived kill -9 in a quick check)"
    consume_mode = "pulsar-client Exclusive subscription, every message acknowledged"

    def __init__(self, name: str, window: int) -> None:
        self.name = name
        self.window = window
        self.port = 0
        self.how = ""
        self._server: ServerProcess | None = None

    def available(self) -> str | None:
        if binary_path() is None:
            return "pulsar-lite is not installed (pip install -e '.[bench]')"
        if importlib.util.find_spec("pulsar") is None:
            return "pulsar-client is not installed (pip install -e '.[bench]')"
        return None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {
            "pulsar-lite": version("pulsar-lite"),
            "client": f"pulsar-client {version('pulsar-client')} (Pulsar binary protocol)",
        }

    def start(self, workdir: Path) -> None:
        binary = binary_path()
        if binary is None:
            raise RuntimeError("pulsar-lite binary not found")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._server = ServerProcess(
            self.name,
            [str(binary), "--addr", f"127.0.0.1:{self.port}", "--db-path", str(workdir / "db"),
             "--log-level", "warn"],
            workdir / "pulsar-lite.log",
            cwd=workdir,
        )  # fmt: skip
        self._server.start()
        wait_for_port(self._server, self.port, START_TIMEOUT_S)
        self.how = "pulsar-lite --addr 127.0.0.1:P --db-path D --log-level warn; client pulsar-client"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _client(self) -> Any:
        import pulsar

        return pulsar.Client(
            f"pulsar://127.0.0.1:{self.port}", logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
        )

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        client = self._client()
        try:
            producer = await anyio.to_thread.run_sync(
                partial(
                    client.create_producer,
                    topic,
                    batching_enabled=False,
                    max_pending_messages=self.window * 2,
                    block_if_queue_full=True,
                )
            )
            yield _PulsarPublisher(producer, on_ack, asyncio.get_running_loop())
            await anyio.to_thread.run_sync(producer.flush)
        finally:
            await anyio.to_thread.run_sync(client.close)

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        import pulsar

        client = self._client()
        try:
            consumer = await anyio.to_thread.run_sync(
                partial(
                    client.subscribe,
                    topic,
                    SUBSCRIPTION,
                    consumer_type=pulsar.ConsumerType.Exclusive,
                    initial_position=pulsar.InitialPosition.Earliest,
                    receiver_queue_size=RECEIVER_QUEUE_SIZE,
                )
            )
            task_status.started()
            more = True
            while more:
                batch = await anyio.to_thread.run_sync(_receive_batch, consumer, abandon_on_cancel=True)
                for message in batch:
                    more = on_payload(message.data())
                    consumer.acknowledge(message)
                    if not more:
                        break
        finally:
            await anyio.to_thread.run_sync(client.close)


def _receive_batch(consumer: Any) -> list[Any]:
    """Wait (bounded) for one message, then take what else is already in the receiver queue."""
    import pulsar

    try:
        batch = [consumer.receive(timeout_millis=RECEIVE_WAIT_MS)]
    except pulsar.Timeout:
        return []
    while len(batch) < DRAIN_MAX:
        try:
            batch.append(consumer.receive(timeout_millis=0))
        except pulsar.Timeout:
            break
    return batch
