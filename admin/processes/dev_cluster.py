"""A real local cluster of processes: ZooKeeper (an ensemble when asked), bookies and brokers.

``magnetar dev-cluster`` runs it until Ctrl-C; the failure suite and benchmarks compose it in-process with
:func:`open_dev_cluster`, which also gives them the handles to kill, pause and restart each component::

    async with open_dev_cluster(DevClusterSpec(data_dir=tmp_path, bookies=3, brokers=2)) as cluster:
        cluster.broker_urls                       # ["http://127.0.0.1:PORT", ...]
        await cluster.kill("broker-0")            # SIGKILL
        await cluster.restart("broker-0")         # same ports and data, waits until ready

Start-up order: the ZooKeeper servers (all at once; an ensemble serves once it has a quorum), the cluster
metadata (``magnetar initialize-cluster-metadata``: cluster, tenant ``public``, namespace ``public/default``,
created if missing), the bookies (all at once), the brokers (all at once). Any component that fails to
start stops everything started so far (by pid), and the error carries that component's log. Every
component writes its log under ``DATA_DIR/logs``.

Ports are chosen free at the first start and recorded in ``DATA_DIR/dev-cluster.json``: a bookie's id is its
address, and the ledgers written before a restart name it, so a component keeps its ports across restarts of
itself and of the whole dev cluster (a broker keeps its URL, too). The data (ZooKeeper's, the bookies'
journals and entry logs) stays in ``DATA_DIR``, so a dev cluster started again on the same directory has its
topics back.

Authentication (``authentication=True``, ``magnetar dev-cluster --authentication-enabled``): the dev cluster
makes a token key and two tokens under ``DATA_DIR/security`` (kept across restarts, mode 0600): ``admin``, a
superuser of the brokers, for clients (``adminTokenFile`` in the ready document), and ``broker``, which the
brokers present to the bookies (``bookkeeper_auth_token``). The bookies admit only these two roles
(``auth_allowed_roles=broker``, ``super_user_roles=admin``): a tenant's token is refused on the bookie ports.

Network faults (the failure suite): ``bookie_advertised_addresses`` makes bookie *i* listen on 127.0.0.1
but register as ``<address>:<port>`` (any 127.0.0.0/8 address is this machine), where a fault-injecting proxy
can listen; :attr:`DevCluster.metadata_urls` can point a component at a proxy in front of ZooKeeper before it
starts. Both default to direct connections. ``broker_addresses`` makes broker *i* bind and advertise an
address of its own (default 127.0.0.1 for all), as brokers on separate hosts or pods are.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import trio

from magnetar.admin.processes import zookeeper as zk
from magnetar.admin.processes.supervisor import ManagedProcess, ProcessStartError, magnetar_command
from magnetar.bookkeeper.runtime.auth.keys import create_secret_key, secret_key
from magnetar.bookkeeper.runtime.auth.tokens import create_token

log = logging.getLogger("magnetar.dev_cluster")

STATE_FILE = "dev-cluster.json"
CHROOT = "/magnetar"
SECURITY_DIR = "security"
ADMIN_ROLE = "admin"
"""The superuser role of a dev cluster with authentication; its token is ``DATA_DIR/security/admin.token``."""
BROKER_ROLE = "broker"
"""The role the brokers present to the bookies, the only other role the bookies admit."""


@dataclass(frozen=True, slots=True)
class DevClusterSpec:
    data_dir: Path
    zookeepers: int = 1
    bookies: int = 3
    brokers: int = 2
    ensemble_size: int | None = None
    """Bookies per ledger; default 1 for one bookie, else 2 (as the Helm chart: one spare bookie with 3)."""
    write_quorum: int | None = None
    ack_quorum: int | None = None
    cluster: str = "dev"
    bookie_storage: Literal["disk", "memory"] = "disk"
    session_timeout_ms: int = 10_000
    """ZooKeeper session timeout of bookies and brokers: how long a dead one holds its registration/topics."""
    bookie_env: Mapping[str, str] = field(default_factory=dict)
    """Extra ``MAGNETAR_*`` settings of every bookie (e.g. disk thresholds)."""
    broker_env: Mapping[str, str] = field(default_factory=dict)
    authentication: bool = False
    """Token authentication on brokers and bookies, with keys and tokens made under ``DATA_DIR/security``."""
    bookie_advertised_addresses: Sequence[str] = ()
    """Address bookie *i* registers under (default 127.0.0.1); it always listens on 127.0.0.1."""
    broker_addresses: Sequence[str] = ()
    """Address broker *i* binds and advertises (default 127.0.0.1)."""
    log_level: str | None = None
    zookeeper: zk.ZooKeeperSettings = field(default_factory=lambda: zk.ZooKeeperSettings(tick_time_ms=500))
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 20.0

    def __post_init__(self) -> None:
        for name in ("zookeepers", "bookies", "brokers"):
            if not 1 <= getattr(self, name) <= 9:
                raise ValueError(f"{name} must be between 1 and 9")
        e, w, a = self.quorums()
        if not 1 <= a <= w <= e <= self.bookies:
            raise ValueError(f"need 1 <= ack_quorum <= write_quorum <= ensemble_size <= bookies: {e}/{w}/{a}")

    def quorums(self) -> tuple[int, int, int]:
        default = 1 if self.bookies == 1 else 2
        e = self.ensemble_size or default
        w = self.write_quorum or min(e, default)
        a = self.ack_quorum or min(w, default)
        return e, w, a


@dataclass
class Ports:
    """The ports of every component, kept in ``DATA_DIR/dev-cluster.json`` across restarts."""

    zookeeper: list[dict[str, int]] = field(default_factory=list)
    bookies: list[dict[str, int]] = field(default_factory=list)
    brokers: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def load_or_choose(cls, spec: DevClusterSpec) -> Ports:
        path = spec.data_dir / STATE_FILE
        ports = cls()
        if path.is_file():
            document = json.loads(path.read_text())
            ports = cls(
                document.get("zookeeper", []), document.get("bookies", []), document.get("brokers", [])
            )
        taken = {
            port
            for group in (ports.zookeeper, ports.bookies, ports.brokers)
            for e in group
            for port in e.values()
        }
        pick = partial(_free_port, taken)
        ports.zookeeper = ports.zookeeper[: spec.zookeepers]
        while len(ports.zookeeper) < spec.zookeepers:
            ports.zookeeper.append({"client": pick(), "peer": pick(), "election": pick()})
        while len(ports.bookies) < spec.bookies:
            ports.bookies.append({"bookie": pick(), "http": pick()})
        while len(ports.brokers) < spec.brokers:
            ports.brokers.append({"http": pick()})
        for broker in ports.brokers:  # a state file written before brokers spoke the binary protocol
            if "binary" not in broker:
                broker["binary"] = pick()
        return ports

    def save(self, data_dir: Path) -> None:
        document = {"zookeeper": self.zookeeper, "bookies": self.bookies, "brokers": self.brokers}
        temporary = data_dir / (STATE_FILE + ".tmp")
        temporary.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(temporary, data_dir / STATE_FILE)


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


class DevCluster:
    def __init__(
        self,
        spec: DevClusterSpec,
        nursery: trio.Nursery,
        on_unexpected_exit: Callable[[ManagedProcess], None] | None = None,
    ) -> None:
        self.spec = spec
        self.data_dir = spec.data_dir.resolve()
        self.ports = Ports.load_or_choose(spec)
        self.zk_nodes = [
            zk.ZooKeeperNode(
                i + 1, self.data_dir / f"zookeeper-{i + 1}", p["client"], p["peer"], p["election"]
            )
            for i, p in enumerate(self.ports.zookeeper)
        ]
        self.metadata_url = f"zk:{zk.connect_string(self.zk_nodes)}{CHROOT}"
        self.metadata_urls: dict[str, str] = {}
        """Per-component metadata URL (e.g. through a proxy); components not listed use ``metadata_url``."""
        self.processes: dict[str, ManagedProcess] = {}
        self._on_unexpected_exit = on_unexpected_exit or _log_unexpected_exit
        self._nursery = nursery
        """Runs the watchers that report components exiting unexpectedly."""

    # -- names and addresses ---------------------------------------------------------------------------

    @property
    def zookeeper_names(self) -> list[str]:
        return [f"zookeeper-{node.server_id}" for node in self.zk_nodes]

    @property
    def bookie_names(self) -> list[str]:
        return [f"bookie-{i}" for i in range(self.spec.bookies)]

    @property
    def broker_names(self) -> list[str]:
        return [f"broker-{i}" for i in range(self.spec.brokers)]

    @property
    def broker_urls(self) -> list[str]:
        ports = self.ports.brokers[: self.spec.brokers]
        return [f"http://{self.broker_address(i)}:{p['http']}" for i, p in enumerate(ports)]

    def bookie_address(self, index: int) -> str:
        addresses = self.spec.bookie_advertised_addresses
        return addresses[index] if index < len(addresses) else "127.0.0.1"

    def broker_address(self, index: int) -> str:
        addresses = self.spec.broker_addresses
        return addresses[index] if index < len(addresses) else "127.0.0.1"

    def bookie_id(self, index: int) -> str:
        return f"{self.bookie_address(index)}:{self.ports.bookies[index]['bookie']}"

    def broker_index(self, http_url: str) -> int:
        """Which broker ``http_url`` (as lookups and redirects name it) belongs to."""
        return self.broker_urls.index(http_url.rstrip("/"))

    def process(self, name: str) -> ManagedProcess:
        return self.processes[name]

    def ready_document(self) -> dict[str, Any]:
        return {
            "event": "dev-cluster-ready",
            "metadataUrl": self.metadata_url,
            "zookeeper": zk.connect_string(self.zk_nodes),
            "zookeepers": [
                {"name": name, "clientPort": node.client_port, "pid": self.processes[name].pid}
                for name, node in zip(self.zookeeper_names, self.zk_nodes, strict=True)
            ],
            "bookies": [
                {
                    "name": name,
                    "bookieId": self.bookie_id(i),
                    "httpPort": self.ports.bookies[i]["http"],
                    "pid": self.processes[name].pid,
                }
                for i, name in enumerate(self.bookie_names)
            ],
            "brokers": [
                {
                    "name": name,
                    "httpUrl": url,
                    "wsUrl": url.replace("http://", "ws://"),
                    "brokerUrl": f"pulsar://{self.broker_address(i)}:{self.ports.brokers[i]['binary']}",
                    "pid": self.processes[name].pid,
                }
                for i, (name, url) in enumerate(zip(self.broker_names, self.broker_urls, strict=True))
            ],
            "dataDir": str(self.data_dir),
            "logDir": str(self.data_dir / "logs"),
            **({"adminTokenFile": str(self.admin_token_file)} if self.spec.authentication else {}),
        }

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / SECURITY_DIR / f"{ADMIN_ROLE}.token"

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every component: ZooKeeper, the cluster metadata, bookies, brokers."""
        await self.start_zookeepers()
        await self.initialize_metadata()
        await self.start_bookies()
        await self.start_brokers()

    async def start_zookeepers(self) -> None:
        self._prepare()
        for node in self.zk_nodes:
            zk.write_config(node, self.zk_nodes, self.spec.zookeeper)
            self.processes[f"zookeeper-{node.server_id}"] = self._zookeeper_process(node)
        await self._start_all(self.zookeeper_names)

    async def initialize_metadata(self) -> None:
        """The cluster, tenant ``public`` and namespace ``public/default``: ``magnetar
        initialize-cluster-metadata`` run as the Helm chart's init job runs it (idempotent)."""
        command = magnetar_command(
            "initialize-cluster-metadata", "--metadata-url", self.metadata_url,
            "--cluster", self.spec.cluster, "--web-service-url", self.broker_urls[0],
        )  # fmt: skip
        log_path = self.data_dir / "logs" / "initialize-cluster-metadata.log"
        with log_path.open("ab") as log_file, trio.fail_after(self.spec.ready_timeout_s):
            result = await trio.run_process(
                command, stdout=log_file, stderr=log_file, env=self._env({}), check=False
            )
        if result.returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            raise ProcessStartError(f"initialize-cluster-metadata exited with {result.returncode}:\n{tail}")
        log.info(
            "cluster metadata ready: cluster %s, tenant public, namespace public/default", self.spec.cluster
        )

    async def start_bookies(self, names: Sequence[str] | None = None) -> None:
        """Start the bookies (``names``: only those, e.g. to add a spare later with another call)."""
        self._prepare()
        chosen = list(self.bookie_names if names is None else names)
        for index, name in enumerate(self.bookie_names):
            if name in chosen:
                self.processes[name] = self._bookie_process(index)
        await self._start_all(chosen)

    async def start_brokers(self) -> None:
        self._prepare()
        for index, name in enumerate(self.broker_names):
            self.processes[name] = self._broker_process(index)
        await self._start_all(self.broker_names)

    async def stop(self) -> None:
        """Stop everything by pid: brokers, then bookies, then ZooKeeper (each group at once)."""
        with trio.CancelScope(shield=True):
            for group in (self.broker_names, self.bookie_names, self.zookeeper_names):
                async with trio.open_nursery() as nursery:
                    for name in group:
                        if name in self.processes:
                            nursery.start_soon(self._stop_one, name)

    async def _stop_one(self, name: str) -> None:
        process = self.processes[name]
        code = await process.stop()
        if code is not None:
            log.info("%s stopped (exit code %s)", name, code)

    # -- faults (the failure suite) -----------------------------------------------------------------

    async def kill(self, name: str) -> None:
        """SIGKILL one component."""
        process = self.processes[name]
        log.info("SIGKILL %s (pid %s)", name, process.pid)
        await process.kill()

    def pause(self, name: str) -> None:
        log.info("SIGSTOP %s (pid %s)", name, self.processes[name].pid)
        self.processes[name].pause()

    def resume(self, name: str) -> None:
        log.info("SIGCONT %s (pid %s)", name, self.processes[name].pid)
        self.processes[name].resume()

    async def restart(self, name: str) -> dict[str, Any]:
        """Start a stopped or killed component again (same ports and data) and wait until it is ready."""
        process = self.processes[name]
        if process.running:
            await process.stop()
        ready = await process.start()
        self._watch(process)
        log.info("%s restarted (pid %s)", name, process.pid)
        return ready

    # -- internals ---------------------------------------------------------------------------------

    def _prepare(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.ports.save(self.data_dir)
        if self.spec.authentication:
            self._prepare_security()

    def _prepare_security(self) -> None:
        """The token key (made once, kept) and the admin's and brokers' tokens, all mode 0600."""
        directory = self.data_dir / SECURITY_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        key_file = directory / "secret.key"
        if not key_file.exists():
            _write_private(key_file, create_secret_key())
        key = secret_key(key_file.read_bytes())
        for role in (ADMIN_ROLE, BROKER_ROLE):
            token_file = directory / f"{role}.token"
            if not token_file.exists():
                _write_private(token_file, create_token(key, role).encode("ascii"))

    def _security_env(self, kind: Literal["bookie", "broker"]) -> dict[str, str]:
        if not self.spec.authentication:
            return {}
        directory = self.data_dir / SECURITY_DIR
        env = {
            "MAGNETAR_AUTHENTICATION_ENABLED": "true",
            "MAGNETAR_TOKEN_SECRET_KEY": (directory / "secret.key").as_uri(),
            "MAGNETAR_SUPER_USER_ROLES": ADMIN_ROLE,
        }
        if kind == "bookie":
            env["MAGNETAR_AUTH_ALLOWED_ROLES"] = BROKER_ROLE
        else:
            env["MAGNETAR_BOOKKEEPER_AUTH_TOKEN"] = (directory / f"{BROKER_ROLE}.token").as_uri()
        return env

    async def _start_all(self, names: list[str]) -> None:
        async with trio.open_nursery() as starting:
            for name in names:
                starting.start_soon(self._start_one, name)

    async def _start_one(self, name: str) -> None:
        process = self.processes[name]
        await process.start()
        self._watch(process)
        log.info("%s ready (pid %s)", name, process.pid)

    def _watch(self, process: ManagedProcess) -> None:
        self._nursery.start_soon(process.watch, self._on_unexpected_exit)

    def _env(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = {
            **os.environ,
            "MAGNETAR_METADATA_SESSION_TIMEOUT_MS": str(self.spec.session_timeout_ms),
            **extra,
        }
        env.pop("MAGNETAR_CONFIG", None)  # the dev cluster's own settings must not be overridden by a file
        if self.spec.log_level:
            env["MAGNETAR_LOG_LEVEL"] = self.spec.log_level
        return env

    def _managed(
        self, name: str, command: list[str], env: dict[str, str] | None = None, **kw: Any
    ) -> ManagedProcess:
        return ManagedProcess(
            name,
            command,
            self.data_dir / "logs" / f"{name}.log",
            env=env,
            ready_timeout_s=self.spec.ready_timeout_s,
            stop_timeout_s=self.spec.stop_timeout_s,
            **kw,
        )

    def _zookeeper_process(self, node: zk.ZooKeeperNode) -> ManagedProcess:
        command = zk.zookeeper_command(node, self.spec.zookeeper, ensemble_size=len(self.zk_nodes))

        async def serving() -> bool:
            return await trio.to_thread.run_sync(zk.is_serving, node.client_port)

        return self._managed(f"zookeeper-{node.server_id}", command, cwd=node.base_dir, probe=serving)

    def _bookie_process(self, index: int) -> ManagedProcess:
        name = f"bookie-{index}"
        ports = self.ports.bookies[index]
        command = magnetar_command(
            "bookie", "--metadata-url", self.metadata_urls.get(name, self.metadata_url),
            "--data-dir", str(self.data_dir / name), "--storage", self.spec.bookie_storage,
            "--bind", "127.0.0.1", "--advertised-address", self.bookie_address(index),
            "--port", str(ports["bookie"]), "--http-port", str(ports["http"]),
        )  # fmt: skip
        return self._managed(
            name, command, self._env({**self._security_env("bookie"), **self.spec.bookie_env})
        )

    def _broker_process(self, index: int) -> ManagedProcess:
        name = f"broker-{index}"
        e, w, a = self.spec.quorums()
        command = magnetar_command(
            "broker", "--metadata-url", self.metadata_urls.get(name, self.metadata_url),
            "--http-port", str(self.ports.brokers[index]["http"]),
            "--broker-service-port", str(self.ports.brokers[index]["binary"]),
            "--bind", self.broker_address(index),
            "--advertised-address", self.broker_address(index), "--cluster", self.spec.cluster,
            "--ensemble-size", str(e), "--write-quorum", str(w), "--ack-quorum", str(a),
        )  # fmt: skip
        return self._managed(
            name, command, self._env({**self._security_env("broker"), **self.spec.broker_env})
        )


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file readable by its owner only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _log_unexpected_exit(process: ManagedProcess) -> None:
    log.error("%s (pid %s) exited with code %s; its log: %s", process.name, process.pid, process.returncode,
              process.log_path)  # fmt: skip


@asynccontextmanager
async def open_dev_cluster(
    spec: DevClusterSpec,
    *,
    on_unexpected_exit: Callable[[ManagedProcess], None] | None = None,
    start: bool = True,
) -> AsyncIterator[DevCluster]:
    """A running dev cluster for the block; every process it started is stopped (by pid) when it exits.

    ``start=False`` yields it unstarted: the caller starts it step by step (``start_zookeepers``,
    ``initialize_metadata``, ``start_bookies``, ``start_brokers``), e.g. to put proxies in between.
    """
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    async with trio.open_nursery() as nursery:
        cluster = DevCluster(spec, nursery, on_unexpected_exit)
        try:
            if start:
                await cluster.start()
            yield cluster
        finally:
            await cluster.stop()
            nursery.cancel_scope.cancel()
