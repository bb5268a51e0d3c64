"""The addresses of peer brokers that the per-address connection limit leaves out (broker.peer_addresses),
and the HTTP server's seam that asks them (``unlimited_address``)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
from fixtures.http_raw import read_answer
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    HttpServer,
    HttpSettings,
    Router,
    text_response,
)
from magnetar.broker.ownership.manager import BROKERS_ROOT
from magnetar.broker.ownership.peer_addresses import (
    PeerAddresses,
    canonical_address,
    maintain_peer_addresses,
    registered_host,
)

# -- canonical addresses and registrations --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10.0.0.5", "10.0.0.5"),
        ("::ffff:10.0.0.5", "10.0.0.5"),  # what a dual-stack listener reports for an IPv4 client
        ("::FFFF:a00:5", "10.0.0.5"),
        ("fe80::1%eth0", "fe80::1"),
        ("2001:DB8::0:1", "2001:db8::1"),
        ("::1", "::1"),
        ("localhost", None),
        ("", None),
        ("10.0.0.5 ", None),
        ("010.0.0.5", None),  # leading zeros are refused, never read as octal
        ("\u0661\u0660.0.0.5", None),  # Arabic-Indic digits
        ("10.0.0.5\x00", None),
        ("\u202e10.0.0.5", None),
        ("4294967296", None),
    ],
)
def test_addresses_are_compared_in_one_canonical_form(text: str, canonical: str | None) -> None:
    assert canonical_address(text) == canonical


@given(st.text(max_size=64))
def test_canonical_address_never_raises(text: str) -> None:
    result = canonical_address(text)
    assert result is None or canonical_address(result) == result


@pytest.mark.parametrize(
    ("value", "host"),
    [
        (b'{"httpUrl":"http://10.0.0.5:8080","cluster":"c"}', "10.0.0.5"),
        (b'{"httpUrl":"http://Broker-1.example:8080"}', "broker-1.example"),
        (b'{"httpUrl":"http://[::ffff:10.0.0.5]:8080"}', "::ffff:10.0.0.5"),
        (b'{"httpUrl":"http://[::1"}', None),  # not a URL
        (b'{"httpUrl":"/relative"}', None),
        (b'{"httpUrl":9223372036854775808}', None),
        (b'{"cluster":"c"}', None),
        (b'["http://10.0.0.5:8080"]', None),
        (b"not json", None),
        (b"\xff\xfe", None),
        (b"", None),
    ],
)
def test_a_registration_names_its_host_or_nothing(value: bytes, host: str | None) -> None:
    assert registered_host(value) == host


@given(st.binary(max_size=200) | st.text(max_size=100).map(lambda url: json.dumps({"httpUrl": url}).encode()))
def test_any_registration_value_is_read_without_raising(value: bytes) -> None:
    host = registered_host(value)
    assert host is None or (isinstance(host, str) and host)


# -- the exempt set ---------------------------------------------------------------------------------------


def test_peers_are_exempt_in_any_form_and_others_are_not() -> None:
    peers = PeerAddresses({"10.0.0.1"})
    peers.resolved("10.0.0.1", ["10.0.0.1"])
    peers.set_peers({"b.example", "10.0.0.3"})
    peers.resolved("b.example", ["10.0.0.2", "fe80::2%eth0"])
    peers.resolved("10.0.0.3", ["10.0.0.3"])
    assert peers.exempt == {"10.0.0.2", "fe80::2", "10.0.0.3"}
    assert peers("10.0.0.2")
    assert peers("::ffff:10.0.0.2")
    assert peers("fe80::2%eth1")
    assert not peers("10.0.0.1")  # this broker's own address
    assert not peers("10.0.0.4")
    assert not peers("")
    assert not peers("?")


def test_a_peer_sharing_this_brokers_address_stays_limited(caplog: pytest.LogCaptureFixture) -> None:
    peers = PeerAddresses({"127.0.0.1"})
    peers.resolved("127.0.0.1", ["127.0.0.1"])
    with caplog.at_level(logging.WARNING):
        peers.set_peers({"127.0.0.1", "localhost"})
        peers.resolved("localhost", ["127.0.0.1", "::1"])
    assert peers.exempt == {"::1"}
    assert not peers("127.0.0.1")
    assert not peers("::ffff:127.0.0.1")
    warnings = [r.getMessage() for r in caplog.records if "share this broker's address" in r.getMessage()]
    assert len(warnings) == 1
    assert "127.0.0.1" in warnings[0]
    assert "http_connections_per_ip_max" in warnings[0]


def test_brokers_of_one_dev_cluster_share_an_address_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    peers = PeerAddresses({"127.0.0.1"})  # every broker binds and advertises 127.0.0.1
    with caplog.at_level(logging.WARNING):
        peers.set_peers({"127.0.0.1"})
        peers.resolved("127.0.0.1", ["127.0.0.1"])
    assert peers.exempt == frozenset()
    assert any("share this broker's address(es) 127.0.0.1" in r.getMessage() for r in caplog.records)


def test_a_failed_resolution_keeps_the_last_good_addresses_and_is_news_once() -> None:
    peers = PeerAddresses(set())
    peers.set_peers({"b.example"})
    peers.resolved("b.example", ["10.0.0.2"])
    assert peers.failed("b.example")
    assert not peers.failed("b.example")
    assert peers("10.0.0.2")
    peers.resolved("b.example", ["10.0.0.9"])  # resolves again: a later failure is news again
    assert peers.exempt == {"10.0.0.9"}
    assert peers.failed("b.example")


def test_a_broker_that_leaves_takes_its_addresses() -> None:
    peers = PeerAddresses(set())
    peers.set_peers({"b.example", "c.example"})
    peers.resolved("b.example", ["10.0.0.2"])
    peers.resolved("c.example", ["10.0.0.3"])
    peers.set_peers({"c.example"})
    assert peers.exempt == {"10.0.0.3"}
    assert peers.hosts() == {"c.example"}
    peers.resolved("b.example", ["10.0.0.2"])  # a late answer for a host that left is kept out
    peers.set_peers({"c.example"})
    assert peers.exempt == {"10.0.0.3"}


def test_resolutions_that_are_not_addresses_are_dropped() -> None:
    peers = PeerAddresses(set())
    peers.set_peers({"b.example"})
    peers.resolved("b.example", ["not an address", "10.0.0.2\n", "10.0.0.2"])
    assert peers.exempt == {"10.0.0.2"}


def test_the_exempt_set_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    peers = PeerAddresses(set(), addresses_max=3)
    peers.set_peers({"many.example"})
    with caplog.at_level(logging.WARNING):
        peers.resolved("many.example", [f"10.0.{i // 256}.{i % 256}" for i in range(10_000)])
    assert len(peers.exempt) == 3
    assert any("only 3 are exempt" in r.getMessage() for r in caplog.records)


# -- the refresh loop over a metadata store ---------------------------------------------------------------


async def register(store: MemoryMetadataStore, broker_id: str, url: str) -> None:
    value = json.dumps({"httpUrl": url}).encode()
    await store.put(f"{BROKERS_ROOT}/{broker_id}", value, None, ephemeral=True)


async def eventually(condition: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.01)


async def test_registrations_that_come_and_go_update_the_set(nursery: trio.Nursery) -> None:
    store = MemoryMetadataStore("peers1")
    await register(store, "10.0.0.1:8080", "http://10.0.0.1:8080")
    await register(store, "10.0.0.2:8080", "http://10.0.0.2:8080")
    await register(store, "junk", "not json")
    peers = PeerAddresses({"10.0.0.1"})
    nursery.start_soon(maintain_peer_addresses, store, peers, "10.0.0.1:8080")
    await eventually(lambda: peers.exempt == {"10.0.0.2"})
    # Refreshed on the registration itself, long before the periodic refresh.
    await register(store, "[::ffff:10.0.0.3]:8080", "http://[::ffff:10.0.0.3]:8080")
    await eventually(lambda: peers.exempt == {"10.0.0.2", "10.0.0.3"})
    await store.delete(f"{BROKERS_ROOT}/10.0.0.2:8080")
    await eventually(lambda: peers.exempt == {"10.0.0.3"})
    nursery.cancel_scope.cancel()


async def test_a_host_that_does_not_resolve_is_logged_once(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryMetadataStore("peers2")
    await register(store, "gone:8080", "http://broker-gone.invalid:8080")
    await register(store, "10.0.0.2:8080", "http://10.0.0.2:8080")
    peers = PeerAddresses(set())
    caplog.set_level(logging.WARNING)
    nursery.start_soon(
        lambda: maintain_peer_addresses(store, peers, "me", refresh_interval_s=0.05, resolve_timeout_s=2)
    )
    await eventually(lambda: "10.0.0.2" in peers.exempt)
    await eventually(lambda: any("broker-gone.invalid" in r.getMessage() for r in caplog.records))
    await trio.sleep(0.5)  # several refreshes
    failures = [r for r in caplog.records if "broker-gone.invalid did not resolve" in r.getMessage()]
    assert len(failures) == 1
    assert peers.exempt == {"10.0.0.2"}
    nursery.cancel_scope.cancel()


# -- the HTTP server's seam --------------------------------------------------------------------------------


async def hello(request: HttpRequest) -> HttpResponse:
    return text_response("hello")


@asynccontextmanager
async def serving(unlimited: Callable[[str], bool]) -> AsyncIterator[int]:
    router = Router()
    router.get("/hello", hello)
    settings = HttpSettings(
        http_bind_address="0.0.0.0", http_port=0, shutdown_grace_ms=1000, http_connections_per_ip_max=2
    )
    server = HttpServer(router, settings, unlimited_address=unlimited)
    async with trio.open_nursery() as nursery:
        ports: list[int] = await nursery.start(server.serve)
        try:
            yield ports[0]
        finally:
            server.shutdown()


async def status_of(port: int, source: str) -> bytes:
    """The status line a new connection from ``source`` gets for ``GET /hello`` (kept open)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
    await stream.send_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
    answer = await read_answer(stream)
    HELD.append(stream)
    return answer.partition(b"\r\n")[0]


HELD: list[trio.SocketStream] = []


async def close_held() -> None:
    while HELD:
        await HELD.pop().aclose()


async def test_connections_from_an_unlimited_address_are_not_counted_per_address() -> None:
    exempt = {"127.0.0.5"}
    async with serving(lambda address: address in exempt) as port:
        try:
            assert [await status_of(port, "127.0.0.5") for _ in range(6)] == [b"HTTP/1.1 200 OK"] * 6
            assert [await status_of(port, "127.0.0.6") for _ in range(3)] == [
                b"HTTP/1.1 200 OK",
                b"HTTP/1.1 200 OK",
                b"HTTP/1.1 429 Too Many Requests",
            ]
            # The address stops being a peer while its connections are open: closing them releases nothing
            # that was not counted, and from now on it is limited like any other.
            exempt.clear()
            await close_held()
            await trio.sleep(0.2)  # the server notices the closes
            assert [await status_of(port, "127.0.0.5") for _ in range(3)] == [
                b"HTTP/1.1 200 OK",
                b"HTTP/1.1 200 OK",
                b"HTTP/1.1 429 Too Many Requests",
            ]
        finally:
            await close_held()
