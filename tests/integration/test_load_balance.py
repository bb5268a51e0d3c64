"""The load manager on real processes: ZooKeeper, two bookies, three brokers, then a fourth.

Every topic of a 16-bundle namespace is looked up through broker-0 only, yet the leader places the bundles
over all three brokers (each owns 20-50 %). Producers publish to every topic at a steady rate; a fourth broker
is started, and the threshold shedder (short intervals, bandwidth as the only resource, measured against a
tiny NIC speed so the test's traffic counts) unloads bundles from the loaded brokers until the new one owns a
fair share. Producers reconnect by themselves (a lookup through broker-0 again); at the end a reader finds
every acknowledged message. A bundle of another namespace holding more topics than
``load_balancer_namespace_bundle_max_topics`` is split by the leader, and ``split-bundle`` splits on demand.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket
from fixtures.broker import b64, recv_json, send_json, unb64
from fixtures.broker_processes import MagnetarProcess, ProcessCluster

from magnetar.broker.ownership.namespace_bundle import bundle_boundaries, bundle_for_hash

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(150)]

NS = "public/lb"
SPLIT_NS = "public/split"
BUNDLES = 16
TOPICS_PER_BUNDLE = 2
SPLIT_TOPICS = 6
PUBLISH_INTERVAL_S = 0.1
PAYLOAD = "x" * 512
ENV = {
    "MAGNETAR_METADATA_SESSION_TIMEOUT_MS": "4000",
    "MAGNETAR_STATS_UPDATE_INTERVAL_S": "1",
    "MAGNETAR_LOAD_BALANCER_REPORT_UPDATE_MIN_INTERVAL_MS": "500",
    "MAGNETAR_LOAD_BALANCER_SHEDDING_INTERVAL_MIN": "0.04",
    "MAGNETAR_LOAD_BALANCER_SHEDDING_GRACE_PERIOD_MIN": "10",
    "MAGNETAR_LOAD_BALANCER_HISTORY_RESOURCE_PERCENTAGE": "0.3",
    "MAGNETAR_LOAD_BALANCER_BUNDLE_UNLOAD_MIN_THROUGHPUT_THRESHOLD_MB": "0",
    "MAGNETAR_LOAD_BALANCER_CPU_RESOURCE_WEIGHT": "0",
    "MAGNETAR_LOAD_BALANCER_MEMORY_RESOURCE_WEIGHT": "0",
    "MAGNETAR_LOAD_BALANCER_OVERRIDE_BROKER_NIC_SPEED_GBPS": "0.0005",
    "MAGNETAR_LOAD_BALANCER_NAMESPACE_BUNDLE_MAX_TOPICS": "4",
}


def topics_covering_every_bundle() -> list[str]:
    """``TOPICS_PER_BUNDLE`` topic names in each of the namespace's bundles."""
    bounds = bundle_boundaries(BUNDLES)
    per_bundle: dict[str, list[str]] = {}
    index = 0
    while (
        min((len(v) for v in per_bundle.values()), default=0) < TOPICS_PER_BUNDLE or len(per_bundle) < BUNDLES
    ):
        name = f"t-{index}"
        bundle = bundle_for_hash(zlib.crc32(f"persistent://{NS}/{name}".encode()), bounds).range_name
        if len(per_bundle.setdefault(bundle, [])) < TOPICS_PER_BUNDLE:
            per_bundle[bundle].append(name)
        index += 1
    return sorted(name for names in per_bundle.values() for name in names)


def split_topics() -> list[str]:
    """Topics of the one-bundle namespace, half on each side of the middle (so one split suffices)."""
    low: list[str] = []
    high: list[str] = []
    index = 0
    while len(low) < SPLIT_TOPICS // 2 or len(high) < SPLIT_TOPICS // 2:
        name = f"s-{index}"
        side = low if zlib.crc32(f"persistent://{SPLIT_NS}/{name}".encode()) < 0x7FFFFFFF else high
        if len(side) < SPLIT_TOPICS // 2:
            side.append(name)
        index += 1
    return low + high


class Producer(threading.Thread):
    """Publishes to one topic until stopped; reconnects through a lookup on the entry broker."""

    def __init__(self, entry: str, namespace: str, topic: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.entry, self.topic = entry, f"{namespace}/{topic}"
        self.stop_event = stop
        self.acked: list[str] = []
        self.reconnects = 0
        self.errors: list[str] = []
        self.pauses_s: list[float] = []
        """Per move: from the last acknowledgement before the session closed to the first one after."""

    def owner_ws(self) -> str:
        with httpx.Client(follow_redirects=True, timeout=10) as http:
            answer = http.get(f"{self.entry}/lookup/v2/topic/persistent/{self.topic}")
        answer.raise_for_status()
        return str(answer.json()["httpUrl"]).replace("http://", "ws://")

    def run(self) -> None:
        sequence = 0
        last_ack = 0.0
        moved = False
        while not self.stop_event.is_set():
            ws = websocket.WebSocket()
            try:
                ws.connect(f"{self.owner_ws()}/ws/v2/producer/persistent/{self.topic}", timeout=10)
            except (OSError, websocket.WebSocketException, httpx.HTTPError) as exc:
                ws.shutdown()
                self.errors.append(repr(exc))
                time.sleep(0.2)
                continue
            try:
                while not self.stop_event.is_set():
                    payload = f"{sequence}:{PAYLOAD}"
                    send_json(ws, {"payload": b64(payload), "context": str(sequence)})
                    answer = recv_json(ws)
                    if answer.get("result") == "ok":
                        self.acked.append(str(sequence))
                        now = time.monotonic()
                        if moved:
                            self.pauses_s.append(now - last_ack)
                            moved = False
                        last_ack = now
                    sequence += 1
                    time.sleep(PUBLISH_INTERVAL_S)
            except (OSError, websocket.WebSocketException, json.JSONDecodeError):
                self.reconnects += 1
                moved = last_ack > 0
            finally:
                ws.close(timeout=1)
                ws.shutdown()  # close() leaves the socket open when the broker closed the session first


READ_BACK_DEADLINE_S = 30.0
"""How long :func:`read_all` may take to read a topic back (it stops as soon as it has what it expects)."""


def read_all(entry: str, topic: str, expected: set[str]) -> set[str]:
    """What a reader from the earliest position finds on ``topic``: until it has every message of
    ``expected`` (more may be stored: messages whose outcome the producer never learnt), or
    ``READ_BACK_DEADLINE_S`` passes (a silence is not the end: loading the topic may take long
    on a busy machine)."""
    with httpx.Client(follow_redirects=True, timeout=10) as http:
        owner = http.get(f"{entry}/lookup/v2/topic/persistent/{topic}").json()["httpUrl"]
    ws = websocket.WebSocket()
    seen: set[str] = set()
    deadline = time.monotonic() + READ_BACK_DEADLINE_S
    try:
        ws.connect(
            f"{owner.replace('http://', 'ws://')}/ws/v2/reader/persistent/{topic}?messageId=earliest",
            timeout=READ_BACK_DEADLINE_S,
        )
        while not expected <= seen and (left_s := deadline - time.monotonic()) > 0:
            ws.settimeout(left_s)
            message = recv_json(ws)
            seen.add(unb64(message["payload"]).decode().split(":", 1)[0])
            send_json(ws, {"messageId": message["messageId"]})
    except websocket.WebSocketTimeoutException:
        pass
    finally:
        ws.close(timeout=1)
        ws.shutdown()
    return seen


def owned(http: httpx.Client, broker: MagnetarProcess, namespace: str) -> list[str]:
    report: dict[str, Any] = http.get(f"{url(broker)}/admin/v2/broker-stats/load-report").json()
    return [b for b in report["bundles"] if b.rsplit("/", 1)[0] == namespace]


def url(broker: MagnetarProcess) -> str:
    return f"http://127.0.0.1:{broker.ready['port']}"


def admin(admin_url: str, *args: str) -> str:
    """``magnetar admin --admin-url ADMIN_URL ARGS...``: its output (it must succeed)."""
    command = [sys.executable, "-m", "magnetar.admin.cli", "admin", "--admin-url", admin_url, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done.stdout


def wait_for(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_bundles_spread_shed_to_a_new_broker_and_split(zookeeper_url: str, tmp_path: Path) -> None:
    cluster = ProcessCluster(zookeeper_url, tmp_path)
    stop = threading.Event()
    producers: list[Producer] = []
    http = httpx.Client(timeout=10, follow_redirects=True)
    entry = ""
    shares: dict[str, int] = {}
    moved = 0
    try:
        for index in range(2):
            cluster.start_bookie(index)
        brokers = [cluster.start_broker(index, env=ENV) for index in range(3)]
        entry = url(brokers[0])
        assert http.put(
            f"{entry}/admin/v2/namespaces/{NS}", json={"bundles": {"numBundles": BUNDLES}}
        ).is_success
        assert http.put(
            f"{entry}/admin/v2/namespaces/{SPLIT_NS}", json={"bundles": {"numBundles": 1}}
        ).is_success
        leader = http.get(f"{entry}/admin/v2/brokers/leaderBroker").json()
        assert leader["brokerId"] in {b.removeprefix("http://") for b in map(url, brokers)}
        assert leader["serviceUrl"].startswith("http://127.0.0.1:")

        # -- placement: every lookup goes through broker-0, the bundles spread over all three
        producers = [Producer(entry, NS, topic, stop) for topic in topics_covering_every_bundle()]
        for producer in producers:
            producer.start()
        wait_for("every topic acknowledged", lambda: all(p.acked for p in producers), 40)
        shares = {b.name: len(owned(http, b, NS)) for b in brokers}
        assert sum(shares.values()) == BUNDLES, shares
        for name, count in shares.items():
            assert 0.2 <= count / BUNDLES <= 0.5, f"{name} owns {count} of {BUNDLES} bundles: {shares}"

        # -- shedding: a fourth broker takes a fair share from the loaded ones
        brokers.append(cluster.start_broker(3, env=ENV))
        interval_s = float(ENV["MAGNETAR_LOAD_BALANCER_SHEDDING_INTERVAL_MIN"]) * 60
        wait_for(
            f"the new broker to own a fair share within 60 s, {60 / interval_s:.0f} rounds of "
            f"load_balancer_shedding_interval_min ({interval_s:g} s)",
            lambda: len(owned(http, brokers[3], NS)) >= BUNDLES // 4 - 1,
            60,
        )
        shares = {b.name: len(owned(http, b, NS)) for b in brokers}
        moved = sum(p.reconnects for p in producers)
        assert moved >= 1, "no producer was moved"

        # -- splits: automatic above the topic threshold, and on demand
        split_producers = [Producer(entry, SPLIT_NS, topic, stop) for topic in split_topics()]
        for producer in split_producers:
            producer.start()
        producers += split_producers
        bundles_url = f"{entry}/admin/v2/namespaces/{SPLIT_NS}/bundles"
        wait_for("the automatic split", lambda: http.get(bundles_url).json()["numBundles"] == 2, 30)
        target = owned(http, brokers[0], NS) or owned(http, brokers[1], NS)
        bundle = target[0].rsplit("/", 1)[1]
        admin(entry, "namespaces", "split-bundle", NS, "-b", bundle, "-u")  # through broker-0 (redirected)
        assert json.loads(admin(entry, "namespaces", "bundles", NS))["numBundles"] == BUNDLES + 1
        assert json.loads(admin(url(brokers[3]), "brokers", "leader-broker")) == leader
        wait_for("producers on the split bundles", lambda: all(p.acked for p in split_producers), 30)
        time.sleep(1.0)
    finally:
        stop.set()
        for producer in producers:
            producer.join(timeout=15)
    try:
        assert entry, "the cluster did not start"
        lost = {}
        for producer in producers:
            seen = read_all(entry, producer.topic, set(producer.acked))
            missing = set(producer.acked) - seen
            if missing:
                lost[producer.topic] = sorted(missing, key=int)[:5]
        assert not lost, f"acknowledged messages lost: {lost}"
        acked = Counter({p.topic: len(p.acked) for p in producers})
        assert sum(acked.values()) > len(producers)
        pauses = sorted(pause for p in producers for pause in p.pauses_s)
        if pauses:
            print(
                f"producer pause per move: {len(pauses)} moves, "
                f"median {pauses[len(pauses) // 2] * 1000:.0f} ms, max {pauses[-1] * 1000:.0f} ms"
            )
        print(f"shares after shedding {shares}; producer moves {moved}; acked {sum(acked.values())}")
    finally:
        http.close()
        cluster.close()
