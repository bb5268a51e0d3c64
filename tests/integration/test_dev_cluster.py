"""``magnetar dev-cluster`` as a user runs it: a ZooKeeper ensemble, bookies and brokers that serve, stop on
SIGTERM without leaving a process behind, come back on the same ports with their data, and stop everything
when a component cannot start."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pulsar
import pytest
import websocket
from fixtures.broker import b64, recv_json, send_json, unb64
from fixtures.dev_cluster import start_dev_cluster_command
from fixtures.processes import ProcessFailedError, ProcessGroup

from magnetar.admin.processes import zookeeper
from magnetar.bookkeeper.protocol.codec import NEED_DATA, ClientProtocol
from magnetar.bookkeeper.protocol.messages import AuthRequest, AuthResponse
from magnetar.bookkeeper.protocol.status import BookieStatus
from magnetar.bookkeeper.runtime.auth.keys import secret_key
from magnetar.bookkeeper.runtime.auth.tokens import create_token

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

TOPIC = "persistent/public/default/dev-cluster"


def processes_using(data_dir: Path) -> list[int]:
    """Pids whose command line names ``data_dir`` (the dev cluster's children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_dir) in command:
            pids.append(int(entry.name))
    return pids


def child_pids(ready: dict[str, object]) -> list[int]:
    components = [*ready["zookeepers"], *ready["bookies"], *ready["brokers"]]  # type: ignore[misc]
    return [int(component["pid"]) for component in components]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_ensemble_serves_stops_cleanly_and_restarts_with_its_data(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data_dir = tmp_path / "dev"
    flags = ("--zk", "3", "--bookies", "3", "--brokers", "2", "--session-timeout-ms", "4000")
    process = start_dev_cluster_command(magnetar_processes, data_dir, *flags)
    ready = process.ready
    assert ready["event"] == "dev-cluster-ready"
    assert len(ready["bookies"]) == 3
    assert len(ready["brokers"]) == 2
    ports = [int(hp.rsplit(":", 1)[1]) for hp in ready["zookeeper"].split(",")]
    modes = sorted(zookeeper.server_mode(port) or "none" for port in ports)
    assert modes == ["follower", "follower", "leader"]  # a real ensemble with a quorum

    producer = websocket.create_connection(
        f"{ready['brokers'][0]['wsUrl']}/ws/v2/producer/{TOPIC}", timeout=10
    )
    send_json(producer, {"payload": b64("kept"), "context": "1"})
    assert recv_json(producer)["result"] == "ok"
    producer.close()
    # Pulsar's official client through each broker's binary port, the owner or not: a lookup at the other
    # broker redirects it to the owner.
    broker_urls = [broker["brokerUrl"] for broker in ready["brokers"]]
    assert len(set(broker_urls)) == 2
    for index, url in enumerate(broker_urls):
        client = pulsar.Client(url, operation_timeout_seconds=20)
        try:
            consumer = client.subscribe(
                f"persistent://{TOPIC.removeprefix('persistent/')}",
                f"binary-{index}",
                initial_position=pulsar.InitialPosition.Earliest,
            )
            message = consumer.receive(timeout_millis=20_000)
            assert message.data() == b"kept", f"through broker {index}"
            consumer.acknowledge(message)
            consumer.close()
        finally:
            client.close()

    pids = child_pids(ready)
    assert process.stop() == 0  # SIGTERM
    assert not [pid for pid in pids if alive(pid)]
    assert processes_using(data_dir) == []

    again = start_dev_cluster_command(magnetar_processes, data_dir, *flags)
    # the same ports again: bookie ids (which the ledgers name) and broker URLs
    assert [b["httpUrl"] for b in again.ready["brokers"]] == [b["httpUrl"] for b in ready["brokers"]]
    assert [b["bookieId"] for b in again.ready["bookies"]] == [b["bookieId"] for b in ready["bookies"]]
    consumer = websocket.create_connection(
        f"{again.ready['brokers'][1]['wsUrl']}/ws/v2/consumer/{TOPIC}/check?subscriptionInitialPosition=Earliest",
        timeout=20,
    )
    try:
        assert unb64(recv_json(consumer)["payload"]) == b"kept"
    finally:
        consumer.close()
    again.stop()
    assert processes_using(data_dir) == []


def test_a_component_that_cannot_start_stops_everything(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    data_dir = tmp_path / "dev"
    data_dir.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # the ports recorded from an earlier run say bookie-0 listens where something else now does
        state = {"bookies": [{"bookie": taken.getsockname()[1], "http": free_port()}]}
        (data_dir / "dev-cluster.json").write_text(json.dumps(state))
        process = magnetar_processes.add(
            "dev-cluster", ["dev-cluster", "--data-dir", str(data_dir), "--bookies", "1", "--brokers", "1"],
            start=False,
        )  # fmt: skip
        with pytest.raises(ProcessFailedError):
            process.start(timeout_s=120)
        assert process.stop() == 1
    log = process.log_path.read_text()
    assert "bookie-0 exited with code" in log
    assert processes_using(data_dir) == []  # ZooKeeper, started first, was stopped too


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["ctrl-c", "hang-up"])
def test_ctrl_c_or_a_hang_up_stops_it_and_its_children(
    magnetar_processes: ProcessGroup, tmp_path: Path, signum: signal.Signals
) -> None:
    data_dir = tmp_path / "dev"
    process = start_dev_cluster_command(
        magnetar_processes, data_dir, "--bookies", "1", "--brokers", "1", "--bookie-storage", "memory"
    )
    pids = child_pids(process.ready)
    os.kill(process.pid, signum)
    assert process.wait() == 0
    assert not [pid for pid in pids if alive(pid)]
    log = process.log_path.read_text()
    assert f"received {signum.name}: stopping the dev cluster" in log
    assert "dev cluster stopped" in log


def test_with_authentication_the_bookies_admit_only_the_brokers(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    """``--authentication-enabled``: clients need the admin token the dev cluster made, the brokers reach the
    bookies with theirs, and a token of any other role - valid for the cluster - is refused by the bookies."""
    data_dir = tmp_path / "secure-dev"
    flags = ("--zk", "1", "--bookies", "2", "--brokers", "1", "--authentication-enabled")
    process = start_dev_cluster_command(magnetar_processes, data_dir, *flags)
    ready = process.ready
    admin_token = Path(str(ready["adminTokenFile"])).read_text()
    assert Path(str(ready["adminTokenFile"])).stat().st_mode & 0o077 == 0
    ws_url = ready["brokers"][0]["wsUrl"]
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        websocket.create_connection(f"{ws_url}/ws/v2/producer/{TOPIC}", timeout=10)
    assert caught.value.status_code == 401
    auth = [f"Authorization: Bearer {admin_token}"]
    producer = websocket.create_connection(f"{ws_url}/ws/v2/producer/{TOPIC}", timeout=20, header=auth)
    send_json(producer, {"payload": b64("secured"), "context": "1"})
    assert recv_json(producer)["result"] == "ok"
    producer.close()
    consumer = websocket.create_connection(
        f"{ws_url}/ws/v2/consumer/{TOPIC}/check?subscriptionInitialPosition=Earliest", timeout=20, header=auth
    )
    try:
        assert unb64(recv_json(consumer)["payload"]) == b"secured"
    finally:
        consumer.close()

    key = secret_key((data_dir / "security" / "secret.key").read_bytes())
    host, port = str(ready["bookies"][0]["bookieId"]).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as bookie:
        proto = ClientProtocol()
        bookie.sendall(proto.send(AuthRequest(1, "token", create_token(key, "app").encode())))
        while (event := proto.next_event()) is NEED_DATA:
            proto.receive_data(bookie.recv(65536))
    assert isinstance(event, AuthResponse)
    assert event.status is BookieStatus.EUA
    assert "role 'app' may not connect" in event.reason
    assert process.stop() == 0
    assert processes_using(data_dir) == []
