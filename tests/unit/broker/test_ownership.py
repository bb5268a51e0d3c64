"""Bundle ownership over a shared memory metadata store: two brokers, races, lost and expired sessions."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import pytest
import trio

from magnetar.bookkeeper.metadata import MemoryMetadataStore, StoreUnavailableError
from magnetar.broker.ownership.manager import OwnerInfo, OwnershipManager

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


async def wait_until(condition: Callable[[], Awaitable[bool]] | Callable[[], bool]) -> None:
    with trio.fail_after(5):
        while True:
            result = condition()
            if await result if inspect.isawaitable(result) else result:
                return
            await trio.sleep(0.01)


async def test_a_session_lost_while_nobody_else_could_own_the_bundle_changes_nothing_for_its_clients(
    nursery: trio.Nursery,
) -> None:
    lost: list[set[tuple[str, str]]] = []
    store_a = MemoryMetadataStore("own2")
    a = broker(store_a, "a", lost)
    b = broker(MemoryMetadataStore("own2"), "b", [])
    nursery.start_soon(a.run)
    await a.register_broker({"bundles": 1})
    await a.acquire(*BUNDLE)
    store_a.disconnect()
    store_a.expire_session()  # the server drops the node; a learns it when it reconnects
    assert a.owns(*BUNDLE)
    store_a.reconnect()
    await wait_until(lambda: BUNDLE not in a.state.unconfirmed)
    assert lost == []
    assert a.owns(*BUNDLE)
    # the node exists again, in a's new session: b cannot take the bundle
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://a:8080"
    # and the broker registered itself again
    await wait_until(lambda: _listed(b, "a"))


async def _listed(manager: OwnershipManager, name: str) -> bool:
    return name in await manager.active_brokers()


async def test_a_bundle_another_broker_took_while_our_session_was_lost_is_given_up(
    nursery: trio.Nursery,
) -> None:
    lost: list[set[tuple[str, str]]] = []
    store_a = MemoryMetadataStore("own3")
    a = broker(store_a, "a", lost)
    b = broker(MemoryMetadataStore("own3"), "b", [])
    nursery.start_soon(a.run)
    await a.acquire(*BUNDLE)
    store_a.disconnect()
    store_a.expire_session()
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://b:8080"  # b reaches the store, a does not
    assert a.owns(*BUNDLE)  # a serves on: its writes would be fenced by b's takeover
    store_a.reconnect()
    await wait_until(lambda: lost == [{BUNDLE}])
    assert not a.owns(*BUNDLE)
    owner = await a.get_owner(*BUNDLE)
    assert owner is not None
    assert owner.httpUrl == "http://b:8080"


async def test_a_broker_without_a_session_for_too_long_gives_its_bundles_up(nursery: trio.Nursery) -> None:
    lost: list[set[tuple[str, str]]] = []
    store = MemoryMetadataStore("own4")
    a = OwnershipManager(
        store, "a", OwnerInfo(httpUrl="http://a:8080"), lost.append, serve_without_session_max_s=0.2
    )
    nursery.start_soon(a.run)
    await a.acquire(*BUNDLE)
    store.disconnect()
    await wait_until(lambda: lost == [{BUNDLE}])
    assert not a.owns(*BUNDLE)
    store.reconnect()


async def test_a_node_of_an_earlier_session_of_the_same_broker_is_taken_back() -> None:
    earlier, now = MemoryMetadataStore("own5"), MemoryMetadataStore("own5")
    await broker(earlier, "a", []).acquire(*BUNDLE)  # a restarted faster than its old session expired
    again = broker(now, "a", [])
    assert (await again.acquire(*BUNDLE)).httpUrl == "http://a:8080"
    assert again.owns(*BUNDLE)
    await earlier.aclose()  # the old session ends: the node is the new session's, so it stays
    assert await now.exists(f"/namespace/{BUNDLE[0]}/{BUNDLE[1]}")


async def test_a_release_the_store_cannot_take_keeps_the_bundle() -> None:
    store = MemoryMetadataStore("own6")
    a = broker(store, "a", [])
    await a.acquire(*BUNDLE)
    store.disconnect()
    with pytest.raises(StoreUnavailableError):
        await a.release(*BUNDLE)
    assert a.owns(*BUNDLE)
    store.reconnect()
    await a.release(*BUNDLE)
    assert not a.owns(*BUNDLE)


async def test_releasing_an_unconfirmed_bundle_leaves_the_node_of_the_broker_that_took_it() -> None:
    store_a = MemoryMetadataStore("own7")
    a = broker(store_a, "a", [])
    b = broker(MemoryMetadataStore("own7"), "b", [])
    await a.acquire(*BUNDLE)
    store_a.disconnect()
    store_a.expire_session()
    assert (await b.acquire(*BUNDLE)).httpUrl == "http://b:8080"
    store_a.reconnect()  # a's claim has not run yet (no run task here): the bundle is unconfirmed
    assert BUNDLE in a.state.unconfirmed
    await a.release(*BUNDLE)  # an admin unload meanwhile
    assert not a.owns(*BUNDLE)
    owner = await a.get_owner(*BUNDLE)
    assert owner is not None
    assert owner.httpUrl == "http://b:8080"
