"""Magnetar as the compared system: ``magnetar standalone`` (one bookie) or a cluster of processes.

* ``magnetar-standalone``: one ``magnetar standalone`` process (RocksDB metadata, one disk bookie, the
  broker; E/W/A 1/1/1) on a free HTTP port and a free bookie port, data in the run's temp dir.
* ``magnetar-cluster``: ZooKeeper, three ``magnetar bookie`` processes (disk storage) and one
  ``magnetar broker`` with E=3 W=3 A=2: ``magnetar dev-cluster`` when the installed Magnetar has it, else
  the same processes started here (ZooKeeper through ``tests/fixtures/zookeeper.py``).

Clients: :class:`magnetar.admin.perf.ws_client.WsClient` (trio), as ``magnetar perf produce|consume`` use it.

* Pulsar's WebSocket API (``magnetar-standalone``, ``magnetar-cluster``): a producer sends JSON frames
  ``{"payload": base64, "context": seq}`` (up to ``BATCH_MAX`` per socket write) and matches the acks by
  context; the consumer (Exclusive subscription from the earliest message, receiverQueueSize 1000)
  acknowledges every message, 50 acks per socket write. base64 makes the JSON frame a third larger.
* Magnetar's binary subprotocol ``magnetar.v1`` (``magnetar-standalone-binary``, ``magnetar-cluster-binary``):
  each ``send_many`` of the harness is one SEND frame (stored as one batch entry) answered by one RECEIPT;
  the consumer (same subscription settings) acknowledges each MESSAGES frame with one ACK_RANGE.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
from bench.comparison.processes import ServerFailed, ServerProcess, free_port, kill_leftovers, run_tool
from bench.comparison.system import AckSink, PayloadSink, Publisher

from magnetar.bookkeeper.runtime.http.ws_client import WsClient
from magnetar.broker.wire.magnetar_v1 import (
    SUBPROTOCOL,
    FrameType,
    encode_ack_ranges,
    encode_send,
    parse_messages,
    parse_receipt,
)

READY_TIMEOUT_S = 120.0
ACKS_PER_WRITE = 50
RECEIVER_QUEUE_SIZE = 1000
CLOSE_TIMEOUT_S = 5.0
QUORUMS = ("3", "3", "2")
"""E, W, A of the cluster."""


async def _close(client: WsClient) -> None:
    """Close even when the phase was cancelled: ``WsClient.aclose`` sends its close frame first, and a
    cancellation there would skip closing the socket (ResourceWarning), so it runs shielded (bounded)."""
    with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
        await client.aclose()


def _magnetar(*args: str) -> list[str]:
    return [sys.executable, "-m", "magnetar.admin.cli", "--log-level", "WARNING", *args]


def _has_dev_cluster() -> bool:
    from magnetar.admin.cli import main as cli

    commands: Any = getattr(cli, "COMMANDS", {})
    return "dev-cluster" in commands


class _WsPublisher:
    def __init__(self, client: WsClient) -> None:
        self.client = client

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        await self.client.send_many(
            [
                f'{{"payload":"{base64.b64encode(payload).decode()}","context":"{seq}"}}'
                for seq, payload in messages
            ]
        )


class _BinaryPublisher:
    """One SEND frame per ``send_many``; the frame's sequence numbers wait for its RECEIPT."""

    def __init__(self, client: WsClient) -> None:
        self.client = client
        self.pending: dict[int, list[int]] = {}
        self._next_request = 0

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        self._next_request += 1
        self.pending[self._next_request] = [seq for seq, _ in messages]
        await self.client.send_bytes(encode_send(self._next_request, [payload for _, payload in messages]))

    async def receipts(self, on_ack: AckSink) -> None:
        while True:
            frame = await self.client.receive_message()
            if not isinstance(frame, bytes):
                continue
            receipt = parse_receipt(frame)
            for seq in self.pending.pop(receipt.request_id, ()):
                on_ack(seq, receipt.ok)


class MagnetarSystem:
    backend = "trio"

    def __init__(self, name: str, cluster: bool, binary: bool = False) -> None:
        self.name = name
        self.cluster = cluster
        self.binary = binary
        self.consume_mode = (
            "binary consumer (magnetar.v1), Exclusive subscription, one range ack per MESSAGES frame"
            if binary
            else "WebSocket consumer, Exclusive subscription, every message acknowledged (50 per write)"
        )
        self.durability = "fsync on 2 of 3 bookies" if cluster else "fsync (1 bookie)"
        self.durability_detail = (
            "ack after the entry is in the journal, fdatasynced, on 2 of the 3 bookies it is written to "
            "(E=3 W=3 A=2; group commit)"
            if cluster
            else "ack after the entry is in its one bookie's journal, fdatasynced (group commit)"
        )
        self.ws_url = ""
        self.broker_url = ""
        """The broker's ``pulsar://`` URL (its binary port), from its ready document."""
        self._processes: list[ServerProcess] = []
        self._zookeeper: Any = None
        self._components: list[int] = []
        """Pids of what ``magnetar dev-cluster`` started (its ready document), killed should it outlive it."""
        self.how = ""

    def available(self) -> str | None:
        if self.cluster and not _has_dev_cluster() and not Path("/usr/share/java/zookeeper.jar").is_file():
            return "ZooKeeper from Debian is not installed (make zookeeper)"
        return None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        commit = run_tool(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"])
        transport = f"binary subprotocol {SUBPROTOCOL}" if self.binary else "Pulsar WebSocket API"
        return {"magnetar": f"{version('magnetar')} (git {commit})", "transport": transport}

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, workdir: Path) -> None:
        if not self.cluster:
            self._start_standalone(workdir)
        elif _has_dev_cluster():
            self._start_dev_cluster(workdir)
        else:
            self._start_processes(workdir)
        print(f"  [{self.name}] ready at {self.ws_url} ({self.how})", flush=True)

    def _spawn(self, name: str, args: list[str], workdir: Path) -> dict[str, Any]:
        process = ServerProcess(name, _magnetar(*args), workdir / f"{name}.log", ready_line=True)
        self._processes.append(process)
        process.start()
        return process.read_ready_line(READY_TIMEOUT_S)

    def _start_standalone(self, workdir: Path) -> None:
        ready = self._spawn(
            "magnetar-standalone",
            ["standalone", "--data-dir", str(workdir / "data"), "--http-port", "0",
             "--bookie-port", str(free_port()), "--bookies", "1"],
            workdir,
        )  # fmt: skip
        self.ws_url = f"ws://127.0.0.1:{ready['port']}"
        self.broker_url = str(ready["brokerUrl"])
        self.how = "magnetar standalone, 1 disk bookie, E/W/A 1/1/1"

    def _start_dev_cluster(self, workdir: Path) -> None:
        e, w, a = QUORUMS
        ready = self._spawn(
            "magnetar-dev-cluster",
            ["dev-cluster", "--zk", "1", "--bookies", "3", "--brokers", "1",
             "--data-dir", str(workdir / "dev-cluster"),
             "--ensemble-size", e, "--write-quorum", w, "--ack-quorum", a, "--bookie-storage", "disk"],
            workdir,
        )  # fmt: skip
        self.ws_url = str(ready["brokers"][0]["wsUrl"]).rstrip("/")
        self.broker_url = str(ready["brokers"][0]["brokerUrl"])
        kinds = ("zookeepers", "bookies", "brokers")
        self._components = [int(component["pid"]) for kind in kinds for component in ready.get(kind, [])]
        self.how = f"magnetar dev-cluster: ZooKeeper, 3 disk bookies, 1 broker, E/W/A {e}/{w}/{a}"

    def _start_processes(self, workdir: Path) -> None:
        from fixtures.zookeeper import ZooKeeperServer

        self._zookeeper = ZooKeeperServer(workdir / "zk")
        self._zookeeper.start()
        metadata_url = self._zookeeper.url("/bench")
        for index in range(3):
            self._spawn(
                f"bookie-{index}",
                ["bookie", "--metadata-url", metadata_url, "--data-dir", str(workdir / f"bookie-{index}"),
                 "--bind", "127.0.0.1", "--advertised-address", "127.0.0.1", "--port", "0"],
                workdir,
            )  # fmt: skip
        e, w, a = QUORUMS
        ready = self._spawn(
            "broker",
            ["broker", "--metadata-url", metadata_url, "--http-port", "0", "--bind", "127.0.0.1",
             "--ensemble-size", e, "--write-quorum", w, "--ack-quorum", a],
            workdir,
        )  # fmt: skip
        self.ws_url = f"ws://127.0.0.1:{ready['port']}"
        self.broker_url = str(ready["brokerUrl"])
        self.how = f"ZooKeeper + 3 magnetar bookie (disk) + 1 magnetar broker, E/W/A {e}/{w}/{a}"

    def pids(self) -> list[int]:
        """Of the processes started here and not yet stopped (ZooKeeper's included)."""
        pids = [process.pid for process in self._processes]
        if self._zookeeper is not None and self._zookeeper.pid is not None:
            pids.append(self._zookeeper.pid)
        return pids

    def stop(self) -> None:
        errors = []
        for process in reversed(self._processes):
            try:
                process.stop()
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{process.name}: {exc}")
        self._processes.clear()
        kill_leftovers(self.name, self._components)
        self._components = []
        if self._zookeeper is not None:
            self._zookeeper.stop()
            self._zookeeper = None
        if errors:
            raise ServerFailed("; ".join(errors))

    # -- clients -----------------------------------------------------------------------------------------

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        url = f"{self.ws_url}/ws/v2/producer/persistent/public/default/{topic}"
        if self.binary:
            async with self._binary_publisher(url, on_ack) as publisher:
                yield publisher
            return
        client = await WsClient.connect(url)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._acks, client, on_ack)
                yield _WsPublisher(client)
                tasks.cancel_scope.cancel()
        finally:
            await _close(client)

    @asynccontextmanager
    async def _binary_publisher(self, url: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        client = await WsClient.connect(url, subprotocols=[SUBPROTOCOL])
        try:
            publisher = _BinaryPublisher(client)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(publisher.receipts, on_ack)
                yield publisher
                tasks.cancel_scope.cancel()
        finally:
            await _close(client)

    @staticmethod
    async def _acks(client: WsClient, on_ack: AckSink) -> None:
        while True:
            ack = orjson.loads(await client.receive())
            context = ack.get("context")
            if context is not None:
                on_ack(int(context), ack.get("result") == "ok")

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        url = (
            f"{self.ws_url}/ws/v2/consumer/persistent/public/default/{topic}/bench"
            f"?subscriptionType=Exclusive&receiverQueueSize={RECEIVER_QUEUE_SIZE}"
            "&subscriptionInitialPosition=Earliest"
        )
        if self.binary:
            await self._consume_binary(url, on_payload, task_status)
            return
        client = await WsClient.connect(url)
        try:
            task_status.started()
            acks: list[str] = []
            more = True
            while more:
                message = orjson.loads(await client.receive())
                message_id = message.get("messageId")
                if message_id is None:
                    continue
                more = on_payload(base64.b64decode(message["payload"]))
                acks.append(f'{{"messageId":"{message_id}"}}')
                if len(acks) >= ACKS_PER_WRITE or not more:
                    await client.send_many(acks)
                    acks = []
        finally:
            await _close(client)

    @staticmethod
    async def _consume_binary(
        url: str, on_payload: PayloadSink, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        client = await WsClient.connect(url, subprotocols=[SUBPROTOCOL])
        try:
            task_status.started()
            more = True
            while more:
                frame = await client.receive_message()
                if not isinstance(frame, bytes) or frame[0] != FrameType.MESSAGES:
                    continue
                messages = parse_messages(frame)
                for message in messages:
                    more = on_payload(message.payload)
                    if not more:
                        break
                first, last = messages[0].message_id, messages[-1].message_id
                await client.send_bytes(encode_ack_ranges([(first[0], first[1:4], last[1:4])]))
        finally:
            await _close(client)
