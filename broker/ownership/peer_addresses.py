"""The addresses of the cluster's other live brokers, which the per-address connection limit leaves out.

Theory of operation. A broker that is not a topic's owner proxies each WebSocket session to the owner over a
connection of its own (:mod:`.owner_proxy`), carrying the client's credentials: at the owner, all
the sessions one peer proxies arrive from that peer's address. Counted against ``http_connections_per_ip_max``
they would cap what a pair of brokers can proxy at that limit, far below ``ws_proxy_sessions_max``. So the
owner's HTTP server asks :class:`PeerAddresses` (its ``unlimited_address`` predicate) whether a new
connection comes from another live broker, and does not count such a connection per address; it still counts
toward ``http_connections_max`` and the process's descriptor reserve.

What a peer is. Every live broker registers under ``/loadbalance/brokers/<id>`` with its ``httpUrl``, whose
host is its advertised address. :func:`maintain_peer_addresses` reads the registrations when one appears or
disappears and every ``PEER_REFRESH_INTERVAL_S``, resolves the peers' hosts (and this broker's own) to IP
addresses on a worker thread (one at a time, each within ``RESOLVE_TIMEOUT_S``) and hands the results to
:class:`PeerAddresses`, which keeps a frozen set of at most ``PEER_ADDRESSES_MAX`` addresses that the accept
loop reads without awaiting anything. A host that fails to resolve keeps its last good addresses (its
failure is logged once until it resolves again); a broker that deregisters takes its addresses with it.
Addresses are compared in one canonical form: an IPv4-mapped IPv6 address (``::ffff:10.0.0.5``, what a
dual-stack listener reports for an IPv4 client) is its IPv4 address, a zone index (``%eth0``) is dropped.

What is never exempt. An address that is also this broker's own (its bind address or what its advertised
host resolves to) stays limited: where brokers share an address (every broker of a dev cluster on
``127.0.0.1``, or on one host's name) a peer cannot be told from a local client, so exempting it would exempt
everyone there. This is logged when it is seen. A peer is recognized by the address its advertised host
resolves to; its connections come from that address when it listens on it (a pod's IP) or binds it (the
proxy's hop leaves from the broker's bind address when that is a specific address).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import trio

from magnetar.bookkeeper.metadata import MetadataStore, MetadataStoreError, Notification, NotificationType
from magnetar.broker.ownership.manager import BROKERS_ROOT

log = logging.getLogger(__name__)

PEER_ADDRESSES_MAX = 4096
"""Addresses exempt at once (every peer's addresses together); beyond it the rest stay limited."""
PEER_BROKERS_MAX = 1024
"""Registrations read per refresh; a cluster with more brokers than this has the rest limited."""
PEER_REFRESH_INTERVAL_S = 60.0
"""How often the peers' hosts are resolved again when no broker came or went (their addresses may move)."""
RESOLVE_TIMEOUT_S = 5.0
"""One host's resolution; a slower one counts as failed (its last good addresses are kept)."""


def canonical_address(address: str) -> str | None:
    """The canonical text of an IP address (IPv4-mapped IPv6 as IPv4, no zone index); None if not one."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def registered_host(value: bytes) -> str | None:
    """The host of the ``httpUrl`` in a broker's registration; None when the value does not hold one."""
    try:
        document = json.loads(value)
    except ValueError:
        return None
    url = document.get("httpUrl") if isinstance(document, dict) else None
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return host or None


class PeerAddresses:
    """The exempt addresses (sans-IO): which hosts are peers, what each resolved to last, the frozen set.

    Calling the object is the HTTP server's ``unlimited_address`` predicate."""

    def __init__(self, own_hosts: Iterable[str], *, addresses_max: int = PEER_ADDRESSES_MAX) -> None:
        self.own_hosts = frozenset(own_hosts)
        """This broker's own hosts (bind address, advertised host): their addresses are never exempt."""
        self._addresses_max = addresses_max
        self._peer_hosts: frozenset[str] = frozenset()
        self._resolved: dict[str, frozenset[str]] = {}
        self._failing: set[str] = set()
        self._shared: frozenset[str] = frozenset()
        self.exempt: frozenset[str] = frozenset()
        """The addresses of other live brokers that are not this broker's own."""

    def __call__(self, address: str) -> bool:
        if address in self.exempt:
            return True
        canonical = canonical_address(address)
        return canonical is not None and canonical in self.exempt

    def hosts(self) -> frozenset[str]:
        """Every host to resolve: the peers' and this broker's own."""
        return self._peer_hosts | self.own_hosts

    def set_peers(self, hosts: Iterable[str]) -> None:
        """The live peers' hosts, as registered now; a host no longer among them is forgotten."""
        self._peer_hosts = frozenset(hosts)
        keep = self.hosts()
        self._resolved = {host: found for host, found in self._resolved.items() if host in keep}
        self._failing &= keep
        self._rebuild()

    def resolved(self, host: str, addresses: Iterable[str]) -> None:
        """``host`` resolved to ``addresses`` (IP address texts, any form)."""
        found = frozenset(a for a in map(canonical_address, addresses) if a is not None)
        self._failing.discard(host)
        if found == self._resolved.get(host):
            return
        self._resolved[host] = found
        self._rebuild()

    def failed(self, host: str) -> bool:
        """``host`` did not resolve: its last good addresses stay. Whether this failure is news (to log)."""
        news = host not in self._failing
        self._failing.add(host)
        return news

    def _rebuild(self) -> None:
        own: set[str] = set()
        for host in self.own_hosts:
            own |= self._resolved.get(host, frozenset())
        peers: set[str] = set()
        for host in self._peer_hosts:
            peers |= self._resolved.get(host, frozenset())
        shared = frozenset(peers & own)
        if shared and shared != self._shared:
            log.warning(
                "peer brokers share this broker's address(es) %s: connections from there count against "
                "http_connections_per_ip_max (a peer cannot be told from a local client); give each broker "
                "an address of its own to lift the limit for proxied sessions",
                ", ".join(sorted(shared)),
            )
        self._shared = shared
        exempt = sorted(peers - own)
        if len(exempt) > self._addresses_max:
            log.warning(
                "%d peer broker addresses; only %d are exempt from http_connections_per_ip_max",
                len(exempt),
                self._addresses_max,
            )
            exempt = exempt[: self._addresses_max]
        self.exempt = frozenset(exempt)


def _addresses_of(host: str) -> list[str]:
    """``host``'s IP addresses (blocking: run on a worker thread)."""
    literal = canonical_address(host)
    if literal is not None:
        return [literal]
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]


async def maintain_peer_addresses(
    store: MetadataStore,
    peers: PeerAddresses,
    own_broker_id: str,
    *,
    refresh_interval_s: float = PEER_REFRESH_INTERVAL_S,
    resolve_timeout_s: float = RESOLVE_TIMEOUT_S,
) -> None:
    """Keep ``peers`` up to date until cancelled: on every broker registration that appears or disappears,
    and every ``refresh_interval_s``."""
    changed = trio.Event()
    limiter = trio.CapacityLimiter(1)

    def on_notification(notification: Notification) -> None:
        if notification.type in (NotificationType.CREATED, NotificationType.DELETED) and (
            notification.path.rpartition("/")[0] == BROKERS_ROOT
        ):
            changed.set()

    unregister = store.register_listener(on_notification)
    try:
        while True:
            try:
                peers.set_peers(await _peer_hosts(store, own_broker_id))
            except MetadataStoreError as exc:
                log.warning("peer broker addresses not refreshed (the last ones stay exempt): %s", exc)
            for host in sorted(peers.hosts()):
                await _resolve(peers, host, limiter, resolve_timeout_s)
            with trio.move_on_after(refresh_interval_s):
                await changed.wait()
            changed = trio.Event()
    finally:
        unregister()


async def _peer_hosts(store: MetadataStore, own_broker_id: str) -> set[str]:
    hosts: set[str] = set()
    children = await store.get_children(BROKERS_ROOT)
    for broker in children[:PEER_BROKERS_MAX]:
        if broker == own_broker_id:
            continue
        result = await store.get(f"{BROKERS_ROOT}/{broker}")
        host = None if result is None else registered_host(result.value)
        if host is not None:
            hosts.add(host)
    return hosts


async def _resolve(peers: PeerAddresses, host: str, limiter: trio.CapacityLimiter, timeout_s: float) -> None:
    error = f"no answer within {timeout_s}s"
    with trio.move_on_after(timeout_s):
        try:
            found = await trio.to_thread.run_sync(
                _addresses_of, host, limiter=limiter, abandon_on_cancel=True
            )
        except OSError as exc:  # socket.gaierror and the like
            error = str(exc)
        else:
            peers.resolved(host, found)
            return
    if peers.failed(host):
        log.warning("broker host %s did not resolve (%s); its last known addresses stay exempt", host, error)
