"""Ownership moves under load, through proxying brokers: three brokers, the leader's threshold shedder on a
short interval (bandwidth the only resource, measured against a tiny NIC speed so the workload's traffic
counts), manual unloads of the topic's bundle every few seconds, then a phase of shedding only. Background
producers load a topic in each of the namespace's other bundles, so that a broker holds more than one loaded
bundle: the shedder, as Pulsar's threshold shedder, leaves a broker's only bundle where it is. The leader's
log must show the shedder unloading bundles.

The workload's producers and consumers open their sessions on the brokers that do not own the topic at the
start, so every session is served through an owner proxy; when the bundle moves, the proxy follows it and
the client's session stays open: each client opens exactly one session (a producer's messages whose outcome
became unknown get a send-error, counted as unknown outcome). The checker finds 0 lost and the order per
producer kept; the brokers' logs must show the proxies following the topic.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
from chaos.harness import Scenario, ScenarioConfig
from chaos.workload import NAMESPACE
from fixtures.dev_cluster import ClusterExits, open_test_cluster

from magnetar.bookkeeper.runtime.http.ws_client import WsClient, WsClosed, WsRejected
from magnetar.broker.namespace_bundle import bundle_boundaries, bundle_for_hash

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


def _other_bundles_topics(topic: str) -> list[str]:
    """A topic in each of the namespace's other three bundles: background load, so that a broker holds more
    than one loaded bundle (the shedder leaves a broker's only bundle where it is)."""
    bounds = bundle_boundaries(4)
    mine = bundle_for_hash(zlib.crc32(f"{NAMESPACE.replace('/', '://', 1)}/{topic}".encode()), bounds)
    chosen: dict[str, str] = {}
    index = 0
    while len(chosen) < 3:
        name = f"{topic}-load-{index}"
        bundle = bundle_for_hash(zlib.crc32(f"{NAMESPACE.replace('/', '://', 1)}/{name}".encode()), bounds)
        if bundle != mine and bundle.range_name not in chosen:
            chosen[bundle.range_name] = name
        index += 1
    return list(chosen.values())


async def _publish_steadily(base_url: str, topic: str) -> None:
    """About 50 messages of 512 bytes a second to ``topic``, reconnecting as needed, until cancelled."""
    url = base_url.replace("http://", "ws://") + f"/ws/v2/producer/{NAMESPACE}/{topic}"
    payload = json.dumps({"payload": base64.b64encode(b"x" * 512).decode()})
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
                for topic in _other_bundles_topics(s.topic):
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
                await s.hold(scale(8, 20))
                background.cancel_scope.cancel()

        verdict = await scenario.run(faults)
        moves = sum(cluster.process(name).log_path.read_text(errors="replace").count(MOVED)
                    for name in cluster.broker_names)  # fmt: skip
        sessions = dict(scenario.workload.stats.sessions)
        sheds = sum(cluster.process(name).log_path.read_text(errors="replace").count(SHED)
                    for name in cluster.broker_names)  # fmt: skip
    scenario.assert_ok(verdict)
    print(f"          proxies followed the topic {moves} times; client sessions opened: {sessions}")
    assert moves >= 1, "no proxied session followed a move: the scenario did not exercise the proxy"
    print(f"          the shedder unloaded {sheds} bundles")
    assert sheds >= 1, "the shedder never unloaded a bundle"
    assert set(sessions.values()) == {1}, f"a client's session ended (sessions opened per client: {sessions})"
