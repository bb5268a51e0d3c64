"""Ownership moves under load, through proxying brokers: three brokers, the leader's threshold shedder on a
short interval (bandwidth the only resource, measured against a tiny NIC speed so the workload's traffic
counts), manual unloads of the topic's bundle every few seconds, then a phase of shedding only. Background
producers load a topic in each of the namespace's four bundles (the topic's own included), each enough for
its broker to count as overloaded once it holds two of them: four loaded bundles on three brokers, one
broker always holds two, so there is always a bundle to shed (as Pulsar's threshold shedder, the shedder
leaves a broker's only bundle where it is). The shedding phase lasts until the leader's log shows the shedder
unloading a bundle during it, bounded by a deadline computed from the scenario's load-balancer settings
(:func:`_shedding_deadline_s`); the failure names them.

The workload's producers and consumers open their sessions on the brokers that do not own the topic at the
start, so every session is served through an owner proxy; when the bundle moves, the proxy follows it and
the client's session stays open: each client opens exactly one session (a producer's messages whose outcome
became unknown get a send-error, counted as unknown outcome). The checker finds 0 lost and the order per
producer kept; the brokers' logs must show the proxies following the topic.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
from chaos.harness import Scenario, ScenarioConfig
from chaos.workload import NAMESPACE
from fixtures.dev_cluster import ClusterExits, open_test_cluster

from magnetar.admin.processes.dev_cluster import DevCluster
from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsClosed, WsRejected
from magnetar.broker.ownership.namespace_bundle import bundle_boundaries, bundle_for_hash

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

SHEDDING_ENV = {
    "MAGNETAR_STATS_UPDATE_INTERVAL_S": "1",
    "MAGNETAR_LOAD_BALANCER_REPORT_UPDATE_MIN_INTERVAL_MS": "500",
    "MAGNETAR_LOAD_BALANCER_SHEDDING_INTERVAL_MIN": "0.05",
    "MAGNETAR_LOAD_BALANCER_SHEDDING_GRACE_PERIOD_MIN": "0.05",
    "MAGNETAR_LOAD_BALANCER_HISTORY_RESOURCE_PERCENTAGE": "0.3",
    "MAGNETAR_LOAD_BALANCER_BUNDLE_UNLOAD_MIN_THROUGHPUT_THRESHOLD_MB": "0",
    "MAGNETAR_LOAD_BALANCER_CPU_RESOURCE_WEIGHT": "0",
    "MAGNETAR_LOAD_BALANCER_MEMORY_RESOURCE_WEIGHT": "0",
    "MAGNETAR_LOAD_BALANCER_OVERRIDE_BROKER_NIC_SPEED_GBPS": "0.0005",
}
MOVED = " moved from "
"""What a broker's owner proxy logs when it follows the topic to another owner."""


SHED = "shedding: unloading"
"""What the leader logs when its shedder unloads a bundle."""
BUNDLES = 4
"""The namespace's bundles (the dev cluster's default), each loaded by a background producer."""
LOAD_PAYLOAD_BYTES = 1024
"""A background message: at the producer's 50 a second, 410 kbit/s, 82 % of the overridden NIC speed
(0.5 Mbit/s); at a third of that rate (a loaded machine) a bundle is still 27 %, and a broker with two
loaded bundles of four exceeds the average by more than the shedder's threshold (10 % by default) as soon
as a bundle is above 15 %."""

LOADED_MACHINE_FACTOR = 3
"""How much later than its settings say a process's rounds may come on a 2-core machine running other
suites."""


def _setting(name: str) -> float:
    return float(SHEDDING_ENV[f"MAGNETAR_{name.upper()}"])


def _shedding_deadline_s() -> tuple[float, str]:
    """How long the shedder may take to unload a bundle in this scenario, and the settings it comes from.

    A bundle's load reaches the leader after one stats period (``stats_update_interval_s``) and one report
    (``load_balancer_report_update_min_interval_ms``); the leader's smoothed usage keeps
    ``load_balancer_history_resource_percentage`` of the previous round, so it takes ``rounds`` shedding
    rounds (``load_balancer_shedding_interval_min``) to reach 90 % of what is measured, plus one for the
    round that decides; a bundle the shedder moved is left alone for
    ``load_balancer_shedding_grace_period_min``; the owner carries out the request in its next report round.
    On a 2-core machine shared with other suites every process's rounds come late: the sum is multiplied by
    ``LOADED_MACHINE_FACTOR``."""
    stats_s = _setting("stats_update_interval_s")
    report_s = _setting("load_balancer_report_update_min_interval_ms") / 1000
    interval_s = _setting("load_balancer_shedding_interval_min") * 60
    grace_s = _setting("load_balancer_shedding_grace_period_min") * 60
    history = _setting("load_balancer_history_resource_percentage")
    rounds = 1 + (math.ceil(math.log(0.1) / math.log(history)) if history > 0 else 0)
    deadline_s = LOADED_MACHINE_FACTOR * (stats_s + 2 * report_s + grace_s + rounds * interval_s)
    named = (
        f"{deadline_s:.0f} s = {LOADED_MACHINE_FACTOR} x (stats_update_interval_s {stats_s:g} + 2 x "
        f"load_balancer_report_update_min_interval_ms {report_s * 1000:g} ms + "
        f"load_balancer_shedding_grace_period_min {grace_s:g} s + {rounds} rounds of "
        f"load_balancer_shedding_interval_min {interval_s:g} s (load_balancer_history_resource_percentage "
        f"{history:g}))"
    )
    return deadline_s, named


def _load_topics(topic: str) -> list[str]:
    """A topic in each of the namespace's bundles, ``topic``'s own included: background load, so that a broker
    holds more than one loaded bundle (the shedder leaves a broker's only bundle where it is)."""
    bounds = bundle_boundaries(BUNDLES)
    chosen: dict[str, str] = {}
    index = 0
    while len(chosen) < BUNDLES:
        name = f"{topic}-load-{index}"
        bundle = bundle_for_hash(zlib.crc32(f"{NAMESPACE.replace('/', '://', 1)}/{name}".encode()), bounds)
        chosen.setdefault(bundle.range_name, name)
        index += 1
    return list(chosen.values())


def _shed_since(cluster: DevCluster, count: int) -> Callable[[], bool]:
    """Whether the shedder has unloaded more than ``count`` bundles."""
    return lambda: _sheds(cluster) > count


def _sheds(cluster: DevCluster) -> int:
    """How many bundles the shedder has unloaded (the leader's log; the leader may change)."""
    return sum(cluster.process(name).log_path.read_text(errors="replace").count(SHED)
               for name in cluster.broker_names)  # fmt: skip


async def _publish_steadily(base_url: str, topic: str) -> None:
    """About 50 messages of ``LOAD_PAYLOAD_BYTES`` a second to ``topic``, reconnecting as needed, until
    cancelled."""
    url = base_url.replace("http://", "ws://") + f"/ws/v2/producer/{NAMESPACE}/{topic}"
    payload = json.dumps({"payload": base64.b64encode(b"x" * LOAD_PAYLOAD_BYTES).decode()})
    while True:
        try:
            client = await WsClient.connect(url, timeout_s=3)
        except (OSError, WsRejected, trio.TooSlowError):
            await trio.sleep(0.2)
            continue
        try:
            while True:
                await client.send(payload)
                await client.receive()
                await trio.sleep(0.02)
        except (OSError, WsClosed, trio.BrokenResourceError):
            await trio.sleep(0.2)
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()


def _unload_bundle(base_url: str, topic: str) -> int:
    with httpx.Client(timeout=10, follow_redirects=True) as http:
        bundle = http.get(f"{base_url}/lookup/v2/topic/{NAMESPACE}/{topic}/bundle").json()
        namespace = NAMESPACE.removeprefix("persistent/")
        return http.put(f"{base_url}/admin/v2/namespaces/{namespace}/{bundle}/unload").status_code


async def test_shedding_and_unloads_under_load_through_proxying_brokers(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    unloads = int(scale(3, 12))
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits, brokers=3, broker_env=SHEDDING_ENV) as cluster:
        config = ScenarioConfig("ownership moves through proxies", steady_s=scale(2, 5))
        scenario = Scenario(config, cluster, exits)
        # every client session starts on a broker that does not own the topic (placed by this lookup)
        owner = await scenario.owner()
        entries = [u for n, u in zip(cluster.broker_names, cluster.broker_urls, strict=True) if n != owner]
        scenario.workload.broker_urls = lambda: entries

        async def faults(s: Scenario) -> None:
            async with trio.open_nursery() as background:
                for topic in _load_topics(s.topic):
                    background.start_soon(_publish_steadily, cluster.broker_urls[0], topic)
                for round_number in range(1, unloads + 1):
                    owner = await s.owner()
                    s.phase(f"unload from {owner} #{round_number}")
                    entry = cluster.broker_urls[round_number % len(cluster.broker_urls)]
                    status = await trio.to_thread.run_sync(_unload_bundle, entry, s.topic)
                    assert status == 204, f"unload answered {status}"
                    await s.recovered()
                    await s.hold(scale(2, 3))  # the shedder may move the bundle meanwhile too
                s.phase("shedding only")
                deadline_s, settings = _shedding_deadline_s()
                for _ in range(int(scale(1, 3))):
                    took = await s.wait_for(
                        _shed_since(cluster, _sheds(cluster)),
                        deadline_s,
                        f"the shedder to unload a bundle (deadline {settings})",
                    )
                    s.note(f"the shedder unloaded a bundle after {took:.1f} s")
                    await s.recovered()
                background.cancel_scope.cancel()

        verdict = await scenario.run(faults)
        moves = sum(cluster.process(name).log_path.read_text(errors="replace").count(MOVED)
                    for name in cluster.broker_names)  # fmt: skip
        sessions = dict(scenario.workload.stats.sessions)
        sheds = _sheds(cluster)
    scenario.assert_ok(verdict)
    print(f"          proxies followed the topic {moves} times; client sessions opened: {sessions}")
    assert moves >= 1, "no proxied session followed a move: the scenario did not exercise the proxy"
    print(f"          the shedder unloaded {sheds} bundles")
    assert sheds >= 1, "the shedder never unloaded a bundle"
    assert set(sessions.values()) == {1}, f"a client's session ended (sessions opened per client: {sessions})"
