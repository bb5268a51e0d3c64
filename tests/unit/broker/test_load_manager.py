"""The load manager's I/O over a shared memory metadata store: election, placement through the leader,
assignments, liveness, the leader's unload requests and their owners carrying them out."""

from __future__ import annotations

import dataclasses

import trio

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.ownership.load_balancer_settings import LoadBalancerSettings
from magnetar.broker.ownership.load_manager import Handlers, LoadManager
from magnetar.broker.ownership.load_report import BundleStats, LoadReport, ResourceUsage
from magnetar.broker.ownership.manager import OwnerInfo, OwnershipManager

NS = "public/default"


class Broker:
    def __init__(self, store_name: str, name: str, alive: set[str], settings: LoadBalancerSettings) -> None:
        self.store = MemoryMetadataStore(store_name)
        self.ownership = OwnershipManager(
            self.store,
            name,
            OwnerInfo(
                httpUrl=f"http://{name}", httpUrlTls=f"https://{name}", nativeUrl=f"pulsar://{name}:6650"
            ),
            lambda _: None,
        )
        self.unloaded: list[tuple[str, str]] = []
        self.stats: list[tuple[tuple[str, str], BundleStats]] = []

        async def probe(url: str, timeout_s: float) -> bool:
            return url.removeprefix("http://") in alive

        async def unload(namespace: str, bundle: str) -> None:
            self.unloaded.append((namespace, bundle))
            await self.ownership.release(namespace, bundle)

        async def split(namespace: str, bundle: str, unload_halves: bool) -> None:
            raise AssertionError("no split expected")

        async def bundle_count(namespace: str) -> int:
            return 16

        def resources(report: LoadReport) -> LoadReport:
            # bandwidth against a 1 Mbit/s NIC; CPU and memory left out: the host's would make reports flaky
            kbits = 8 / 1000
            return dataclasses.replace(
                report,
                bandwidth_in=ResourceUsage(report.msg_throughput_in * kbits, 1000),
                bandwidth_out=ResourceUsage(report.msg_throughput_out * kbits, 1000),
            )

        handlers = Handlers(lambda: self.stats, lambda: 0, unload, split, bundle_count)
        self.manager = LoadManager(
            self.store, self.ownership, settings, handlers, probe=probe, resources=resources
        )

    async def start(self) -> None:
        await self.manager.report_once(force=True)
        await self.manager.elect()

    async def take_or_follow(self, bundle: str) -> str:
        """Follow the lookup's redirects through the brokers until one takes the bundle."""
        resolution = await self.manager.resolve(NS, bundle)
        if resolution is None:
            await self.ownership.acquire(NS, bundle)
            await self.manager.acquired(NS, bundle)
            return self.ownership.broker_id
        return resolution.owner.httpUrl.removeprefix("http://")


async def place(brokers: dict[str, Broker], entry: str, bundle: str) -> str:
    """A lookup of ``bundle`` entering at ``entry``, redirects followed (at most 3, as clients do)."""
    at = entry
    for _ in range(3):
        target = await brokers[at].take_or_follow(bundle)
        if target == at:
            return at
        at = target
    raise AssertionError(f"{bundle}: more than 3 redirects")


def bundle(index: int) -> str:
    return f"0x{index:08x}_0x{index + 1:08x}"


async def test_lookups_through_one_broker_spread_a_namespace_and_name_only_live_brokers() -> None:
    alive = {"a", "b", "c"}
    settings = LoadBalancerSettings()
    brokers = {name: Broker("lm1", name, alive, settings) for name in ("a", "b", "c")}
    for broker in brokers.values():
        await broker.start()
    leader = await brokers["b"].manager.leader()
    assert leader == ("a", "http://a")
    owners = [await place(brokers, "b", bundle(i)) for i in range(12)]
    assert sorted(owners.count(name) for name in brokers) == [4, 4, 4]
    for i, owner in enumerate(owners):
        assert brokers[owner].ownership.owns(NS, bundle(i))
    assert await brokers["a"].store.get_children("/loadbalance/assignments") == []

    # a broker whose process is gone is never named, even while its nodes exist
    alive.discard("c")
    for i in range(12, 16):
        assert await place(brokers, "b", bundle(i)) in {"a", "b"}


async def test_a_lookup_placed_on_another_broker_names_all_of_its_addresses() -> None:
    """A broker chosen by placement is named by what its load report carries: its HTTP, HTTPS and binary
    protocol addresses (a client of Pulsar's binary protocol is sent to ``brokerUrl``)."""
    alive = {"a", "b", "c"}
    brokers = {name: Broker("lm-urls", name, alive, LoadBalancerSettings()) for name in ("a", "b", "c")}
    for broker in brokers.values():
        await broker.start()
    named = []
    for i in range(12):
        resolution = await brokers["b"].manager.resolve(NS, bundle(i))
        if resolution is None:
            continue
        host = resolution.owner.httpUrl.removeprefix("http://")
        assert host != "b"
        assert resolution.owner.httpUrlTls == f"https://{host}"
        assert resolution.owner.nativeUrl == f"pulsar://{host}:6650"
        named.append(host)
    assert named
    assert set(named) <= {"a", "c"}


async def test_the_leaders_unload_requests_are_carried_out_by_the_owner() -> None:
    alive = {"a", "b"}
    settings = LoadBalancerSettings(load_balancer_shedding_grace_period_min=10)
    brokers = {name: Broker("lm2", name, alive, settings) for name in ("a", "b")}
    for broker in brokers.values():
        await broker.start()
    await brokers["b"].ownership.acquire(NS, bundle(0))
    await brokers["a"].manager.request("b", f"{NS}/{bundle(0)}", {"op": "unload"})
    assert await brokers["a"].manager.carry_out_requests() == 0  # not a's
    assert await brokers["b"].manager.carry_out_requests() == 1
    assert brokers["b"].unloaded == [(NS, bundle(0))]
    assert not brokers["b"].ownership.owns(NS, bundle(0))
    assert await brokers["b"].manager.carry_out_requests() == 0  # done once


async def test_a_broker_reports_when_its_load_moved_and_the_leader_sheds_the_busy_one() -> None:
    alive = {"a", "b"}
    settings = LoadBalancerSettings(
        load_balancer_history_resource_percentage=0,
        load_balancer_bundle_unload_min_throughput_threshold_mb=0,
        load_balancer_cpu_resource_weight=0,
        load_balancer_memory_resource_weight=0,
    )
    brokers = {name: Broker("lm3", name, alive, settings) for name in ("a", "b")}
    for broker in brokers.values():
        await broker.start()
    busy = brokers["b"]
    for i in range(4):
        await busy.ownership.acquire(NS, bundle(i))
    assert await busy.manager.report_once()  # 0 -> 4 bundles: due
    assert not await busy.manager.report_once()  # nothing moved
    busy.stats = [((NS, bundle(i)), BundleStats(msg_throughput_in=50_000.0)) for i in range(4)]
    assert await busy.manager.report_once()
    made = await brokers["a"].manager.leader_round()
    assert made
    assert all(op == "unload" and broker == "b" for op, broker, _ in made)
    await busy.manager.carry_out_requests()
    assert len(busy.unloaded) == len(made)
    with trio.fail_after(30):  # a guard against a hang, not a timing claim (an in-memory round takes ms)
        again = await brokers["a"].manager.leader_round()
    assert not {full for _, _, full in again} & {full for _, _, full in made}, (
        "shed again in its grace period"
    )


async def test_a_bundle_taken_while_a_decision_waited_is_not_assigned_again() -> None:
    alive = {"a", "b"}
    brokers = {name: Broker("lm4", name, alive, LoadBalancerSettings()) for name in ("a", "b")}
    for broker in brokers.values():
        await broker.start()
    # a lookup on the leader found the bundle unowned; meanwhile b took it (e.g. an earlier assignment)
    await brokers["b"].ownership.acquire(NS, bundle(0))
    resolution = await brokers["a"].manager._decide(
        f"{NS}/{bundle(0)}", f"/loadbalance/assignments/{NS.replace('/', '%2F')}%2F{bundle(0)}"
    )
    assert resolution is not None
    assert resolution.owner.httpUrl == "http://b"
    assert not resolution.redirect
    assert await brokers["a"].store.get_children("/loadbalance/assignments") == []
