"""Bundle and load-manager admin calls on two real brokers (in-process bookies, shared metadata store):
leaderBroker, load-report, split-bundle, bundle and namespace unload, with Pulsar's paths and answers."""

from __future__ import annotations

import time

import httpx
import pytest
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster

NS = "/admin/v2/namespaces/public/bundles"


@pytest.fixture
def brokers(cluster: Cluster) -> list[Broker]:
    # sampling rounds every 200 ms: a broker carries out the requests of other brokers that quickly
    return [
        cluster.start_broker(extras=admin_extras, load_balancer_report_update_min_interval_ms=200)
        for _ in range(2)
    ]


def owner_of(http: httpx.Client, brokers: list[Broker], bundle: str) -> Broker | None:
    for broker in brokers:
        report = http.get(f"{broker.http_url}/admin/v2/broker-stats/load-report").json()
        if f"public/bundles/{bundle}" in report["bundles"]:
            return broker
    return None


def test_bundle_admin_on_two_brokers(brokers: list[Broker]) -> None:
    first, second = brokers
    with httpx.Client(timeout=30) as http:
        leader = http.get(f"{second.http_url}/admin/v2/brokers/leaderBroker").json()
        assert leader == http.get(f"{first.http_url}/admin/v2/brokers/leaderBroker").json()
        assert leader["serviceUrl"] in {first.http_url, second.http_url}
        assert leader["brokerId"] == leader["serviceUrl"].removeprefix("http://")

        assert http.put(f"{first.http_url}{NS}", json={"bundles": {"numBundles": 4}}).status_code == 204
        bundle = "0x00000000_0x40000000"
        # nobody owns it: unloading is a no-op, splitting takes it first
        assert http.put(f"{second.http_url}{NS}/{bundle}/unload").status_code == 204
        assert http.put(f"{second.http_url}{NS}/{bundle}/split").status_code == 204
        bundles = http.get(f"{first.http_url}{NS}/bundles").json()
        assert bundles["numBundles"] == 5
        assert bundles["boundaries"][:3] == ["0x00000000", "0x20000000", "0x40000000"]
        half = "0x00000000_0x20000000"
        owner = owner_of(http, brokers, half)
        assert owner is second  # split without unload: the halves stay with the broker that split
        # asked of the other broker, a bundle call is redirected to the owner, authoritatively
        other = first
        answer = http.put(f"{other.http_url}{NS}/{half}/split", params={"unload": "true"})
        assert answer.status_code == 307
        assert answer.headers["location"].startswith(f"{second.http_url}{NS}/{half}/split?")
        assert "authoritative=true" in answer.headers["location"]
        assert http.put(answer.headers["location"]).status_code == 204
        assert http.get(f"{first.http_url}{NS}/bundles").json()["numBundles"] == 6
        assert owner_of(http, brokers, half) is None  # split and unloaded: placed on the next lookup

        # bad input, in Pulsar's terms
        assert http.put(f"{first.http_url}{NS}/not-a-bundle/unload").status_code == 412
        assert http.put(f"{first.http_url}{NS}/0x00000000_0x30000000/unload").status_code == 404
        algorithm = http.put(
            f"{first.http_url}{NS}/0x40000000_0x80000000/split", params={"splitAlgorithmName": "topic_count"}
        )
        assert algorithm.status_code == 412
        assert "range_equally_divide" in algorithm.json()["reason"]
        assert http.put(f"{first.http_url}/admin/v2/namespaces/public/missing/unload").status_code == 404

        # namespace unload through a broker that owns none of them: every owned bundle, wherever it is owned
        assert owner_of(http, brokers, "0x20000000_0x40000000") is second
        assert http.put(f"{first.http_url}{NS}/unload").status_code == 204
        deadline = time.monotonic() + 20
        while owner_of(http, brokers, "0x20000000_0x40000000") is not None:
            assert time.monotonic() < deadline, "the owner did not unload the bundle"
            time.sleep(0.1)

        report = http.get(f"{first.http_url}/admin/v2/broker-stats/load-report").json()
        for field in ("cpu", "memory", "bandwidthIn", "bandwidthOut", "msgRateIn", "lastStats", "numBundles"):
            assert field in report, field
