"""A cluster whose links go through fault-injecting proxies (:class:`~fixtures.tcp_proxy.TcpProxy`).

* every bookie listens on 127.0.0.1:P but registers as ``127.0.1.<i+1>:P``, where a proxy listens and
  forwards to it: all broker -> bookie traffic of bookie *i* crosses ``network.bookies[i]``;
* every broker reaches ZooKeeper through its own proxy, ``network.zookeeper["broker-<i>"]``; with
  ``bookies_through_zookeeper_proxies`` every bookie too, ``network.zookeeper["bookie-<i>"]``.

Clients reach the brokers directly. Why proxies and not network namespaces with ``tc netem``: this machine's
kernel (and CI's, the same kind) has neither the ``netem`` qdisc nor any tc action (``tc qdisc add ... netem``
answers "Specified qdisc kind is unknown", ``tc filter ... action drop`` "Failed to load TC action module"),
so a namespace could only be cut off whole (link down) - no delay, no loss, no partition between two
particular components. The proxies give all three, per link.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from fixtures.dev_cluster import ClusterExits, open_test_cluster
from fixtures.tcp_proxy import TcpProxy

from magnetar.admin.processes.dev_cluster import CHROOT, DevCluster


@dataclass
class Network:
    bookies: list[TcpProxy] = field(default_factory=list)
    zookeeper: dict[str, TcpProxy] = field(default_factory=dict)

    async def busiest_bookie(self, window_s: float = 1.0) -> int:
        """The bookie whose link carried the most bytes over the next ``window_s``: one in the ensemble of the
        ledger being written (the topic's traffic dwarfs everything else)."""
        before = [proxy.bytes_forwarded for proxy in self.bookies]
        await trio.sleep(window_s)
        deltas = [proxy.bytes_forwarded - b for proxy, b in zip(self.bookies, before, strict=True)]
        return deltas.index(max(deltas))

    def heal_all(self) -> None:
        for proxy in [*self.bookies, *self.zookeeper.values()]:
            proxy.heal()


@asynccontextmanager
async def open_proxied_cluster(
    data_dir: Path, exits: ClusterExits, *, bookies_through_zookeeper_proxies: bool = False, **overrides: Any
) -> AsyncIterator[tuple[DevCluster, Network]]:
    bookies = int(overrides.get("bookies", 3))
    addresses = [f"127.0.1.{index + 1}" for index in range(bookies)]
    network = Network()
    async with trio.open_nursery() as proxies:
        try:
            async with open_test_cluster(
                data_dir, exits, start=False, bookie_advertised_addresses=addresses, **overrides
            ) as cluster:
                await cluster.start_zookeepers()
                await cluster.initialize_metadata()
                zk_port = cluster.zk_nodes[0].client_port
                for index, address in enumerate(addresses):
                    port = cluster.ports.bookies[index]["bookie"]
                    proxy = TcpProxy("127.0.0.1", port, listen_host=address, listen_port=port)
                    await proxies.start(proxy.run)
                    network.bookies.append(proxy)
                zookeeper_clients = list(cluster.broker_names)
                if bookies_through_zookeeper_proxies:
                    zookeeper_clients += cluster.bookie_names
                for name in zookeeper_clients:
                    proxy = TcpProxy("127.0.0.1", zk_port)
                    await proxies.start(proxy.run)
                    network.zookeeper[name] = proxy
                    cluster.metadata_urls[name] = f"zk:127.0.0.1:{proxy.port}{CHROOT}"
                await cluster.start_bookies()
                await cluster.start_brokers()
                yield cluster, network
                network.heal_all()
        finally:
            proxies.cancel_scope.cancel()
