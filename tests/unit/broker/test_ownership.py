"""Bundle ownership over a shared memory metadata store: two brokers, races, session loss."""

from __future__ import annotations

import trio

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.ownership import OwnerInfo, OwnershipManager

BUNDLE = ("public/default", "0x00000000_0xffffffff")


def broker(store: MemoryMetadataStore, name: str, lost: list[set[tuple[str, str]]]) -> OwnershipManager:
    return OwnershipManager(store, name, OwnerInfo(httpUrl=f"http://{name}:8080"), lost.append)


async def test_first_broker_wins_and_the_other_sees_it(nursery: trio.Nursery) -> None:
    lost: list[set[tuple[str, str]]] = []
    a = broker(MemoryMetadataStore("own1"), "a", lost)
    b = broker(MemoryMetadataStore("own1"), "b", lost)
    assert (await a.acquire(*BUNDLE)).httpUrl == "http://a:8080"
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://a:8080"
    assert a.owns(*BUNDLE)
    assert not b.owns(*BUNDLE)
    owner = await b.get_owner(*BUNDLE)
    assert owner is not None
    assert owner.httpUrl == "http://a:8080"
    await a.release(*BUNDLE)
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://b:8080"


async def test_session_loss_drops_bundles_at_once_and_lets_another_broker_take_them(
    nursery: trio.Nursery,
) -> None:
    lost: list[set[tuple[str, str]]] = []
    store_a = MemoryMetadataStore("own2")
    a = broker(store_a, "a", lost)
    b = broker(MemoryMetadataStore("own2"), "b", [])
    nursery.start_soon(a.run)
    await a.register_broker({"bundles": 1})
    await a.acquire(*BUNDLE)
    store_a.expire_session()
    assert lost == [{BUNDLE}]
    assert not a.owns(*BUNDLE)
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://b:8080"
    # the broker registers itself again under its new session
    with trio.fail_after(5):
        while "a" not in await b.active_brokers():
            await trio.sleep(0.01)
