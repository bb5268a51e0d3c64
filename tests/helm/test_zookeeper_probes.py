"""The chart's ZooKeeper configuration and probe commands, run against a real ZooKeeper server.

The chart's ZooKeeper pods start `zkServer.sh start-foreground` on a zoo.cfg rendered from values, and probe
the server with bash one-liners that speak four-letter words over /dev/tcp: readiness sends `srvr` and
wants a `Mode:` line (only a server inside a quorum has one), liveness sends `ruok` and wants `imok`
(answered whether or not there is a quorum). Without a cluster, the closest real check is to run
Debian's ZooKeeper (3.8, the same server code as the image's 3.9 for these commands) on the rendered
zoo.cfg, with only the paths and ports moved to this machine, and to run the rendered probe commands
against it.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

pytestmark = pytest.mark.zookeeper

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "magnetar"
ZOOKEEPER_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
CLIENT_PORT = 2181
STARTUP_DEADLINE_S = 30.0
PROBE_TIMEOUT_S = 10.0
# Debian's ZooKeeper has no Prometheus metrics provider; the image has one.
VALUES: dict[str, Any] = {"zookeeper": {"metrics": {"enabled": False}}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def render_zookeeper(overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The rendered zoo.cfg and ZooKeeper container of the chart with these values."""
    values = {"zookeeper": {**VALUES["zookeeper"], **overrides}}
    with helm_python.Chart.load(CHART_DIR) as chart:
        manifests = chart.render(values, name="demo", namespace="mq")
    config_map = yaml.safe_load(manifests["magnetar/templates/zookeeper/configmap.yaml"])
    statefulset = yaml.safe_load(manifests["magnetar/templates/zookeeper/statefulset.yaml"])
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return config_map["data"]["zoo.cfg"], container


def localize(zoo_cfg: str, data_dir: Path, client_port: int, server_ports: list[tuple[int, int]]) -> str:
    """Move the rendered configuration's paths and ports onto this machine's loopback; change nothing else."""
    text = zoo_cfg.replace("dataDir=/data\n", f"dataDir={data_dir}\n")
    # In a pod every interface is the pod's own; here the quorum ports stay on loopback.
    text = text.replace("quorumListenOnAllIPs=true\n", "quorumListenOnAllIPs=false\n")
    text = text.replace("dataLogDir=/data/txlog\n", f"dataLogDir={data_dir / 'txlog'}\n")
    text = text.replace(
        f"clientPort={CLIENT_PORT}\n", f"clientPort={client_port}\nclientPortAddress=127.0.0.1\n"
    )
    servers = re.findall(r"^(server\.\d+)=.*$", text, re.MULTILINE)
    assert len(servers) == len(server_ports)
    for server, (quorum_port, election_port) in zip(servers, server_ports, strict=True):
        text = re.sub(
            rf"^{re.escape(server)}=.*$",
            f"{server}=127.0.0.1:{quorum_port}:{election_port}",
            text,
            flags=re.MULTILINE,
        )
    return text


TIMED_OUT = 124
"""The exit status reported for a probe that did not finish in time (as coreutils' ``timeout`` reports)."""


def probe(container: dict[str, Any], kind: str, client_port: int) -> int:
    """Run the container's probe command, aimed at this machine's port, and return its exit status."""
    command = list(container[kind]["exec"]["command"])
    rendered_target = f"/dev/tcp/127.0.0.1/{CLIENT_PORT} "
    assert rendered_target in command[-1]
    command[-1] = command[-1].replace(rendered_target, f"/dev/tcp/127.0.0.1/{client_port} ")
    try:
        return subprocess.run(command, check=False, capture_output=True, timeout=PROBE_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        # A probe past its timeout is a failed probe, as the kubelet counts it (a server that accepts the
        # connection while it is still starting may not answer ``srvr`` yet); the caller's deadline decides.
        return TIMED_OUT


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def start_zookeeper(tmp_path: Path) -> Iterator[Any]:
    """Start one server (myid 1) on a localized zoo.cfg; every started server is stopped by pid."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(zoo_cfg: str, data_dir: Path) -> subprocess.Popen[bytes]:
        data_dir.mkdir()
        # What the container's start command writes: the pod ordinal (0) + 1.
        (data_dir / "myid").write_text("1\n")
        config = tmp_path / "zoo.cfg"
        config.write_text(zoo_cfg)
        log = (tmp_path / "zookeeper.log").open("wb")
        process = subprocess.Popen(
            [
                "java",
                "-cp",
                ZOOKEEPER_CLASSPATH,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(config),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        processes.append(process)
        return process

    try:
        yield start
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def test_single_server_config_starts_and_both_probes_pass(tmp_path: Path, start_zookeeper: Any) -> None:
    zoo_cfg, container = render_zookeeper({"replicas": 1})
    port = free_port()
    assert probe(container, "livenessProbe", port) != 0  # nothing listens yet
    process = start_zookeeper(
        localize(zoo_cfg, tmp_path / "data", port, [(free_port(), free_port())]), tmp_path / "data"
    )
    wait_until(lambda: probe(container, "readinessProbe", port) == 0, "the readiness probe (srvr Mode)")
    assert probe(container, "livenessProbe", port) == 0
    assert process.poll() is None


def test_server_without_quorum_is_alive_but_not_ready(tmp_path: Path, start_zookeeper: Any) -> None:
    # Server 1 of a 3-server ensemble whose peers never start: it runs, answers `ruok`, but serves nothing.
    zoo_cfg, container = render_zookeeper({"replicas": 3})
    port = free_port()
    ports = [(free_port(), free_port()) for _ in range(3)]
    process = start_zookeeper(localize(zoo_cfg, tmp_path / "data", port, ports), tmp_path / "data")
    wait_until(lambda: probe(container, "livenessProbe", port) == 0, "the liveness probe (ruok)")
    assert probe(container, "readinessProbe", port) != 0
    assert process.poll() is None
