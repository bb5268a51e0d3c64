"""What the chart renders, run as real processes on this machine.

Each test renders the chart, takes a container's arguments and its ``MAGNETAR_*`` environment (ConfigMap,
then ``env``) and runs ``magnetar`` with them, with only what a pod has and this machine has not moved here
(:class:`~fixtures.helm_chart.LocalPod`: ZooKeeper's address, ports, the volumes, the files of mounted
Secrets). The probes are the rendered probes' requests, sent to the ports they name. Without a cluster this is
the closest check that the pods would start, find each other and pass their probes:

* the start-up order: a bookie's wait for ZooKeeper; a broker that creates nothing; the init job writing the
  cluster's service URL and bundle count, which the broker's wait then sees, with the bookies it needs;
* a bookie whose journal has a small volume of its own (a tmpfs of the rendered size): writing several times
  the volume through it keeps it writable; filled by something else it turns read-only and not ready, stays
  alive, and writers go on;
* the secure mode (``values-dev.yaml`` + ``values-secure.yaml``): ZooKeeper on the rendered ``zoo.cfg`` with
  TLS, the init job, a bookie and a broker with tokens, TLS and authenticated metrics pass every rendered
  probe, while ``/metrics`` - what the probes asked before - answers 401;
* the secure mode with ``autorecovery.mode=deployment``: the rendered ``magnetar autorecovery`` reaches
  ZooKeeper over TLS and the bookies with the brokers' token and its certificate, and heals a lost bookie's
  ledger; its liveness probe passes while its ``/metrics`` and REST API want a superuser's token;
* the format Job re-identifying a bookie whose volumes were lost.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import helm_python
import httpx
import pytest
import trio
import websocket
from cryptography.hazmat.primitives import serialization
from fixtures.auth import TlsFiles, TokenKeys
from fixtures.disk import small_filesystem
from fixtures.helm_chart import (
    DASHBOARD_FILES,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    LocalPod,
    Rendered,
    container_environment,
    container_of,
    dashboard_metric_names,
    exported_metric_names,
    free_port,
    merged,
    render,
)
from fixtures.processes import MagnetarProcess, ProcessFailedError, ProcessGroup
from fixtures.zookeeper import ZooKeeperServer

from magnetar.admin.processes.autorecovery_wiring import AutoRecoveryProcessSettings
from magnetar.admin.processes.config import load_settings
from magnetar.admin.processes.zookeeper import QUORUM_MAIN
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store
from magnetar.bookkeeper.metadata.bookies import list_bookies, read_cookie
from magnetar.bookkeeper.runtime.auth.keys import read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context
from magnetar.broker.policies.store import PolicyStore

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper, pytest.mark.slow]

MIB = 1024 * 1024
BROKER_SERVICE_URL = f"http://{RELEASE}-magnetar-broker.{NAMESPACE}.svc.cluster.local:8080"
MAGNETAR = [sys.executable, "-m", "magnetar.admin.cli"]
NETTY_JARS = ("netty-codec", "netty-resolver", "netty-transport-native-unix-common")
"""Debian's zookeeper.jar manifest omits the Netty jars the Netty connection factory (TLS) needs."""
DEADLINE_S = 60.0


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # another process's state: there is no event to wait on


def start(group: ProcessGroup, name: str, args: list[str], env: dict[str, str]) -> MagnetarProcess:
    """A ``magnetar`` process with this environment (and none of this process's ``MAGNETAR_*``)."""
    process = MagnetarProcess(name, args, group.log_dir, LocalPod.process_environment(env))
    group.processes.append(process)
    process.start(timeout_s=DEADLINE_S)
    return process


def run(
    args: list[str], env: dict[str, str], timeout_s: float = DEADLINE_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MAGNETAR, *args],
        env=LocalPod.process_environment(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


class Background:
    """A ``magnetar`` command that runs until it decides to exit (a waiting init container)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [*MAGNETAR, *args],
                env=LocalPod.process_environment(env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def background(tmp_path: Path) -> Iterator[Callable[[str, list[str], dict[str, str]], Background]]:
    started: list[Background] = []

    def launch(name: str, args: list[str], env: dict[str, str]) -> Background:
        command = Background(args, env, tmp_path / f"{name}.log")
        started.append(command)
        return command

    yield launch
    for command in started:
        command.stop()


def probe_status(container: dict[str, Any], kind: str, ports: dict[str, int], **options: Any) -> int:
    """Send the request a rendered HTTP probe sends (its path, to the local port of the port it names, with
    its timeout: Kubernetes' default of 1 s when it names none)."""
    probe = container[kind]["httpGet"]
    url = f"http://127.0.0.1:{ports[probe['port']]}{probe['path']}"
    try:
        return httpx.get(url, timeout=container[kind].get("timeoutSeconds", 1), **options).status_code
    except httpx.TransportError:
        return 0


def bookie_pod(tmp_path: Path, name: str, metadata_url: str, **secrets: Path) -> LocalPod:
    return LocalPod(
        metadata_url,
        volumes={
            "/var/lib/magnetar/journal": tmp_path / name / "journal",
            "/var/lib/magnetar/ledgers": tmp_path / name / "ledgers",
        },
        ports={"MAGNETAR_PORT": 0, "MAGNETAR_HTTP_PORT": 0},
        secrets=secrets,
    )


def bookie_env(rendered: Rendered, pod: LocalPod, ordinal: int = 0) -> dict[str, str]:
    fields = {"POD_NAME": f"{RELEASE}-magnetar-bookie-{ordinal}", "POD_NAMESPACE": NAMESPACE}
    return pod.localize(container_environment(rendered, "bookie", fields))


async def read_cluster(url: str, cluster: str, **settings: Any) -> tuple[Any, Any]:
    async with open_metadata_store(url, settings.get("settings")) as store:
        policies = PolicyStore(store)
        return await policies.get_cluster(cluster), await policies.get_namespace("public/default")


# --- start-up order and the init job --------------------------------------------------------------------


def test_bookies_wait_for_zookeeper_instead_of_crash_looping(
    chart: helm_python.Chart, tmp_path: Path, magnetar_processes: ProcessGroup, background: Any
) -> None:
    rendered = render(chart, {"startupWait": {"checkIntervalSeconds": 1, "operationTimeoutSeconds": 2}})
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper")
    zookeeper.port = free_port()  # known before the server runs: the wait starts first
    url = f"zk:127.0.0.1:{zookeeper.port}"
    wait = container_of(rendered, "bookie-wait")
    waiting = background(
        "wait-for-zookeeper",
        wait["args"],
        LocalPod(url).localize(container_environment(rendered, "bookie-wait")),
    )
    try:
        wait_for(
            lambda: "connection refused: nothing listens on that port" in waiting.text(),
            "the wait's log line",
        )
        assert waiting.process.poll() is None  # waiting, not crashing
        assert re.search(
            rf"waiting: metadata store {re.escape(url)} unreachable .*next check in 1s", waiting.text()
        )
        zookeeper.start()
        assert waiting.process.wait(timeout=DEADLINE_S) == 0
        assert "metadata ready at" in waiting.text()
        bookie = start(
            magnetar_processes, "bookie", ["bookie"], bookie_env(rendered, bookie_pod(tmp_path, "b0", url))
        )
        assert bookie.ready["event"] == "bookie-ready"
    finally:
        magnetar_processes.stop_all()
        zookeeper.stop()


def test_the_wait_gives_up_after_its_timeout(chart: helm_python.Chart, tmp_path: Path) -> None:
    values = {"startupWait": {"timeoutSeconds": 4, "checkIntervalSeconds": 1, "operationTimeoutSeconds": 1}}
    rendered = render(chart, values)
    url = f"zk:127.0.0.1:{free_port()}"
    wait = container_of(rendered, "broker-wait")
    done = run(wait["args"], LocalPod(url).localize(container_environment(rendered, "broker-wait")))
    assert done.returncode == 1
    assert f"error: gave up after 4s: metadata store {url} unreachable" in done.stderr


def test_the_init_job_is_the_one_place_that_initializes_the_cluster(
    chart: helm_python.Chart,
    zookeeper_url: str,
    tmp_path: Path,
    magnetar_processes: ProcessGroup,
    background: Any,
) -> None:
    values = {"defaultNumberOfNamespaceBundles": 16, "startupWait": {"checkIntervalSeconds": 1}}
    rendered = render(chart, values)
    pod = LocalPod(zookeeper_url)
    broker_wait = container_of(rendered, "broker-wait")
    waiting = background(
        "wait-for-cluster-metadata",
        broker_wait["args"],
        pod.localize(container_environment(rendered, "broker-wait")),
    )
    broker_pod = LocalPod(zookeeper_url, ports={"MAGNETAR_HTTP_PORT": 0, "MAGNETAR_BROKER_SERVICE_PORT": 0})
    broker_env = broker_pod.localize(container_environment(rendered, "broker", {"POD_IP": "127.0.0.1"}))

    # A broker that starts before the init job serves, and initializes nothing: it once wrote its own address
    # as the cluster's serviceUrl, and no bundle count.
    broker = start(magnetar_processes, "early-broker", ["broker"], broker_env)
    broker_container = container_of(rendered, "broker")
    assert probe_status(broker_container, "readinessProbe", {"http": broker.ready["port"]}) == 200
    cluster, namespace = trio.run(read_cluster, zookeeper_url, "magnetar")
    assert (cluster, namespace) == (None, None)
    assert waiting.process.poll() is None
    wait_for(
        lambda: "cluster 'magnetar' is not initialized yet" in waiting.text(), "the broker's wait to say why"
    )

    # The init job's command, with its arguments and environment.
    job = container_of(rendered, "init")
    done = run(job["args"], pod.localize(container_environment(rendered, "init")))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "cluster": "magnetar",
        "tenant": "public",
        "namespace": "public/default",
    }
    cluster, namespace = trio.run(read_cluster, zookeeper_url, "magnetar")
    assert cluster.serviceUrl == BROKER_SERVICE_URL
    assert namespace.bundles.numBundles == 16
    assert len(namespace.bundles.boundaries) == 17

    # The broker's wait now waits for its bookies (replication.ensembleSize of them), then lets it start.
    wait_for(
        lambda: "0 of 2 bookies needed are registered and writable" in waiting.text(), "the wait for bookies"
    )
    for ordinal in range(2):
        env = bookie_env(rendered, bookie_pod(tmp_path, f"bookie{ordinal}", zookeeper_url), ordinal)
        start(magnetar_processes, f"bookie{ordinal}", ["bookie"], env)
    assert waiting.process.wait(timeout=DEADLINE_S) == 0

    # A broker (re)started with the rendered environment leaves the init job's metadata as it is.
    broker.stop()
    broker = start(magnetar_processes, "broker", ["broker"], broker_env)
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert probe_status(broker_container, kind, {"http": broker.ready["port"]}) == 200, kind
    with httpx.Client(base_url=f"http://127.0.0.1:{broker.ready['port']}", timeout=10) as http:
        assert http.get("/admin/v2/clusters/magnetar").json()["serviceUrl"] == BROKER_SERVICE_URL
        assert http.get("/admin/v2/namespaces/public/default/bundles").json()["numBundles"] == 16


# --- a bookie on a small journal volume -----------------------------------------------------------------

JOURNAL_VOLUME_BYTES = 128 * MIB
SMALL_JOURNAL: dict[str, Any] = {
    "replication": {"ensembleSize": 1, "writeQuorum": 1, "ackQuorum": 1},
    "bookie": {
        "journal": {"size": "128Mi"},
        "config": {
            "disk_check_interval_ms": 200,
            "storage_engine": {
                "write_cache_bytes_max": 48 * MIB,
                "journal_preallocate_bytes": 4 * MIB,
                "disk_free_bytes_min": 4 * MIB,
                "disk_check_interval_ms": 200,
            },
        },
    },
}
"""A 128 MiB journal volume, with a write cache and free-space floor to match (the chart sizes the journal's
files from all three: 2 files of 31 MiB)."""
PAYLOAD_BYTES = 256 * 1024


def journal_used_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def test_a_small_journal_volume_fills_and_the_bookie_turns_read_only_instead_of_failing_adds(
    chart: helm_python.Chart, zookeeper_url: str, tmp_path: Path, magnetar_processes: ProcessGroup
) -> None:
    rendered = render(chart, SMALL_JOURNAL)
    data = rendered.config_map_data(f"{RELEASE}-magnetar-bookie")
    assert data["MAGNETAR_STORAGE_ENGINE__JOURNAL_FILE_BYTES_MAX"] == str(31 * MIB)
    small = bookie_pod(tmp_path, "small", zookeeper_url)
    journal = small.volumes["/var/lib/magnetar/journal"]
    with small_filesystem(journal, JOURNAL_VOLUME_BYTES) as mounted:
        if not mounted:
            pytest.skip("mounting a tmpfs needs root: this test needs a journal volume of the rendered size")
        try:
            victim = start(magnetar_processes, "small-journal", ["bookie"], bookie_env(rendered, small, 0))
            other_pod = bookie_pod(tmp_path, "other", zookeeper_url)
            other = start(magnetar_processes, "other", ["bookie"], bookie_env(rendered, other_pod, 1))
            written = SmallJournal(zookeeper_url, victim, other, container_of(rendered, "bookie"), journal)
            trio.run(written.fill_and_recover)
            log = Path(victim.log_path).read_text()
        finally:
            magnetar_processes.stop_all()  # before the volume goes
    # Three times the volume went through its journal, and it never ran short of space.
    assert written.victim_bytes >= 3 * JOURNAL_VOLUME_BYTES
    assert written.peak_bytes <= JOURNAL_VOLUME_BYTES * 0.9
    assert "disk_free_bytes_min" not in log
    assert log.count("is now READ-ONLY") == 1  # the filler's, not its own journal's


class SmallJournal:
    """Writes through the bookie on the small journal volume, then fills the volume with something else."""

    def __init__(
        self,
        url: str,
        victim: MagnetarProcess,
        other: MagnetarProcess,
        container: dict[str, Any],
        journal: Path,
    ) -> None:
        self.url = url
        self.victim_id, self.other_id = victim.ready["bookieId"], other.ready["bookieId"]
        self.container = container
        self.ports = {"http": victim.ready["httpPort"]}
        self.journal = journal
        self.victim_bytes = 0
        self.peak_bytes = 0

    async def fill_and_recover(self) -> None:
        settings = ClientSettings(ensemble_size=1, write_quorum=1, ack_quorum=1, bookie_quarantine_ms=0)
        async with (
            open_metadata_store(self.url) as metadata,
            open_tcp_transport() as transport,
            open_bookkeeper(metadata, transport, settings) as bk,
        ):
            await self.write_three_volumes(bk, metadata)
            await self.fill_with_something_else(bk, metadata)

    async def ledger_on_the_victim(self, bk: Any, metadata: Any) -> Any:
        lists = await list_bookies(metadata)
        assert self.victim_id in lists.writable, f"the small-journal bookie is not writable: {lists}"
        for _ in range(100):
            ledger = await bk.create_ledger(password=b"pw")
            if ledger.metadata.last_ensemble[1] == (self.victim_id,):
                return ledger
            await ledger.close()
        raise AssertionError("no ledger on the small-journal bookie in 100 tries")

    async def write_three_volumes(self, bk: Any, metadata: Any) -> None:
        payload = os.urandom(PAYLOAD_BYTES)
        ledger = await self.ledger_on_the_victim(bk, metadata)
        while self.victim_bytes < 3 * JOURNAL_VOLUME_BYTES:
            await ledger.add_entry(payload)
            if ledger.metadata.last_ensemble[1] == (self.victim_id,):
                self.victim_bytes += len(payload)
            else:
                # The bookie answered "busy" while its write cache flushed (a writer that never pauses
                # outruns the checkpoints), and the writer replaced it: go back to it with a new ledger.
                await ledger.close()
                ledger = await self.ledger_on_the_victim(bk, metadata)
            self.peak_bytes = max(self.peak_bytes, journal_used_bytes(self.journal))
            await trio.sleep(0.002)  # a writer with a life: room for the checkpoints
            assert self.victim_id not in (await list_bookies(metadata)).readonly
        assert probe_status(self.container, "readinessProbe", self.ports) == 200
        await ledger.close()

    async def fill_with_something_else(self, bk: Any, metadata: Any) -> None:
        """The volume filled by something else: read-only and not ready, alive, writers go on; then back."""
        ledger = await self.ledger_on_the_victim(bk, metadata)
        stat = os.statvfs(self.journal)
        filler = self.journal / "filler"
        # Past the bookie's read-only threshold (95 % used), short of its floor (disk_free_bytes_min, 4 MiB
        # here) below which it would refuse every add
        with filler.open("wb") as out:
            out.write(b"\0" * (stat.f_bavail * stat.f_frsize - 5 * MIB))
        with trio.fail_after(DEADLINE_S):
            while self.victim_id not in (await list_bookies(metadata)).readonly:
                await trio.sleep(0.05)
        assert probe_status(self.container, "readinessProbe", self.ports) == 503
        assert probe_status(self.container, "livenessProbe", self.ports) == 200
        assert probe_status(self.container, "startupProbe", self.ports) == 200
        for index in range(40):
            assert await ledger.add_entry(b"after %d" % index) == index  # not one add fails
        assert ledger.metadata.last_ensemble[1] == (self.other_id,)
        filler.unlink()
        with trio.fail_after(DEADLINE_S):
            while self.victim_id not in (await list_bookies(metadata)).writable:
                await trio.sleep(0.05)
        assert probe_status(self.container, "readinessProbe", self.ports) == 200
        await ledger.close()


# --- the secure mode ------------------------------------------------------------------------------------

SECURE = merged(SCENARIOS["dev-secure"], {"zookeeper": {"metrics": {"enabled": False}}})
"""values-dev.yaml + values-secure.yaml (without ZooKeeper metrics: Debian's server lacks their provider)."""


def write_secrets(tmp_path: Path, token_keys: TokenKeys, tls_files: TlsFiles) -> dict[str, Path]:
    """The Secrets values-secure.yaml names, as files (a certificate as cert-manager writes it: tls.crt,
    tls.key in PKCS#8, ca.crt; one for every component, valid for 127.0.0.1)."""
    secrets = {
        name: tmp_path / "secrets" / name for name in ("tls", "token-key", "broker-token", "ledger-password")
    }
    for directory in secrets.values():
        directory.mkdir(parents=True)
    key = serialization.load_pem_private_key(tls_files.server_key.read_bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (secrets["tls"] / "tls.key").write_bytes(pkcs8)
    (secrets["tls"] / "tls.crt").write_bytes(tls_files.server_cert.read_bytes())
    (secrets["tls"] / "ca.crt").write_bytes(tls_files.ca_cert.read_bytes())
    (secrets["token-key"] / "secret.key").write_bytes(token_keys.secret)
    (secrets["broker-token"] / "broker.token").write_text(token_keys.token("broker"))
    (secrets["ledger-password"] / "password").write_text(base64.b64encode(os.urandom(24)).decode())
    return secrets


class RenderedZooKeeper(ZooKeeperServer):
    """Debian's ZooKeeper on the chart's rendered zoo.cfg (TLS included), with only paths and ports moved
    here, started as the container starts it: its key store is the Secret's key and certificate together."""

    def __init__(self, base_dir: Path, zoo_cfg: str, container: dict[str, Any], tls: Path) -> None:
        super().__init__(base_dir)
        self.zoo_cfg = zoo_cfg
        self.container = container
        self.tls = tls
        self.secure_port = free_port()

    def _command(self) -> list[str]:
        command = super()._command()
        classpath = command.index("-cp") + 1
        command[classpath] += "".join(f":/usr/share/java/{jar}.jar" for jar in NETTY_JARS)
        command[classpath + 1] = QUORUM_MAIN  # what the image's zkServer.sh runs
        return command

    def _write_config(self) -> None:
        super()._write_config()  # the data directory and myid of the fixture's layout
        script = self.container["args"][0]
        assert "cat /tls/tls.key /tls/tls.crt > /conf/keystore.pem" in script
        conf = self.base_dir / "conf"
        (conf / "keystore.pem").write_bytes(
            (self.tls / "tls.key").read_bytes() + (self.tls / "tls.crt").read_bytes()
        )
        text = self.zoo_cfg
        for rendered, local in {
            "dataDir=/data\n": f"dataDir={self.base_dir / 'data'}\n",
            "dataLogDir=/data/txlog\n": f"dataLogDir={self.base_dir / 'data' / 'txlog'}\n",
            "clientPort=2181\n": f"clientPort={self.port}\n",
            "secureClientPort=2281\n": f"secureClientPort={self.secure_port}\n",
            "ssl.keyStore.location=/conf/keystore.pem\n": f"ssl.keyStore.location={conf / 'keystore.pem'}\n",
            "ssl.trustStore.location=/tls/ca.crt\n": f"ssl.trustStore.location={self.tls / 'ca.crt'}\n",
            "quorumListenOnAllIPs=true\n": "quorumListenOnAllIPs=false\n",
        }.items():
            assert rendered in text, rendered
            text = text.replace(rendered, local)
        text = re.sub(
            r"^server\.1=.*$", f"server.1=127.0.0.1:{free_port()}:{free_port()}", text, flags=re.MULTILINE
        )
        (self.base_dir / "data").mkdir(exist_ok=True)
        (self.base_dir / "data" / "myid").write_text("1\n")
        (conf / "zoo.cfg").write_text(text)


def test_secure_mode_processes_pass_every_rendered_probe_with_authenticated_metrics(
    chart: helm_python.Chart,
    tmp_path: Path,
    token_keys: TokenKeys,
    tls_files: TlsFiles,
    magnetar_processes: ProcessGroup,
    ws_connect: Any,
) -> None:
    rendered = render(chart, SECURE)
    secrets = write_secrets(tmp_path, token_keys, tls_files)
    zoo_cfg = rendered.config_map_data(f"{RELEASE}-magnetar-zookeeper")["zoo.cfg"]
    zookeeper_container = container_of_zookeeper(rendered)
    zookeeper = RenderedZooKeeper(tmp_path / "zookeeper", zoo_cfg, zookeeper_container, secrets["tls"])
    zookeeper.start()
    try:
        run_secure_cluster(
            rendered, zookeeper, secrets, tmp_path, token_keys, tls_files, magnetar_processes, ws_connect
        )
    finally:
        magnetar_processes.stop_all()
        zookeeper.stop()


def container_of_zookeeper(rendered: Rendered) -> dict[str, Any]:
    statefulset = rendered.get("StatefulSet", "zookeeper")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return container


def zookeeper_probe(container: dict[str, Any], kind: str, port: int) -> int:
    command = list(container[kind]["exec"]["command"])
    command[-1] = command[-1].replace("/dev/tcp/127.0.0.1/2181 ", f"/dev/tcp/127.0.0.1/{port} ")
    try:
        return subprocess.run(command, check=False, capture_output=True, timeout=10).returncode
    except subprocess.TimeoutExpired:
        return 124


def run_secure_cluster(
    rendered: Rendered,
    zookeeper: RenderedZooKeeper,
    secrets: dict[str, Path],
    tmp_path: Path,
    token_keys: TokenKeys,
    tls_files: TlsFiles,
    group: ProcessGroup,
    ws_connect: Any,
) -> None:
    url = f"zk:127.0.0.1:{zookeeper.secure_port}"
    zk_container = container_of_zookeeper(rendered)
    # ZooKeeper's probes speak to the plain port, which serves only 127.0.0.1 with TLS on.
    wait_for(
        lambda: zookeeper_probe(zk_container, "readinessProbe", zookeeper.port) == 0, "ZooKeeper's readiness"
    )
    assert zookeeper_probe(zk_container, "livenessProbe", zookeeper.port) == 0

    # The init job, over TLS to ZooKeeper with the brokers' certificate.
    pod = LocalPod(url, secrets=secrets)
    done = run(container_of(rendered, "init")["args"], pod.localize(container_environment(rendered, "init")))
    assert done.returncode == 0, done.stderr

    # A bookie: tokens (brokers' role and superusers only), TLS with client certificates, ZooKeeper over TLS.
    bookie_env_ = bookie_env(rendered, bookie_pod(tmp_path, "bookie0", url, **secrets))
    assert bookie_env_["MAGNETAR_AUTHENTICATE_METRICS_ENDPOINT"] == "true"
    bookie = start(group, "bookie", ["bookie"], bookie_env_)
    done = run(
        container_of(rendered, "broker-wait")["args"],
        pod.localize(container_environment(rendered, "broker-wait")),
    )
    assert done.returncode == 0, done.stderr

    # A broker: authentication, authenticated /metrics, HTTPS, TLS and a token to the bookie, ledger password.
    broker_pod = LocalPod(
        url,
        secrets=secrets,
        ports={
            "MAGNETAR_HTTP_PORT": 0,
            "MAGNETAR_HTTP_PORT_TLS": 0,
            "MAGNETAR_BROKER_SERVICE_PORT": 0,
            "MAGNETAR_BROKER_SERVICE_PORT_TLS": 0,
        },
    )
    broker = start(
        group,
        "broker",
        ["broker"],
        broker_pod.localize(container_environment(rendered, "broker", {"POD_IP": "127.0.0.1"})),
    )
    admin = token_keys.token("admin")
    bearer = {"Authorization": f"Bearer {admin}"}

    broker_container, bookie_container = container_of(rendered, "broker"), container_of(rendered, "bookie")
    broker_ports, bookie_ports = {"http": broker.ready["port"]}, {"http": bookie.ready["httpPort"]}
    for container, ports in ((broker_container, broker_ports), (bookie_container, bookie_ports)):
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe_status(container, kind, ports) == 200, (container["name"], kind)
    # What the probes asked before: the kubelet would have restarted both every few minutes.
    for port in (broker.ready["port"], bookie.ready["httpPort"]):
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", headers=bearer, timeout=10).status_code == 200

    # A message through the broker to the TLS bookie, and the cluster's URLs over HTTPS.
    topic = "persistent/public/default/secure-chart"
    producer = ws_connect(
        f"ws://127.0.0.1:{broker.ready['port']}/ws/v2/producer/{topic}",
        header=[f"Authorization: Bearer {admin}"],
    )
    producer.send(json.dumps({"payload": base64.b64encode(b"through TLS").decode()}))
    assert json.loads(producer.recv())["result"] == "ok"
    https = f"https://127.0.0.1:{broker.ready['tlsPort']}"
    trust = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    with httpx.Client(base_url=https, headers=bearer, verify=trust, timeout=10) as http:
        cluster = http.get("/admin/v2/clusters/magnetar").json()
    assert cluster["serviceUrl"] == BROKER_SERVICE_URL
    assert cluster["serviceUrlTls"] == f"https://{RELEASE}-magnetar-broker.{NAMESPACE}.svc.cluster.local:8443"

    # A second broker as rendered: a session opened on the broker that does not own its topic is served
    # through the owner for an ordinary role - the chart's brokers' role is no superuser, and the proxy
    # forwards the client's own token, so the owner authorizes the client.
    second = start(
        group,
        "broker-2",
        ["broker"],
        broker_pod.localize(container_environment(rendered, "broker", {"POD_IP": "127.0.0.1"})),
    )
    plain = f"http://127.0.0.1:{broker.ready['port']}"
    granted = httpx.post(
        f"{plain}/admin/v2/namespaces/public/default/permissions/app",
        json=["produce", "consume"],
        headers=bearer,
        timeout=10,
    )
    assert granted.status_code == 204, granted.text
    proxied = "persistent/public/default/secure-chart-proxied"
    lookup = httpx.get(f"{plain}/lookup/v2/topic/{proxied}", headers=bearer, timeout=10)
    while lookup.status_code == 307:  # to the broker the leader chose (the token kept: same machine)
        lookup = httpx.get(lookup.headers["location"], headers=bearer, timeout=10)
    assert lookup.status_code == 200, lookup.text
    owner_port = int(lookup.json()["httpUrl"].rsplit(":", 1)[1])
    (non_owner,) = {broker.ready["port"], second.ready["port"]} - {owner_port}
    app = token_keys.token("app")
    session = ws_connect(
        f"ws://127.0.0.1:{non_owner}/ws/v2/producer/{proxied}",
        header=[f"Authorization: Bearer {app}"],
        redirect_limit=0,
    )
    session.send(json.dumps({"payload": base64.b64encode(b"proxied").decode()}))
    assert json.loads(session.recv())["result"] == "ok"
    stranger = token_keys.token("stranger")
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        ws_connect(
            f"ws://127.0.0.1:{non_owner}/ws/v2/producer/{proxied}",
            header=[f"Authorization: Bearer {stranger}"],
            redirect_limit=0,
        )
    assert refused.value.status_code == 403

    # The dashboards name only metrics these processes export (Pulsar's, BookKeeper's and Magnetar's own).
    exported = set()
    for port in (broker.ready["port"], bookie.ready["httpPort"]):
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=bearer, timeout=10).text
        exported |= exported_metric_names(page)
    for name in DASHBOARD_FILES:
        named = dashboard_metric_names(name)
        assert named, name
        assert named - exported == set(), name


def test_secure_mode_autorecovery_deployment_heals_a_lost_bookie_over_tls_with_tokens(
    chart: helm_python.Chart,
    tmp_path: Path,
    token_keys: TokenKeys,
    tls_files: TlsFiles,
    magnetar_processes: ProcessGroup,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = merged(SECURE, {"autorecovery": {"mode": "deployment", "lostBookieRecoveryDelaySeconds": 0}})
    rendered = render(chart, values)
    secrets = write_secrets(tmp_path, token_keys, tls_files)
    zoo_cfg = rendered.config_map_data(f"{RELEASE}-magnetar-zookeeper")["zoo.cfg"]
    zookeeper = RenderedZooKeeper(
        tmp_path / "zookeeper", zoo_cfg, container_of_zookeeper(rendered), secrets["tls"]
    )
    zookeeper.start()
    try:
        url = f"zk:127.0.0.1:{zookeeper.secure_port}"
        pod = LocalPod(url, secrets=secrets)
        done = run(
            container_of(rendered, "init")["args"], pod.localize(container_environment(rendered, "init"))
        )
        assert done.returncode == 0, done.stderr
        bookies = {}
        for ordinal in range(3):  # bookies of mode "deployment": no daemon of their own
            env = bookie_env(rendered, bookie_pod(tmp_path, f"bookie{ordinal}", url, **secrets), ordinal)
            assert env["MAGNETAR_AUTORECOVERY__ENABLED"] == "false"
            bookie = start(magnetar_processes, f"bookie{ordinal}", ["bookie"], env)
            bookies[bookie.ready["bookieId"]] = bookie

        # Its init container's wait for ZooKeeper, over TLS with the daemons' certificate.
        wait = container_of(rendered, "autorecovery-wait")
        done = run(wait["args"], pod.localize(container_environment(rendered, "autorecovery-wait")))
        assert done.returncode == 0, done.stderr
        assert "metadata ready at" in done.stderr + done.stdout

        container = container_of(rendered, "autorecovery")
        fields = {"MAGNETAR_DAEMON_ID": f"{RELEASE}-magnetar-autorecovery-abc12"}  # the pod's name
        ar_pod = LocalPod(url, secrets=secrets, ports={"MAGNETAR_HTTP_PORT": 0})
        ar_env = ar_pod.localize(container_environment(rendered, "autorecovery", fields))
        daemon = start(magnetar_processes, "autorecovery", container["args"], ar_env)
        ports = {"http": daemon.ready["httpPort"]}
        base = f"http://127.0.0.1:{daemon.ready['httpPort']}"
        bearer = {"Authorization": f"Bearer {token_keys.token('admin')}"}
        assert probe_status(container, "livenessProbe", ports) == 200
        for path in ("/metrics", "/api/v1/autorecovery/who_is_auditor"):
            assert httpx.get(base + path, timeout=10).status_code == 401, path
        wait_for(
            lambda: (
                httpx.get(f"{base}/api/v1/autorecovery/who_is_auditor", headers=bearer, timeout=10).text
                == f"Auditor: {fields['MAGNETAR_DAEMON_ID']}"
            ),
            "the daemon to be elected auditor (through ZooKeeper over TLS)",
        )

        # A ledger on two of the three bookies, written as the daemon reaches them (its own settings).
        client = settings_from_environment(ar_env, monkeypatch)
        healed = Healing(client, bookies)
        trio.run(healed.write)
        victim, survivor = healed.ensemble
        assert bookies[victim].stop() == 0  # gone for good: its registration goes with it
        wait_for(lambda: healed.replicated(base, bearer) >= 1, "the daemon to heal the ledger", 90)
        # The copy is on the third bookie: with the survivor gone too, every entry reads from it alone.
        assert bookies[survivor].stop() == 0
        trio.run(healed.read_back)
        assert probe_status(container, "livenessProbe", ports) == 200
    finally:
        magnetar_processes.stop_all()
        zookeeper.stop()


def settings_from_environment(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``magnetar autorecovery``'s settings as it loads them from that environment."""
    for name in list(os.environ):
        if name.startswith("MAGNETAR_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return load_settings(AutoRecoveryProcessSettings, {}).settings


class Healing:
    """A closed ledger on two bookies, reached with the daemon's TLS files, token and ZooKeeper settings."""

    ENTRIES = 20

    def __init__(self, settings: Any, bookies: dict[str, MagnetarProcess]) -> None:
        self.settings = settings
        self.bookies = bookies
        self.ledger_id = -1
        self.ensemble: tuple[str, ...] = ()

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        ar = self.settings.autorecovery
        assert ar.bookkeeper_tls_enabled
        assert ar.bookkeeper_tls_certificate_file is not None  # the bookies want a client certificate
        assert ar.bookkeeper_auth_token is not None
        tls = client_ssl_context(
            trust_certs_file=ar.bookkeeper_tls_trust_certs_file,
            certificate_file=ar.bookkeeper_tls_certificate_file,
            key_file=ar.bookkeeper_tls_key_file,
        )
        token = read_token_setting(ar.bookkeeper_auth_token)
        options = ClientSettings(ensemble_size=2, write_quorum=2, ack_quorum=2, bookie_quarantine_ms=0)
        async with (
            open_metadata_store(self.settings.metadata_url, self.settings.metadata_settings()) as metadata,
            open_tcp_transport(ssl_context=tls, auth_token=token) as transport,
            open_bookkeeper(metadata, transport, options) as bk,
        ):
            yield bk

    async def write(self) -> None:
        async with self.client() as bk:
            ledger = await bk.create_ledger(password=b"pw")
            for index in range(self.ENTRIES):
                await ledger.add_entry(b"entry %d" % index)
            await ledger.close()
            self.ledger_id = ledger.ledger_id
            self.ensemble = tuple(ledger.metadata.ensembles[0][1])

    async def read_back(self) -> None:
        async with self.client() as bk:
            metadata = await bk.get_ledger_metadata(self.ledger_id)
            (ensemble,) = [bookies for _, bookies in metadata.ensembles]
            (third,) = set(self.bookies) - set(self.ensemble)
            assert set(ensemble) == {self.ensemble[1], third}
            ledger = await bk.open_ledger(self.ledger_id, b"pw")
            entries = await ledger.read_entries(0, self.ENTRIES - 1)
            assert [entry.payload for entry in entries] == [b"entry %d" % i for i in range(self.ENTRIES)]

    def replicated(self, base: str, bearer: dict[str, str]) -> float:
        page = httpx.get(f"{base}/metrics", headers=bearer, timeout=10).text
        (line,) = [
            x
            for x in page.splitlines()
            if x.startswith("replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED ")
        ]
        return float(line.split()[-1])


# --- a bookie whose volumes were lost -------------------------------------------------------------------


def test_the_format_job_re_identifies_a_bookie_whose_volumes_were_lost(
    chart: helm_python.Chart, zookeeper_url: str, tmp_path: Path, magnetar_processes: ProcessGroup
) -> None:
    rendered = render(chart, {"bookie": {"formatOrdinals": [0]}})
    port = free_port()  # a bookie keeps its id (host:port) across restarts, as in its StatefulSet
    pod = bookie_pod(tmp_path, "bookie0", zookeeper_url)
    pod.ports["MAGNETAR_PORT"] = port
    env = bookie_env(rendered, pod)
    bookie = start(magnetar_processes, "bookie", ["bookie"], env)
    bookie_id = bookie.ready["bookieId"]
    assert bookie.stop() == 0
    for volume in pod.volumes.values():  # the volumes are lost: new, empty ones in their place
        subprocess.run(["rm", "-rf", str(volume)], check=True)
        volume.mkdir()
    refused = MagnetarProcess(
        "refused", ["bookie"], magnetar_processes.log_dir, LocalPod.process_environment(env)
    )
    magnetar_processes.processes.append(refused)
    with pytest.raises(ProcessFailedError, match="exited before it was ready"):
        refused.start(timeout_s=DEADLINE_S)
    assert "its data is gone" in refused.log_tail()

    jobs = [
        obj
        for obj in rendered.of_kind("Job")
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == "bookie-format"
    ]
    (job,) = jobs
    container = job["spec"]["template"]["spec"]["containers"][0]
    job_env = dict(rendered.config_map_data(container["envFrom"][0]["configMapRef"]["name"]))
    job_env.update({var["name"]: var["value"] for var in container["env"]})
    # The pod's DNS name stands for 127.0.0.1 here: check that it is this bookie's, then move it.
    assert job_env["MAGNETAR_ADVERTISED_ADDRESS"].startswith(f"{RELEASE}-magnetar-bookie-0.")
    done = run(container["args"], pod.localize(job_env))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["cookieDeleted"] is True
    assert trio.run(cookie_of, zookeeper_url, bookie_id) is None
    again = start(magnetar_processes, "bookie-again", ["bookie"], env)
    assert again.ready["bookieId"] == bookie_id
    # Run once more, the Job deletes nothing: the volumes now hold the new bookie's data.
    again.stop()
    done = run(container["args"], pod.localize(job_env))
    assert done.returncode != 0
    assert "Add --force" in done.stderr


async def cookie_of(url: str, bookie_id: str) -> object:
    async with open_metadata_store(url) as store:
        return await read_cookie(store, bookie_id)
