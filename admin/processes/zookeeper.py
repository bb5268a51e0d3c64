"""Running Debian's ZooKeeper: the configuration, the command line and the readiness check.

What ``magnetar dev-cluster`` and the test fixtures (``tests/fixtures/zookeeper.py``) share. A server is
``java -cp CONF_DIR:zookeeper.jar:slf4j-simple.jar org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg``
(standalone) or ``...QuorumPeerMain zoo.cfg`` (a member of an ensemble), with:

* ``clientPortAddress=127.0.0.1`` and its own client port; no AdminServer (it would take port 8080);
* the four-letter words ``ruok,srvr,stat,mntr`` whitelisted: ``ruok`` answers ``imok`` as soon as the
  listener is up, but sessions are refused until the server serves, which ``srvr`` shows by reporting its
  ``Mode:`` (``standalone``, ``leader`` or ``follower``: for an ensemble, only once a quorum has formed);
* an ensemble of N servers on this machine: ``server.<id>=127.0.0.1:<peer port>:<election port>`` lines and
  a ``myid`` file in each server's data directory (ZooKeeper's own "replicated mode" recipe).

Everything here is plain functions over :class:`ZooKeeperNode` (no process handling): the caller starts the
command its own way (``subprocess`` in the fixtures, trio in the dev cluster) and polls :func:`is_serving`.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
"""zookeeper.jar's manifest Class-Path names the rest (jute, netty, slf4j-api, ...); slf4j-simple logs."""

STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr"


class ZooKeeperMissingError(RuntimeError):
    """Java or Debian's ZooKeeper jars are not installed (``make zookeeper`` installs them)."""


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    tick_time_ms: int = 200
    """ZooKeeper's time unit; sessions may last from 2 to 20 ticks unless ``max_session_timeout_ms`` says."""
    max_session_timeout_ms: int = 60_000
    init_limit_ticks: int = 20
    """Ticks a follower may take to connect to and sync with the leader (ensembles only)."""
    sync_limit_ticks: int = 10
    """Ticks a follower may lag behind the leader before it is dropped (ensembles only)."""
    heap_mb: int = 256


@dataclass(frozen=True, slots=True)
class ZooKeeperNode:
    """One server: its id in the ensemble (1-based), its directory and its ports."""

    server_id: int
    base_dir: Path
    client_port: int
    peer_port: int = 0
    election_port: int = 0

    @property
    def conf_dir(self) -> Path:
        return self.base_dir / "conf"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.client_port}"


def connect_string(nodes: Sequence[ZooKeeperNode]) -> str:
    """``127.0.0.1:P1,127.0.0.1:P2,...``: what a client (kazoo) is given."""
    return ",".join(node.connect_string for node in nodes)


def zoo_cfg(node: ZooKeeperNode, ensemble: Sequence[ZooKeeperNode], settings: ZooKeeperSettings) -> str:
    """The text of ``zoo.cfg`` for ``node``; ``ensemble`` lists every server (just ``node`` when alone)."""
    config: dict[str, object] = {
        "tickTime": settings.tick_time_ms,
        "dataDir": node.data_dir,
        "clientPort": node.client_port,
        "clientPortAddress": "127.0.0.1",
        "maxSessionTimeout": settings.max_session_timeout_ms,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": FOUR_LETTER_WORDS,
    }
    if len(ensemble) > 1:
        config["initLimit"] = settings.init_limit_ticks
        config["syncLimit"] = settings.sync_limit_ticks
        for member in ensemble:
            config[f"server.{member.server_id}"] = f"127.0.0.1:{member.peer_port}:{member.election_port}"
    return "".join(f"{key}={value}\n" for key, value in config.items())


def write_config(node: ZooKeeperNode, ensemble: Sequence[ZooKeeperNode], settings: ZooKeeperSettings) -> Path:
    """Write ``conf/zoo.cfg`` (and ``data/myid`` in an ensemble); returns the path of ``zoo.cfg``."""
    node.conf_dir.mkdir(parents=True, exist_ok=True)
    node.data_dir.mkdir(parents=True, exist_ok=True)
    if len(ensemble) > 1:
        (node.data_dir / "myid").write_text(f"{node.server_id}\n")
    path = node.conf_dir / "zoo.cfg"
    path.write_text(zoo_cfg(node, ensemble, settings))
    return path


def zookeeper_command(
    node: ZooKeeperNode, settings: ZooKeeperSettings, *, ensemble_size: int = 1
) -> list[str]:
    """The server's command line; raises :class:`ZooKeeperMissingError` when ZooKeeper is not installed."""
    java = shutil.which("java")
    missing = [jar for jar in ZOOKEEPER_JARS if not Path(jar).is_file()]
    if java is None or missing:
        raise ZooKeeperMissingError(
            f"ZooKeeper from Debian is needed (java: {java}, missing: {missing}); run `make zookeeper`"
        )
    classpath = ":".join([str(node.conf_dir), *ZOOKEEPER_JARS])
    main_class = QUORUM_MAIN if ensemble_size > 1 else STANDALONE_MAIN
    return [java, f"-Xmx{settings.heap_mb}m", "-cp", classpath, main_class, str(node.conf_dir / "zoo.cfg")]


def four_letter_word(port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ``stat``, ``mntr``); the answer (blocking)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as connection:
        connection.sendall(word.encode())
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def is_serving(port: int, timeout_s: float = 1.0) -> bool:
    """Whether the server on ``port`` serves sessions: ``imok`` to ``ruok`` and a ``Mode:`` in ``srvr``."""
    try:
        return four_letter_word(port, "ruok", timeout_s) == "imok" and "Mode:" in four_letter_word(
            port, "srvr", timeout_s
        )
    except OSError:
        return False


def server_mode(port: int, timeout_s: float = 1.0) -> str | None:
    """``standalone``, ``leader`` or ``follower`` from ``srvr``; None when the server does not serve."""
    try:
        answer = four_letter_word(port, "srvr", timeout_s)
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.removeprefix("Mode:").strip()
    return None
