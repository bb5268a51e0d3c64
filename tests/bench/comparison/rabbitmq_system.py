"""RabbitMQ streams (Debian's ``rabbitmq-server``) through the stream protocol.

Server (docs/upstream.md, peer systems): ``/usr/lib/rabbitmq/bin/rabbitmq-server`` with ``RABBITMQ_*``
variables putting the node name, the ports, the mnesia/log/plugin dirs and the config into the run's temp dir;
the only plugin is ``rabbitmq_stream``; AMQP, stream and Erlang distribution listeners are on 127.0.0.1 (the
distribution port through ``-kernel inet_dist_use_interface {127,0,0,1}``). ``epmd`` is started here first, on
a port of its own bound to 127.0.0.1, so the node uses it instead of spawning a daemon nobody owns; it is
stopped by pid afterwards. ``HOME`` is the temp dir, so the Erlang cookie is created there. Stop:
``rabbitmqctl stop``, then the server's process group by pid if it is still there.

An acknowledged message (publish confirm) is written by the stream's leader, not fsynced (one node: no
replicas either). Publisher: rstream's ``send_batch`` (one publish frame per batch the harness hands over)
with the publish confirm callback. Consumer: rstream subscription from the first offset, the offset stored
once at the end (streams have no per-message acknowledgement).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from bench.comparison.processes import ServerFailed, ServerProcess, free_port, run_tool, wait_for_port
from bench.comparison.system import AckSink, PayloadSink, Publisher

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
USER = "guest"
SUBSCRIBER = "bench"
INITIAL_CREDIT = 10
"""Chunks the server may push before the client grants more (rstream grants one per chunk delivered)."""
LOOPBACK_ONLY = "-kernel inet_dist_use_interface {127,0,0,1}"


class _StreamPublisher:
    def __init__(self, producer: Any, topic: str, on_ack: AckSink) -> None:
        self.producer = producer
        self.topic = topic
        self.on_ack = on_ack

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        from rstream import RawMessage

        # Our own publishing ids: a confirm can be handled before send_batch returns its ids.
        await self.producer.send_batch(
            self.topic,
            [RawMessage(payload, publishing_id=seq) for seq, payload in messages],
            on_publish_confirm=self._confirmed,
        )

    def _confirmed(self, status: Any) -> None:
        self.on_ack(status.message_id, bool(status.is_confirmed))


class RabbitMqSystem:
    backend = "asyncio"
    durability = "page cache"
    durability_detail = "stream leader's write to its segment file, no fsync (one node, no replicas)"
    consume_mode = "stream subscription from the first offset, offset stored at the end"

    def __init__(self, name: str) -> None:
        self.name = name
        self.stream_port = 0
        self.how = ""
        self._env: dict[str, str] = {}
        self._node = ""
        self._epmd: ServerProcess | None = None
        self._server: ServerProcess | None = None

    def available(self) -> str | None:
        if not (RABBITMQ_BIN / "rabbitmq-server").is_file() or shutil.which("epmd") is None:
            return "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
        try:
            import rstream  # noqa: F401
        except ImportError as exc:
            return f"client missing ({exc}); pip install -e '.[bench]'"
        return None

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        package = run_tool(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"])
        erlang = run_tool(["dpkg-query", "-W", "-f", "${Version}", "erlang-base"])
        return {
            "rabbitmq-server": f"{package} (Erlang {erlang})",
            "client": f"rstream {version('rstream')}",
        }

    def start(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        epmd_port, amqp_port, dist_port = free_port(), free_port(), free_port()
        self.stream_port = free_port()
        self._node = f"bench-{uuid.uuid4().hex[:8]}@localhost"
        config = workdir / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.1 = 127.0.0.1:{amqp_port}\n"
            f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream_port}\n"
            f"stream.advertised_host = 127.0.0.1\nstream.advertised_port = {self.stream_port}\n"
            "log.console = false\nlog.file.level = warning\n"
        )
        (workdir / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        self._env = {
            "HOME": str(workdir),
            "RABBITMQ_NODENAME": self._node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(workdir / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": LOOPBACK_ONLY,
            "RABBITMQ_CTL_ERL_ARGS": LOOPBACK_ONLY,
        }
        self._epmd = ServerProcess(
            f"{self.name}-epmd",
            ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
            workdir / "epmd.log",
            env=self._env,
        )
        self._epmd.start()
        wait_for_port(self._epmd, epmd_port, START_TIMEOUT_S)
        self._server = ServerProcess(
            self.name, [str(RABBITMQ_BIN / "rabbitmq-server")], workdir / "rabbitmq.log", env=self._env
        )
        self._server.start()
        wait_for_port(self._server, self.stream_port, START_TIMEOUT_S)
        self.how = "rabbitmq-server (one node, rabbitmq_stream plugin, own epmd), streams"

    def stop(self) -> None:
        if self._server is not None:
            if self._server.running():
                ctl = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self._node, "stop"]
                print(f"  [{self.name}] {run_tool(ctl, STOP_TIMEOUT_S, self._env)}", flush=True)
            try:
                self._server.stop()
            finally:
                self._server = None
        if self._epmd is not None:
            try:
                self._epmd.stop()
            except (OSError, subprocess.SubprocessError) as exc:
                raise ServerFailed(f"epmd: {exc}") from exc
            finally:
                self._epmd = None

    def _client_args(self) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.stream_port, "username": USER, "password": USER}

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        from rstream import Producer

        producer = Producer(**self._client_args())
        await producer.start()
        try:
            await producer.create_stream(topic, exists_ok=True)
            yield _StreamPublisher(producer, topic, on_ack)
        finally:
            await producer.close()

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        consumer = Consumer(**self._client_args())
        done = anyio.Event()
        last_offset = -1

        def deliver(message: Any, context: Any) -> None:
            nonlocal last_offset
            if done.is_set():
                return
            last_offset = context.offset
            if not on_payload(bytes(message)):
                done.set()

        await consumer.start()
        try:
            await consumer.create_stream(topic, exists_ok=True)
            await consumer.subscribe(
                topic,
                deliver,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                subscriber_name=SUBSCRIBER,
                initial_credit=INITIAL_CREDIT,
            )
            task_status.started()
            await done.wait()
            await consumer.store_offset(topic, SUBSCRIBER, last_offset)
        finally:
            await consumer.close()
